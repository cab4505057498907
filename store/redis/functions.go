package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/lua"
)

// A script is one of the store's scripts: the same Lua called by FCALL
// from a library loaded once (FUNCTION LOAD), where the server has
// functions (Redis 7 and later), else run by EVALSHA (EVAL when the server
// lost it). A library makes the script's functions once, where EVAL makes
// them on every call: a denial, a refund, a call with request IDs costs
// Redis a few µs instead of some tens.
type script struct {
	*goredis.Script               // the text EVAL runs (evalSource)
	lib             string        // the library (libSource)
	name            string        // the library's name, and its function's
	fn              *atomic.Int32 // the store's fnUnknown or fnOff; nil: EVALSHA only (see maxLibraries)
	loading         atomic.Bool   // a FUNCTION LOAD of lib is under way
	failed          atomic.Int64  // when a load last failed (Unix ns): the next waits libRetry
	run             []runLimit    // a baked policy's limits as a run's answer gives them (run_answer.go); nil: generic
}

// What a store knows of its server's functions (scripts.fn).
const (
	fnUnknown = iota // calls try FCALL
	fnOff            // the server has no functions (or may not call them): EVALSHA
)

// libLoadTimeout bounds a FUNCTION LOAD, sent beside the calls (load);
// libRetry is how long after a failed load (a full Redis, a timeout) the
// next may be sent: each costs the server a compilation of the library.
const (
	libLoadTimeout = 10 * time.Second
	libRetry       = 5 * time.Second
)

// newScript returns the script whose prelude of names and policy is head.
func newScript(head string, fn *atomic.Int32) *script {
	sum := sha1.Sum([]byte(head + lua.Source))
	name := "ratelimit_" + hex.EncodeToString(sum[:10])
	return &script{Script: goredis.NewScript(evalSource(head)), lib: libSource(name, head), name: name, fn: fn}
}

// libSource is the library text of the script whose prelude is head: the
// same Lua as evalSource, its functions made once, main called by the
// library's one function. A library may not read Lua's own functions
// while it loads: the first call binds them (std).
func libSource(name, head string) string {
	return "#!lua name=" + name + "\n" + head + "local KEYS, ARGV\n" + lua.Source +
		"redis.register_function('" + name + "', function(keys, argv)\n" +
		"  KEYS, ARGV = keys, argv\n" +
		"  if not floor then tonumber, floor, ceil, fmt, sub, find, byte, char = std() end\n" +
		"  return main()\n" +
		"end)\n"
}

// functions reports whether calls go by FCALL.
func (s *script) functions() bool { return s.fn != nil && s.fn.Load() != fnOff }

// call sends the script on c: FCALL, or EVALSHA where the server has no
// functions.
func (s *script) call(ctx context.Context, c goredis.Scripter, keys []string, args []any) *goredis.Cmd {
	if s.functions() {
		if f, ok := c.(interface {
			FCall(context.Context, string, []string, ...any) *goredis.Cmd
		}); ok {
			return f.FCall(ctx, s.name, keys, args...)
		}
	}
	return s.EvalSha(ctx, c, keys, args...)
}

// again reports whether a call that failed with err must be sent again as
// EVAL, the script not having run: the server lost the script (NOSCRIPT)
// or has no such function (its library is then loaded, on c, beside the
// calls), or has no functions at all (the store then keeps to EVALSHA).
func (s *script) again(ctx context.Context, c goredis.UniversalClient, err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	low := strings.ToLower(msg)
	switch {
	case isNoScript(err):
		return true
	case s.fn == nil: // never sent by FCALL
		return false
	case strings.HasPrefix(msg, "ERR Function not found"):
		s.load(c)
		return true
	case strings.Contains(low, "fcall") && (strings.Contains(low, "unknown command") || strings.HasPrefix(msg, "NOPERM")):
		// Calls sent before the first answer all get it: each goes again.
		s.fn.Store(fnOff)
		return true
	}
	return false
}

// load sends the library to the server c, or to every master or shard of
// a Cluster or a Ring, unless a load is under way or one failed within
// libRetry: the calls meanwhile go by EVAL. A server that refuses the
// library (it does not compile there, or an ACL forbids FUNCTION LOAD)
// turns functions off for the store.
func (s *script) load(c goredis.UniversalClient) {
	if c == nil || time.Since(time.Unix(0, s.failed.Load())) < libRetry || !s.loading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.loading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), libLoadTimeout)
		defer cancel()
		one := func(ctx context.Context, n *goredis.Client) error {
			err := n.FunctionLoad(ctx, s.lib).Err()
			if err != nil && strings.Contains(err.Error(), "already exists") {
				return nil
			}
			return err
		}
		var err error
		switch c := c.(type) {
		case *goredis.ClusterClient:
			err = c.ForEachMaster(ctx, one)
		case *goredis.Ring:
			err = c.ForEachShard(ctx, one)
		case *goredis.Client:
			err = one(ctx, c)
		default:
			err = c.FunctionLoad(ctx, s.lib).Err()
		}
		switch {
		case err == nil:
		case strings.HasPrefix(err.Error(), "ERR Error registering functions"), strings.HasPrefix(err.Error(), "NOPERM"):
			s.fn.Store(fnOff) // the server refuses the library: keep to EVALSHA
		default:
			s.failed.Store(time.Now().UnixNano())
		}
	}()
}
