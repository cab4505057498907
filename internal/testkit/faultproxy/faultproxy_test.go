package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hangGuard bounds every blocking step of these tests: a guard against
// hangs, far above what any step needs, not a timing assertion.
const hangGuard = 10 * time.Second

// echoServer is a loopback TCP server that sends back what it receives
// and half-closes when its peer does. It counts the bytes it received.
type echoServer struct {
	ln       net.Listener
	received atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func startEcho(t testing.TB) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					s.received.Add(int64(n))
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						if errors.Is(err, io.EOF) {
							_ = c.(*net.TCPConn).CloseWrite()
						}
						break
					}
				}
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

func (s *echoServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server and waits for its goroutines.
func (s *echoServer) Close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// dial connects to addr with every read and write bounded by hangGuard.
func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, hangGuard)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(hangGuard))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg on c and reads it back (from an echo server).
func roundTrip(t testing.TB, c net.Conn, msg []byte) {
	t.Helper()
	if err := tryRoundTrip(c, msg); err != nil {
		t.Fatalf("round trip of %d bytes: %v", len(msg), err)
	}
}

// expectNothing checks that nothing arrives on c within d: the proxy holds
// the data. (It cannot prove the data would never arrive, only that it did
// not arrive yet; the matching delivery is checked after the stall ends.)
func expectNothing(t testing.TB, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes, err %v; want a timeout with nothing read", n, err)
	}
	_ = c.SetDeadline(time.Now().Add(hangGuard))
}

// expectClosed checks that c is closed by the other side (EOF or reset)
// within hangGuard.
func expectClosed(t testing.TB, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(hangGuard))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %d bytes)", hangGuard, n)
	}
}

// eventually polls cond every 10ms until it is true, for at most hangGuard.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, hangGuard)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestForward(t *testing.T) {
	echo := startEcho(t)
	p := New(t, echo.Addr())
	if host, _, err := net.SplitHostPort(p.Addr()); err != nil || host != "127.0.0.1" {
		t.Fatalf("Addr %q, want 127.0.0.1:port", p.Addr())
	}
	var wg sync.WaitGroup
	for i := range 8 {
		c := dial(t, p.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j, size := range []int{1, 100, 64 << 10, 1 << 20} {
				msg := randomBytes(size, uint64(i*10+j))
				// t.Fatal must not run off the test goroutine: report instead.
				if err := tryRoundTrip(c, msg); err != nil {
					t.Errorf("conn %d, %d bytes: %v", i, size, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := p.Conns(); n != 8 {
		t.Errorf("Conns() = %d with 8 open connections, want 8", n)
	}
}

// tryRoundTrip is roundTrip for goroutines other than the test's.
func tryRoundTrip(c net.Conn, msg []byte) error {
	errc := make(chan error, 1)
	go func() { // write concurrently: large messages exceed the socket buffers
		_, err := c.Write(msg)
		errc <- err
	}()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs")
	}
	return nil
}

func TestLatency(t *testing.T) {
	echo := startEcho(t)
	p := New(t, echo.Addr())
	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("warm")) // connection set up, no latency yet

	const d = 40 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	roundTrip(t, c, []byte("ping"))
	rtt := time.Since(start)
	t.Logf("round trip with SetLatency(%v): %v", d, rtt)
	// A lower bound only: timers never fire early, so this cannot flake on
	// a slow machine.
	if rtt < 2*d {
		t.Errorf("round trip %v, want at least 2×%v (latency in both directions)", rtt, d)
	}
	// A large message crosses as many chunks; they keep their order.
	roundTrip(t, c, randomBytes(256<<10, 1))

	p.SetLatency(-time.Second) // counts as 0
	p.SetLatency(0)
	start = time.Now()
	roundTrip(t, c, []byte("pong"))
	t.Logf("round trip with no latency: %v", time.Since(start))
}

func TestStall(t *testing.T) {
	echo := startEcho(t)
	p := New(t, echo.Addr())
	c1 := dial(t, p.Addr())
	roundTrip(t, c1, []byte("before"))
	before := echo.received.Load()

	p.Stall(true)
	p.Stall(true) // idempotent
	if _, err := c1.Write([]byte("held1")); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, c1, 150*time.Millisecond)

	// New connections are accepted and held too.
	c2 := dial(t, p.Addr())
	if _, err := c2.Write([]byte("held2")); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, c2, 150*time.Millisecond)
	eventually(t, "both connections held", func() bool { return p.Conns() == 2 })
	if got := echo.received.Load(); got != before {
		t.Fatalf("the target received %d bytes during the stall, want 0", got-before)
	}

	p.Stall(false)
	p.Stall(false) // idempotent
	for i, c := range []net.Conn{c1, c2} {
		got := make([]byte, 5)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != fmt.Sprintf("held%d", i+1) {
			t.Fatalf("conn %d after the stall: %q, %v; want the held data", i+1, got, err)
		}
	}
	roundTrip(t, c1, []byte("after"))
}

// TestStallLatency: a stall that begins while a chunk waits out its latency
// holds that chunk too.
func TestStallLatency(t *testing.T) {
	echo := startEcho(t)
	p := New(t, echo.Addr())
	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("warm"))
	p.SetLatency(100 * time.Millisecond)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	p.Stall(true)
	expectNothing(t, c, 300*time.Millisecond)
	p.SetLatency(0)
	p.Stall(false)
	got := make([]byte, 1)
	if _, err := io.ReadFull(c, got); err != nil || got[0] != 'x' {
		t.Fatalf("after the stall: %q, %v", got, err)
	}
}

func TestDrop(t *testing.T) {
	echo := startEcho(t)
	p := New(t, echo.Addr())
	c1, c2 := dial(t, p.Addr()), dial(t, p.Addr())
	roundTrip(t, c1, []byte("one"))
	roundTrip(t, c2, []byte("two"))
	p.Drop()
	expectClosed(t, c1)
	expectClosed(t, c2)
	eventually(t, "no connection left", func() bool { return p.Conns() == 0 })
	if n := p.Dropped(); n != 2 {
		t.Errorf("Dropped() = %d, want 2", n)
	}
	roundTrip(t, dial(t, p.Addr()), []byte("new connections still work"))
}

// TestDropWhileStalled: data held by a stall is lost when its connection
// is dropped; it never reaches the target.
func TestDropWhileStalled(t *testing.T) {
	echo := startEcho(t)
	p := New(t, echo.Addr())
	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("warm"))
	before := echo.received.Load()
	p.Stall(true)
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, c, 50*time.Millisecond)
	p.Drop()
	expectClosed(t, c)
	p.Stall(false)
	c2 := dial(t, p.Addr())
	roundTrip(t, c2, []byte("fresh"))
	if got := echo.received.Load() - before; got != int64(len("fresh")) {
		t.Errorf("the target received %d bytes after the stall began, want only the %d of the new connection", got, len("fresh"))
	}
}

// TestHalfClose: when the client closes its writing side, the target sees
// EOF after all the data, and its answer still comes back.
func TestHalfClose(t *testing.T) {
	echo := startEcho(t)
	p := New(t, echo.Addr())
	p.SetLatency(5 * time.Millisecond)
	c := dial(t, p.Addr())
	msg := randomBytes(100<<10, 3)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read %d bytes, %v; want the %d bytes sent, then EOF", len(got), err, len(msg))
	}
	eventually(t, "connection released", func() bool { return p.Conns() == 0 })
}

// TestTargetDown: when the target cannot be reached, the client's
// connection is closed.
func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := New(t, dead)
	c := dial(t, p.Addr())
	expectClosed(t, c)
	eventually(t, "connection released", func() bool { return p.Conns() == 0 })
}

// TestMaxConns: beyond MaxConns, connections are closed at once; a slot
// freed is reused.
func TestMaxConns(t *testing.T) {
	echo := startEcho(t)
	p := New(t, echo.Addr())
	conns := make([]net.Conn, MaxConns)
	for i := range conns {
		conns[i] = dial(t, p.Addr())
		roundTrip(t, conns[i], []byte{byte(i)})
	}
	extra := dial(t, p.Addr())
	expectClosed(t, extra)
	if n := p.Conns(); n != MaxConns {
		t.Fatalf("Conns() = %d, want %d", n, MaxConns)
	}
	conns[0].Close()
	eventually(t, "a slot freed", func() bool { return p.Conns() == MaxConns-1 })
	roundTrip(t, dial(t, p.Addr()), []byte("reused"))
}

// TestCloseLeavesNothing: Close closes every connection (stalled ones
// included), waits for all goroutines, and may be called twice.
func TestCloseLeavesNothing(t *testing.T) {
	base := runtime.NumGoroutine()
	echo := startEcho(t)
	p := New(t, echo.Addr())
	p.SetLatency(time.Millisecond)
	var conns []net.Conn
	for range 10 {
		c := dial(t, p.Addr())
		roundTrip(t, c, []byte("x"))
		conns = append(conns, c)
	}
	p.Stall(true)
	for _, c := range conns[:5] {
		if _, err := c.Write([]byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	during := runtime.NumGoroutine()
	p.Close()
	p.Close()
	for _, c := range conns {
		expectClosed(t, c)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Error("the proxy still accepts after Close")
	}
	echo.Close()
	// The proxy's goroutines are gone when Close returns; the echo server's
	// when its Close returns. Only the runtime's own may linger briefly.
	var now int
	eventually(t, "goroutines back to the baseline", func() bool {
		now = runtime.NumGoroutine()
		return now <= base+2
	})
	t.Logf("goroutines: %d before, %d with 10 connections, %d after Close", base, during, now)
	if during > base+1+4*10+10+2 {
		t.Errorf("%d goroutines for 10 connections (baseline %d): more than 4 per connection plus the echo server's", during, base)
	}
}
