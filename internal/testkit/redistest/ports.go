package redistest

import (
	"fmt"
	"net"
	"sync"
)

// busOffset is the distance between a cluster node's client port and its
// cluster bus port when cluster-port is not configured.
const busOffset = 10000

var (
	portsMu sync.Mutex
	// reserved holds ports handed to servers of this test binary that are still
	// alive or may be restarted (a killed Server keeps its port for Restart),
	// so that parallel tests in one package never pick each other's ports.
	reserved = map[int]bool{}
)

// reservePort finds a loopback TCP port that is free right now and not held
// by another server of this process. With bus set, port+10000 must be free
// too (the cluster bus port). Another process may still take the port before
// redis-server binds it; callers retry on bind failure.
func reservePort(bus bool) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var lastErr error
	for attempt := 0; attempt < 100; attempt++ {
		port, err := probePort(0)
		if err != nil {
			lastErr = err
			continue
		}
		if reserved[port] {
			continue
		}
		if bus {
			if port+busOffset > 65535 || reserved[port+busOffset] {
				continue
			}
			if _, err := probePort(port + busOffset); err != nil {
				continue
			}
			reserved[port+busOffset] = true
		}
		reserved[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("redistest: no free loopback port found (last error: %v)", lastErr)
}

// releasePort undoes reservePort.
func releasePort(port int, bus bool) {
	portsMu.Lock()
	defer portsMu.Unlock()
	delete(reserved, port)
	if bus {
		delete(reserved, port+busOffset)
	}
}

// probePort binds 127.0.0.1:port (0 = any) and closes it again, returning the
// port that was bound.
func probePort(port int) (int, error) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return 0, err
	}
	p := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return p, nil
}
