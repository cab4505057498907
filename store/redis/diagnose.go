package redis

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Why a Redis store's error says more than "context deadline exceeded".
//
// go-redis v9 dials new connections on a goroutine of its own, bounded by
// DialTimeout rather than by the command's context, and retries a failed
// dial several times. A command on a client whose server is down therefore
// ends with the context's deadline, never with the dial's "connection
// refused"; that error reaches only go-redis's own log. Likewise a script
// call that got NOSCRIPT and then timed out on the EVAL that followed
// reports only the timeout.
//
// NewRedis installs a go-redis hook (diagHook) that remembers the latest
// such causes: failed dials, per address, until a dial to that address
// succeeds (or, on a single server, until a command gets an answer); and
// failed commands (connection errors of any command, error replies of the
// store's own commands, authentication errors), until a command gets an
// answer. When Take or Ping fails with an error that does
// not say why (the context's deadline, a full connection pool, an open
// node circuit, a network timeout), the error is extended with the most
// recent of them:
//
//	ratelimit/store: redis: context deadline exceeded (last connection error 12ms ago: dial tcp 127.0.0.1:1: connect: connection refused)
//
// The cause is in the message only: errors.Is and errors.As see the error
// as it was (context.DeadlineExceeded stays context.DeadlineExceeded), so
// a cause observed a moment earlier can never change how a caller
// classifies the failure itself.

// diagnostics holds one store's latest causes. Its methods are safe for
// concurrent use; a nil *diagnostics records and explains nothing.
type diagnostics struct {
	cmd atomic.Pointer[cause] // latest command failure since the last answer
	// single: the client talks to one server, so an answer to a command
	// also makes its failed dials history.
	single bool
	nDials atomic.Int32 // len(dials), read without the lock
	mu     sync.Mutex
	dials  map[string]*cause // address → latest failed dial, until one succeeds
	// remote is the remote address of the latest successful dial, the
	// only place a Sentinel client's current master can be read.
	remote string
}

// cause is one observed failure.
type cause struct {
	at   time.Time
	kind string // "connection error" or "error reply"
	err  error
}

// maxDialAddrs bounds the addresses whose failed dials are remembered.
const maxDialAddrs = 256

// diagnose installs the hooks on client and returns what they fill. On a
// Cluster or Ring the command hook goes on the client and the dial hook on
// each node's client: on every shard of a Ring, and on every Cluster node
// the client creates from now on (a Cluster creates its nodes on first
// use, so a store built before the client is used sees every dial).
func diagnose(client goredis.UniversalClient) *diagnostics {
	d := &diagnostics{dials: make(map[string]*cause)}
	switch c := client.(type) {
	case *goredis.ClusterClient:
		c.AddHook(diagHook{d: d, commands: true})
		c.OnNewNode(func(n *goredis.Client) { n.AddHook(diagHook{d: d, dials: true}) })
	case *goredis.Ring:
		c.AddHook(diagHook{d: d, commands: true})
		c.OnNewNode(func(n *goredis.Client) { n.AddHook(diagHook{d: d, dials: true}) })
		_ = c.ForEachShard(context.Background(), func(_ context.Context, n *goredis.Client) error {
			n.AddHook(diagHook{d: d, dials: true})
			return nil
		})
	default:
		d.single = true
		client.AddHook(diagHook{d: d, commands: true, dials: true})
	}
	return d
}

// diagHook is the go-redis hook that feeds a diagnostics: dials, commands,
// or both. It changes nothing it observes.
type diagHook struct {
	d        *diagnostics
	dials    bool
	commands bool
}

func (h diagHook) DialHook(next goredis.DialHook) goredis.DialHook {
	if !h.dials {
		return next
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		h.d.dialed(addr, conn, err)
		return conn, err
	}
}

func (h diagHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	if !h.commands {
		return next
	}
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		h.d.observe(cmd, err)
		return err
	}
}

func (h diagHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	if !h.commands {
		return next
	}
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.d.observe(c, c.Err())
		}
		if err != nil {
			// go-redis leaves the commands of a pipeline that could not
			// get a connection without an error of their own.
			h.d.observe(nil, err)
		}
		return err
	}
}

// dialed records the outcome of one dial to addr.
// A dial that ran out of time (DialTimeout) is a cause: the server did not
// accept; one cancelled by go-redis or the store is not.
func (d *diagnostics) dialed(addr string, conn net.Conn, err error) {
	if err != nil && errors.Is(err, context.Canceled) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.dials, addr)
		if conn != nil && conn.RemoteAddr() != nil {
			d.remote = conn.RemoteAddr().String()
		}
	} else {
		if _, ok := d.dials[addr]; !ok && len(d.dials) >= maxDialAddrs {
			clear(d.dials)
		}
		d.dials[addr] = &cause{at: time.Now(), kind: "connection error", err: err}
	}
	d.nDials.Store(int32(len(d.dials)))
}

// observe records the outcome of one command (nil for a whole pipeline):
// an answer clears the command cause; a failure that can explain a later
// timeout replaces it.
func (d *diagnostics) observe(cmd goredis.Cmder, err error) {
	if err == nil || errors.Is(err, goredis.Nil) {
		if d.cmd.Load() != nil {
			d.cmd.Store(nil)
		}
		if d.single && d.nDials.Load() > 0 {
			d.mu.Lock()
			clear(d.dials)
			d.nDials.Store(0)
			d.mu.Unlock()
		}
		return
	}
	if errors.Is(err, context.Canceled) || symptom(err) {
		return
	}
	kind := "connection error"
	var reply goredis.Error
	if errors.As(err, &reply) {
		// Error replies of the store's own commands, and authentication
		// errors of any. Not those of the connection handshake (CLIENT
		// SETINFO on an older Redis), nor of the application's own
		// commands on a shared client.
		if (cmd == nil || !ownCommand(cmd.Name())) && !authError(err) {
			return
		}
		kind = "error reply"
	}
	d.cmd.Store(&cause{at: time.Now(), kind: kind, err: err})
}

// ownCommand reports whether the store (Take, Ping) sends commands named so.
func ownCommand(name string) bool {
	switch strings.ToLower(name) {
	case "fcall", "evalsha", "eval", "evalsha_ro", "eval_ro", "info":
		return true
	}
	return false
}

func authError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "NOAUTH") || strings.HasPrefix(s, "WRONGPASS") || strings.HasPrefix(s, "NOPERM")
}

// symptom reports whether err says only that time ran out or that a
// circuit is open: not why.
func symptom(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, goredis.ErrPoolTimeout) ||
		errors.Is(err, ErrNodeUnavailable) || isNetTimeout(err)
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// latest returns the most recent cause still current, or nil.
func (d *diagnostics) latest() *cause {
	c := d.cmd.Load()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dc := range d.dials {
		if c == nil || dc.at.After(c.at) {
			c = dc
		}
	}
	return c
}

// remoteAddr returns the remote address of the latest successful dial, or "".
func (d *diagnostics) remoteAddr() string {
	if d == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.remote
}

// explain returns err extended with the latest cause when err is a symptom
// (see symptom) and a cause is known; otherwise err itself.
func (d *diagnostics) explain(err error) error {
	if d == nil || err == nil || !symptom(err) || errors.Is(err, context.Canceled) {
		return err
	}
	var done *diagnosedError
	if errors.As(err, &done) {
		return err
	}
	c := d.latest()
	if c == nil {
		return err
	}
	return &diagnosedError{err: err, cause: c.err, kind: c.kind, age: time.Since(c.at)}
}

// explainErr is explain for a deferred call on a named result.
func (d *diagnostics) explainErr(errp *error) { *errp = d.explain(*errp) }

// diagnosedError is an error extended with the cause observed before it.
// It unwraps to the error alone.
type diagnosedError struct {
	err   error
	cause error
	kind  string
	age   time.Duration
}

func (e *diagnosedError) Error() string {
	return e.err.Error() + " (last " + e.kind + " " + formatAge(e.age) + " ago: " + e.cause.Error() + ")"
}

func (e *diagnosedError) Unwrap() error { return e.err }

// formatAge writes d with a precision that suits its size: 850µs, 12ms,
// 1.25s, 3m0s.
func formatAge(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
	case d < time.Millisecond:
		d = d.Round(time.Microsecond)
	case d < time.Second:
		d = d.Round(time.Millisecond)
	case d < time.Minute:
		d = d.Round(10 * time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	return d.String()
}
