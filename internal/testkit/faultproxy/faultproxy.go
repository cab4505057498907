// Package faultproxy is a loopback TCP proxy for tests that injects network
// faults between a client and a server: added latency, a stall (connections
// are accepted and held but nothing is forwarded), and dropped connections.
//
// A Proxy listens on 127.0.0.1 only and forwards every accepted connection
// to one target address. It is closed by t.Cleanup (or Close), which closes
// every connection and waits for its goroutines: a Proxy leaves nothing
// running behind it. At most MaxConns connections are forwarded at once; a
// connection beyond that is closed as soon as it is accepted, so the number
// of goroutines stays bounded (1 + 4×MaxConns).
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// MaxConns is the largest number of connections a Proxy forwards at once.
const MaxConns = 128

// dialTimeout bounds how long the proxy waits for the target to accept.
const dialTimeout = 2 * time.Second

// chunkSize is the largest chunk read from one side at a time, and
// queueLen the number of chunks one direction holds while stalled or
// delayed before it stops reading (then TCP flow control pushes back).
const (
	chunkSize = 16 << 10
	queueLen  = 16
)

// Proxy forwards TCP connections from Addr to a target address, with faults
// injected on demand. Its methods are safe for concurrent use.
type Proxy struct {
	t      testing.TB
	target string
	ln     net.Listener

	latency atomic.Int64 // time.Duration added to each chunk
	dropped atomic.Int64 // connections closed by Drop

	mu     sync.Mutex
	gate   chan struct{}      // non-nil while stalled; closed when the stall ends
	conns  map[*link]struct{} // the connections being forwarded
	closed bool

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
	once sync.Once
}

// New starts a proxy on 127.0.0.1 (a free port) that forwards to target,
// a "host:port" address that should be on the loopback interface too. The
// proxy is closed when the test finishes. The target is dialled once per
// accepted connection; if it cannot be reached, that connection is closed.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen on 127.0.0.1: %v", err)
	}
	p := &Proxy{
		t:      t,
		target: target,
		ln:     ln,
		conns:  make(map[*link]struct{}),
		done:   make(chan struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's "127.0.0.1:port" address, for clients to dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of data by d, in both directions: a chunk
// read from one side is written to the other no sooner than d after it was
// read. A round trip therefore takes at least 2×d more. Chunks stay in
// order. 0 (the default) forwards at once; a negative d counts as 0.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// Stall stops (true) or resumes (false) forwarding. While stalled, the
// proxy still accepts connections and reads what both sides send, up to a
// bounded backlog, but delivers nothing: to the client, the server seems
// to hang. When the stall ends, the data held is delivered in order (as
// TCP would after a network partition heals), unless the connection was
// dropped or closed by the proxy in the meantime.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.gate == nil:
		p.gate = make(chan struct{})
	case !on && p.gate != nil:
		close(p.gate)
		p.gate = nil
	}
}

// Drop closes every connection being forwarded, on both sides, at once:
// data held by a stall or by latency is lost. New connections are accepted
// as usual afterwards.
func (p *Proxy) Drop() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		if l.kill() {
			p.dropped.Add(1)
		}
	}
}

// Conns returns the number of connections being forwarded now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Dropped returns how many connections Drop has closed so far.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Close stops accepting, closes every connection and waits until all the
// proxy's goroutines have returned. It is safe to call more than once;
// New registers it with t.Cleanup.
func (p *Proxy) Close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		links := make([]*link, 0, len(p.conns))
		for l := range p.conns {
			links = append(links, l)
		}
		p.mu.Unlock()
		close(p.done)
		_ = p.ln.Close()
		for _, l := range links {
			l.kill()
		}
		p.wg.Wait()
	})
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// A transient accept error (e.g. too many open files): back off
			// a little instead of spinning, unless the proxy is closing.
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		full := p.closed || len(p.conns) >= MaxConns
		var l *link
		if !full {
			l = &link{client: c, done: make(chan struct{})}
			p.conns[l] = struct{}{}
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if full {
			_ = c.Close()
			continue
		}
		go p.serve(l)
	}
}

// serve dials the target for l and forwards both directions until both
// are finished or l is killed.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.forget(l)
	d := net.Dialer{Timeout: dialTimeout}
	up, err := d.Dial("tcp", p.target)
	if err != nil {
		l.kill()
		return
	}
	if !l.setUpstream(up) {
		return // killed while dialling
	}
	toUp, toClient := make(chan chunk, queueLen), make(chan chunk, queueLen)
	l.writers.Store(2)
	p.wg.Add(3)
	go p.read(l, up, toClient)
	go p.write(l, up, toUp)
	go p.write(l, l.client, toClient)
	p.wg.Add(1) // read's Done; serve's own is deferred above
	p.read(l, l.client, toUp)
	<-l.done // both writers finished, or the link was killed
}

func (p *Proxy) forget(l *link) {
	l.kill()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// chunk is data read from one side, and when it was read.
type chunk struct {
	data []byte
	at   time.Time
}

// read copies chunks from src into q until src ends (EOF: q is closed, so
// the writer finishes what is queued, then half-closes its side) or fails
// (the link is killed).
func (p *Proxy) read(l *link, src net.Conn, q chan<- chunk) {
	defer p.wg.Done()
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c := chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}
			select {
			case q <- c:
			case <-l.done:
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				close(q)
			} else {
				l.kill()
			}
			return
		}
	}
}

// write delivers the chunks of q to dst, each after the stall (if any) and
// no sooner than the latency after it was read. When q is closed and
// drained, it half-closes dst; the last of a link's two writers to finish
// closes the link.
func (p *Proxy) write(l *link, dst net.Conn, q <-chan chunk) {
	defer p.wg.Done()
	defer func() {
		if l.writers.Add(-1) == 0 {
			l.kill() // both directions are finished
		}
	}()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-q:
		case <-l.done:
			return
		}
		if !ok {
			if cw, isTCP := dst.(*net.TCPConn); isTCP {
				_ = cw.CloseWrite()
			}
			return
		}
		if !p.waitUnstalled(l) {
			return
		}
		if wait := time.Until(c.at.Add(time.Duration(p.latency.Load()))); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
			// A stall may have begun during the delay.
			if !p.waitUnstalled(l) {
				return
			}
		}
		if _, err := dst.Write(c.data); err != nil {
			l.kill()
			return
		}
	}
}

// waitUnstalled blocks while the proxy is stalled; false means l was
// killed meanwhile.
func (p *Proxy) waitUnstalled(l *link) bool {
	for {
		p.mu.Lock()
		g := p.gate
		p.mu.Unlock()
		if g == nil {
			return true
		}
		select {
		case <-g:
		case <-l.done:
			return false
		}
	}
}

// link is one forwarded connection: the client's side and the target's.
type link struct {
	client net.Conn
	done   chan struct{} // closed by kill

	writers atomic.Int32 // writers still running

	mu     sync.Mutex
	up     net.Conn
	killed bool
}

// setUpstream records the target's side; false (and up closed) when the
// link was killed first.
func (l *link) setUpstream(up net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.killed {
		_ = up.Close()
		return false
	}
	l.up = up
	return true
}

// kill closes both sides; it reports whether this call did it.
func (l *link) kill() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.killed {
		return false
	}
	l.killed = true
	close(l.done)
	_ = l.client.Close()
	if l.up != nil {
		_ = l.up.Close()
	}
	return true
}
