package redis

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// A script call can run twice: go-redis sends a command again when the
// connection breaks before its reply arrives (MaxRetries), and a pipeline
// whole. So that a request is never charged twice, every take carries a
// resend ID, which go-redis writes anew each time it sends the call: the
// first write is the bare ID, every later one is marked as a resend and
// carries the call's horizon. A key remembers the IDs of its last
// ResendIDs charges and when it last pushed one out. A resend that
// finds its ID charges nothing; one that does not find it was not charged
// the first time (denied, or never run) unless the key pushed out an ID
// within the horizon: then the call fails with errResendLost, charging
// nothing, and the Limiter's fallback decides.

// errResendLost is the error of a resent call that found no record of its
// first run where that record may have been pushed out.
var errResendLost = errors.New("a resent call found no record of its first run: nothing was charged")

// resendMargin is added to a call's deadline to bound how long after its
// first run a resend may run.
const resendMargin = time.Second

// resendID is a call's resend ID as a script argument.
type resendID struct {
	id      string
	horizon int64 // µs after the first run within which a resend runs; 0: no bound
	sent    atomic.Int32
}

// MarshalBinary is how go-redis writes the argument: the ID the first
// time, "!" + ID + horizon every later time (a resend).
func (r *resendID) MarshalBinary() ([]byte, error) {
	if r.sent.Add(1) == 1 {
		return []byte(r.id), nil
	}
	return []byte("!" + r.id + strconv.FormatInt(r.horizon, 10)), nil
}

// String is the ID, for logs and hooks (it does not count as a send).
func (r *resendID) String() string { return r.id }

// resendID returns a new resend ID for one script call within ctx's
// deadline ("" when tests turned them off).
func (r *Store) resendID(ctx context.Context) any {
	if r.noResendIDs {
		return ""
	}
	if r.ridHook != nil {
		return r.ridHook()
	}
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"
	v := rand.Uint64()
	var b [layout.ResendIDLen]byte
	for i := range b {
		b[i] = digits[v&63]
		v >>= 6
	}
	rid := &resendID{id: string(b[:])}
	if dl, ok := ctx.Deadline(); ok {
		rid.horizon = (max(time.Until(dl), 0) + resendMargin).Microseconds()
	}
	return rid
}

// fresh returns args with every resend ID unsent, for a call sent anew by
// this package (EVAL after NOSCRIPT): it is a first run, not a resend.
func fresh(args []any) []any {
	out := args
	for i, a := range args {
		if r, ok := a.(*resendID); ok {
			if &out[0] == &args[0] {
				out = append([]any(nil), args...)
			}
			out[i] = &resendID{id: r.id, horizon: r.horizon}
		}
	}
	return out
}

// runScript sends one script call: FCALL or EVALSHA (script.call), then
// EVAL if the server lost the script or has no such function (after a
// restart, SCRIPT FLUSH or FUNCTION FLUSH; script.again), with its resend
// ID unsent again.
func runScript(ctx context.Context, c goredis.UniversalClient, s *script, keys []string, args []any) *goredis.Cmd {
	cmd := s.call(ctx, c, keys, args)
	if s.again(ctx, c, cmd.Err()) {
		return s.Eval(ctx, c, keys, fresh(args)...)
	}
	return cmd
}

// resendErr turns a resend the script could not match into errResendLost.
func resendErr(err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "RESEND ") {
		return errResendLost
	}
	return err
}
