package ratelimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestRealRestartKeepsCounters kills redis-server with SIGKILL, as a crash
// would, and starts it again on its append-only file: a key denied before
// stays denied, and every limit of another key has the same Remaining.
// Then a restart without the file (Restart: a fresh directory) loses them,
// as a Redis without persistence does.
func TestRealRestartKeepsCounters(t *testing.T) {
	for _, fsync := range []string{"always", "everysec"} {
		t.Run("appendfsync-"+fsync, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", fsync)
			client := srv.Client(t)
			st, err := store.NewRedis(client)
			if err != nil {
				t.Fatal(err)
			}
			// Periods far longer than the test: nothing leaves a window
			// while it runs, so Remaining can only change by a charge.
			policy := ratelimit.MustParsePolicy("3/h, 10/d", ratelimit.Named("persist"))
			lim, err := ratelimit.New(st, policy, ratelimit.WithFailureMode(ratelimit.FailClosed),
				ratelimit.WithTimeout(2*time.Second), ratelimit.WithCircuitBreaker(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			allowed := func(cost int64, key string) (bool, []int64) {
				t.Helper()
				d, err := lim.AllowN(ctx, cost, key)
				if err != nil {
					t.Fatalf("AllowN(%d, %q): %v", cost, key, err)
				}
				var rem []int64
				for _, l := range d.Limits {
					rem = append(rem, l.Remaining)
				}
				return d.Allowed, rem
			}

			var got []bool
			for range 4 {
				ok, _ := allowed(1, "denied")
				got = append(got, ok)
			}
			if want := []bool{true, true, true, false}; !slices.Equal(got, want) {
				t.Fatalf("3/h before the restart: %v, want %v", got, want)
			}
			allowed(1, "partial")
			_, before := allowed(0, "partial") // cost 0: a peek, no charge
			if want := []int64{2, 9}; !slices.Equal(before, want) {
				t.Fatalf("Remaining of a key charged once: %v, want %v", before, want)
			}

			srv.Kill(t) // SIGKILL: no shutdown, no final save
			srv.RestartKeepData(t)
			persistReconnect(ctx, t, client)
			if ok, _ := allowed(1, "denied"); ok {
				t.Error("after a restart on the append-only file, the denied key was admitted: its counters were lost")
			}
			if _, after := allowed(0, "partial"); !slices.Equal(after, before) {
				t.Errorf("after a restart on the append-only file, Remaining %v, want %v as before", after, before)
			}
			if _, rem := allowed(1, "partial"); !slices.Equal(rem, []int64{1, 8}) {
				t.Errorf("a charge after the restart left Remaining %v, want [1 8]", rem)
			}

			srv.Restart(t) // a fresh directory: as without persistence
			persistReconnect(ctx, t, client)
			if ok, _ := allowed(1, "denied"); !ok {
				t.Error("after a restart without the append-only file, the denied key is still denied: want a fresh budget")
			}
		})
	}
}

// persistReconnect lets a client whose connections died with the old process
// reconnect, within 5s.
func persistReconnect(ctx context.Context, t *testing.T, c *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PING after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
