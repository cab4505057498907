package redis

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
)

// TestKeysExpire: every key carries a TTL no longer than the policy's,
// so idle identities leave Redis by themselves.
func TestKeysExpire(t *testing.T) {
	mr := miniredis.RunT(t)
	t1 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(t1)
	s, _ := New(goredis.NewClient(&goredis.Options{Addr: mr.Addr()}))
	for _, alg := range algorithms {
		p := ratelimit.MustParsePolicy("10/s, 120/m", ratelimit.WithAlgorithm(alg))
		key := redisKey(DefaultPrefix, p.ID(), "ip:192.0.2.1")
		pttl := time.Duration(plan.Layout(p).TTLMS) * time.Millisecond // the policy's
		mustTake(t, s, p, 1, "ip:192.0.2.1")
		ttl := mr.TTL(key)
		if ttl < pttl*5/4 || ttl > pttl*5/4+2*time.Millisecond {
			t.Fatalf("%s: TTL %s after a charge, want %s (a quarter TTL ahead) rounded up, plus 1ms", alg, ttl, pttl*5/4)
		}
		// A charge soon after leaves the expiry alone (no PEXPIRE): it
		// still lies more than TTL ahead.
		mr.SetTime(t1.Add(pttl / 8))
		mr.FastForward(pttl / 8)
		mustTake(t, s, p, 1, "ip:192.0.2.1")
		if got := mr.TTL(key); got != ttl-pttl/8 {
			t.Fatalf("%s: TTL %s, want %s: refreshed though more than TTL was left", alg, got, ttl-pttl/8)
		}
		// Once less than TTL is left, a charge pushes it out again.
		mr.SetTime(t1.Add(pttl / 2))
		mr.FastForward(pttl * 3 / 8)
		mustTake(t, s, p, 1, "ip:192.0.2.1")
		if got := mr.TTL(key); got < pttl {
			t.Fatalf("%s: TTL %s after a charge with less than TTL left, want at least %s", alg, got, pttl)
		}
		mr.FastForward(mr.TTL(key))
		if mr.Exists(key) {
			t.Fatalf("%s: key still there after its TTL", alg)
		}
		mr.SetTime(t1)
	}
}
