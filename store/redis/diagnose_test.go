package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func newClient(t *testing.T, opt *goredis.Options) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustNewRedis(t *testing.T, c goredis.UniversalClient, opts ...Option) *Store {
	t.Helper()
	s, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// diagPolicy is the policy of the diagnostics tests.
var diagPolicy = ratelimit.MustParsePolicy("10/m", ratelimit.Named("diag"))

func takeWithin(s ratelimit.Store, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := s.Take(ctx, ratelimit.Request{Policy: diagPolicy, Keys: []string{"ip:203.0.113.7"}, Cost: 1})
	return err
}

// mustContain fails unless err's text contains every one of want.
func mustContain(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want one containing %q", what, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not contain %q", what, err, w)
		}
	}
}

// A store pointed at a port nobody listens on times out (go-redis dials on
// a goroutine of its own, retrying, so the command sees only the deadline);
// the error names the refused dial it could not see, with its address, and
// is still a context.DeadlineExceeded and nothing else. With or without
// ContextTimeoutEnabled, and with batching.
func TestDiagnoseRefused(t *testing.T) {
	addr := closedAddr(t)
	for _, tc := range []struct {
		name  string
		ctxOn bool
		opts  []Option
	}{
		{"ContextTimeoutEnabled", true, nil},
		{"no ContextTimeoutEnabled", false, nil},
		{"batching", true, []Option{WithBatching(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNewRedis(t, newClient(t, &goredis.Options{Addr: addr, ContextTimeoutEnabled: tc.ctxOn}), tc.opts...)
			// 250ms: long enough for the first dial to fail, shorter than
			// go-redis's five dial attempts 100ms apart.
			err := takeWithin(s, 250*time.Millisecond)
			mustContain(t, "Take", err, "ratelimit/store: redis: ", "context deadline exceeded (last connection error ",
				" ago: dial tcp "+addr+": connect: connection refused)")
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v is not context.DeadlineExceeded", err)
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("error %v unwraps to the cause: its identity must stay the timeout", err)
			}
		})
	}
}

// The Limiter's error hook and log carry the cause, not only the deadline.
func TestDiagnoseRefusedLimiter(t *testing.T) {
	addr := closedAddr(t)
	s := mustNewRedis(t, newClient(t, &goredis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	var logBuf bytes.Buffer
	var mu sync.Mutex
	var hooked []error
	lim, err := ratelimit.New(s, diagPolicy, ratelimit.WithTimeout(250*time.Millisecond),
		ratelimit.WithFailureMode(ratelimit.FailOpen), // no fallback: Allow returns the error
		ratelimit.WithLogger(slog.New(slog.NewTextHandler(&logBuf, nil))),
		ratelimit.WithErrorHook(func(_ *http.Request, err error) {
			mu.Lock()
			hooked = append(hooked, err)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.Allow(context.Background(), "tenant:a")
	if !d.Allowed {
		t.Errorf("FailOpen: want the request allowed, got %+v", d)
	}
	want := []string{"ratelimit: store: no answer within 250ms: ratelimit/store: redis: context deadline exceeded",
		"connect: connection refused"}
	mustContain(t, "Allow", err, want...)
	mu.Lock()
	if len(hooked) != 1 {
		t.Fatalf("error hook called %d times, want 1", len(hooked))
	}
	mustContain(t, "error hook", hooked[0], want...)
	mu.Unlock()
	if log := logBuf.String(); !strings.Contains(log, "connect: connection refused") {
		t.Errorf("log does not name the cause:\n%s", log)
	}
}

// slowScripts makes the named commands (lower case) of c wait until their
// context ends, as a stalled server would. Added after NewRedis, it runs
// inside the store's hook, which sees what it returns.
type slowScripts map[string]bool

func (h slowScripts) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h slowScripts) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
func (h slowScripts) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h[cmd.Name()] {
			<-ctx.Done()
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

// EVALSHA answered NOSCRIPT (the server flushed its scripts), and the EVAL
// sent next timed out: the error says so. Once a script call gets an
// answer, the NOSCRIPT is history and a later timeout does not blame it.
func TestDiagnoseNoScript(t *testing.T) {
	mr := miniredis.RunT(t)
	c := newClient(t, &goredis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	s := mustNewRedis(t, c)
	// A first call teaches the store that the server has no functions
	// (miniredis): it keeps to EVALSHA from then on.
	if err := takeWithin(s, 5*time.Second); err != nil {
		t.Fatalf("first Take: %v", err)
	}
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	slow := slowScripts{"eval": true}
	c.AddHook(slow)

	err := takeWithin(s, 50*time.Millisecond)
	mustContain(t, "Take", err, "context deadline exceeded (last error reply ", "NOSCRIPT")

	delete(slow, "eval") // EVAL answers: the script is loaded
	if err := takeWithin(s, 5*time.Second); err != nil {
		t.Fatalf("Take with EVAL answering: %v", err)
	}
	slow["evalsha"] = true
	err = takeWithin(s, 50*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "(last") {
		t.Errorf("after an answer: error %v, want a bare deadline (no stale cause)", err)
	}
}

// An error reply (here Redis out of memory: maxmemory 1 byte, no
// eviction) names itself, through the store and the Limiter. (A counter key
// of the wrong type is no longer one: the script replaces it, see
// TestWrongTypeHeals.)
func TestDiagnoseRealErrorReply(t *testing.T) {
	srv := redistest.StartServer(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	s := mustNewRedis(t, newClient(t, &goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true}))
	mustContain(t, "Take", takeWithin(s, time.Second), "ratelimit/store: redis: ", "OOM")
	var hooked error
	lim, err := ratelimit.New(s, diagPolicy, ratelimit.WithErrorHook(func(_ *http.Request, err error) { hooked = err }),
		ratelimit.WithFailureMode(ratelimit.FailOpen), // no fallback: Allow returns the error
		ratelimit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	_, err = lim.Allow(context.Background(), "ip:203.0.113.7")
	mustContain(t, "Allow", err, "OOM")
	mustContain(t, "error hook", hooked, "OOM")
}

// A server that requires a password: without one, and with a wrong one,
// Take and Ping say NOAUTH and WRONGPASS; with the right one Ping reports
// the server and its version.
func TestDiagnoseRealAuth(t *testing.T) {
	srv := redistest.StartServer(t)
	// redistest's readiness probe speaks without a password, so the
	// password is set once the server is up.
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", "x").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ password, want string }{
		{"", "NOAUTH"},
		{"y", "WRONGPASS"},
	} {
		s := mustNewRedis(t, newClient(t, &goredis.Options{Addr: srv.Addr, Password: tc.password, ContextTimeoutEnabled: true}))
		mustContain(t, "Take, password "+tc.password, takeWithin(s, 2*time.Second), "ratelimit/store: redis: "+tc.want)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := s.Ping(ctx)
		cancel()
		mustContain(t, "Ping, password "+tc.password, err, "ratelimit/store: ping "+srv.Addr+": ", tc.want)
		if len(info.Nodes) != 0 {
			t.Errorf("Ping, password %q: nodes %+v, want none", tc.password, info.Nodes)
		}
	}
	s := mustNewRedis(t, newClient(t, &goredis.Options{Addr: srv.Addr, Password: "x", ContextTimeoutEnabled: true}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := s.Ping(ctx)
	if err != nil {
		t.Fatalf("Ping with the password: %v", err)
	}
	if len(info.Nodes) != 1 || info.Nodes[0].Addr != srv.Addr {
		t.Fatalf("Ping: %+v, want one node at %s", info, srv.Addr)
	}
	if major, ok := majorVersion(info.Nodes[0].Version); !ok || major < 5 {
		t.Errorf("Ping: version %q, want 5 or later", info.Nodes[0].Version)
	}
	if got, want := info.String(), "redis "+info.Nodes[0].Version+" at "+srv.Addr; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// A server that goes away after answering: the error names the broken or
// refused connection, and the server's return clears it.
func TestDiagnoseRealRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	s := mustNewRedis(t, newClient(t, &goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1}))
	if err := takeWithin(s, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	var err error
	for i := 0; i < 5; i++ { // the pooled connection fails first, then dials are refused
		if err = takeWithin(s, 250*time.Millisecond); errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	mustContain(t, "Take after Kill", err, "context deadline exceeded (last connection error ", "connection refused")
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for err = takeWithin(s, time.Second); err != nil && time.Now().Before(deadline); err = takeWithin(s, time.Second) {
	}
	if err != nil {
		t.Fatalf("Take after Restart: %v", err)
	}
	if c := s.diag.latest(); c != nil {
		t.Errorf("after the server answered again, cause %v is still current", c.err)
	}
}

func TestPing(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		s := mustNewRedis(t, newClient(t, &goredis.Options{Addr: mr.Addr()}))
		info, err := s.Ping(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Nodes) != 1 || info.Nodes[0].Addr != mr.Addr() || info.Nodes[0].Version != "" {
			t.Fatalf("Ping: %+v, want one node at %s without a version", info, mr.Addr())
		}
		if got, want := info.String(), "redis (version unknown) at "+mr.Addr(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	})
	t.Run("refused", func(t *testing.T) {
		addr := closedAddr(t)
		s := mustNewRedis(t, newClient(t, &goredis.Options{Addr: addr, ContextTimeoutEnabled: true}))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, err := s.Ping(ctx)
		// Within 2s go-redis gives up dialing and returns the dial's
		// error; with a shorter deadline the cause is appended instead.
		mustContain(t, "Ping", err, "ratelimit/store: ping "+addr+": INFO: ", "dial tcp "+addr+": connect: connection refused")
		if len(info.Nodes) != 0 {
			t.Errorf("nodes %+v, want none", info.Nodes)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err = s.Ping(ctx)
		mustContain(t, "Ping within 50ms", err, "ratelimit/store: ping "+addr+": INFO: ", "connection refused")
	})
	t.Run("ring", func(t *testing.T) {
		m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
		ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"s1": m1.Addr(), "s2": m2.Addr()}})
		t.Cleanup(func() { _ = ring.Close() })
		s := mustNewRedis(t, ring)
		info, err := s.Ping(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Nodes) != 2 || !strings.HasPrefix(info.String(), "2 servers: redis (version unknown) at ") {
			t.Fatalf("Ping: %v (%+v), want both shards", info, info.Nodes)
		}
	})
	t.Run("no scripts", func(t *testing.T) {
		mr := miniredis.RunT(t)
		c := newClient(t, &goredis.Options{Addr: mr.Addr()})
		s := mustNewRedis(t, c)
		c.AddHook(refuse{"eval": "NOPERM this user has no permissions to run the 'eval' command"})
		_, err := s.Ping(context.Background())
		mustContain(t, "Ping", err, "ratelimit/store: ping "+mr.Addr()+": cannot run Lua scripts (EVAL): NOPERM")
	})
}

// refuse answers the named commands (lower case) with an error reply.
type refuse map[string]string

func (h refuse) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h refuse) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
func (h refuse) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if msg, ok := h[cmd.Name()]; ok {
			return replyErr(msg)
		}
		return next(ctx, cmd)
	}
}

// Every master of a real Cluster answers Ping.
func TestPingRealCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := mustNewRedis(t, cl.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Nodes) != 3 || !strings.HasPrefix(info.String(), "3 servers: redis ") {
		t.Fatalf("Ping: %v, want 3 masters", info)
	}
}

func TestExplain(t *testing.T) {
	d := &diagnostics{dials: map[string]*cause{}}
	if err := d.explain(context.DeadlineExceeded); err != context.DeadlineExceeded {
		t.Errorf("no cause known: got %v, want the error unchanged", err)
	}
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	d.dialed("127.0.0.1:1", nil, refused)
	d.observe(named("evalsha"), replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"))
	d.observe(named("client"), replyErr("ERR unknown subcommand 'setinfo'")) // handshake noise: ignored
	d.observe(named("get"), replyErr("ERR not ours"))                        // another command's reply: ignored
	d.observe(nil, replyErr("ERR a pipeline's"))                             // not known to be ours: ignored
	got := d.explain(fmt.Errorf("ratelimit/store: redis: %w", context.DeadlineExceeded))
	if !strings.Contains(got.Error(), "(last error reply ") || !strings.Contains(got.Error(), "WRONGTYPE") {
		t.Errorf("explain = %v, want the latest cause, the WRONGTYPE reply", got)
	}
	if again := d.explain(got); again != got {
		t.Errorf("explain twice: %v", again)
	}
	for _, err := range []error{
		errors.New("NOAUTH Authentication required."),
		context.Canceled,
		nil,
	} {
		if got := d.explain(err); got != err {
			t.Errorf("explain(%v) = %v, want it unchanged (it says why, or the caller left)", err, got)
		}
	}
	d.observe(named("evalsha"), nil) // an answer: on a Cluster, only the command cause goes
	if c := d.latest(); c == nil || c.err != refused {
		t.Errorf("after an answer, cause %v, want the failed dial (per address)", c)
	}
	d.single = true
	d.observe(named("evalsha"), nil)
	if c := d.latest(); c != nil {
		t.Errorf("single server answered: cause %v still current", c.err)
	}
	d.dialed("127.0.0.1:1", nil, refused)
	d.dialed("127.0.0.1:1", nil, nil)
	if c := d.latest(); c != nil {
		t.Errorf("after a successful dial: cause %v still current", c.err)
	}
	var nilDiag *diagnostics
	if err := nilDiag.explain(context.DeadlineExceeded); err != context.DeadlineExceeded {
		t.Errorf("nil diagnostics: %v", err)
	}
}

func TestFormatAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{1234 * time.Nanosecond, "1µs"},
		{12345 * time.Microsecond, "12ms"},
		{1256 * time.Millisecond, "1.26s"},
		{150*time.Second + 400*time.Millisecond, "2m30s"},
	} {
		if got := formatAge(tc.d); got != tc.want {
			t.Errorf("formatAge(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// replyErr is an error reply, as go-redis reports one (a goredis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (e replyErr) RedisError()   {}

// named returns a command whose Name is name.
func named(name string) goredis.Cmder { return goredis.NewCmd(context.Background(), name) }
