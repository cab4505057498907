package redis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// benchKeys are 1,000 identities, so the benchmarks measure the allow
// path of a realistic spread rather than one hot key.
var benchKeys = func() []string {
	k := make([]string, 1000)
	for i := range k {
		k[i] = "ip:198.51.100." + strconv.Itoa(i)
	}
	return k
}()

// benchPolicy is the README's 3-limit policy, large enough that every call
// in a benchmark is admitted.
var benchPolicy = ratelimit.MustParsePolicy("1000000/s, 60000000/m, 1000000000/h")

func benchTake(b *testing.B, s ratelimit.Store, keysPerReq int) {
	ctx := context.Background()
	var n atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		keys := make([]string, keysPerReq)
		for pb.Next() {
			i := n.Add(1)
			for j := range keys {
				keys[j] = benchKeys[(int(i)+j*500)%len(benchKeys)]
			}
			d, err := s.Take(ctx, ratelimit.Request{Policy: benchPolicy, Keys: keys, Cost: 1})
			if err != nil || !d.Allowed {
				b.Fatalf("Take: %v %+v", err, d)
			}
		}
	})
}

// BenchmarkMemoryTake: the memory store, 3-limit sliding window, one key.
// Run with -cpu 1,2 for the serial and parallel figures.
func BenchmarkMemoryTake(b *testing.B) {
	for _, alg := range algorithms {
		b.Run(alg.String(), func(b *testing.B) {
			p, err := ratelimit.ParsePolicy("1000000/s, 60000000/m, 1000000000/h", ratelimit.WithAlgorithm(alg))
			if err != nil {
				// The sliding log keeps at most MaxLogRate per period,
				// too few for every call to be admitted here; bench/
				// measures it (section e).
				b.Skipf("no policy at these rates: %v", err)
			}
			m := memory.New()
			ctx := context.Background()
			var n atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				keys := make([]string, 1)
				for pb.Next() {
					keys[0] = benchKeys[n.Add(1)%uint64(len(benchKeys))]
					if d, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil || !d.Allowed {
						b.Fatalf("Take: %v %+v", err, d)
					}
				}
			})
		})
	}
}

// BenchmarkRedisTake: the Redis store on a real redis-server on loopback,
// 3-limit policy, one and two identities per request.
//
// The "c64" variants run 64 concurrent callers (the -cpu value times the
// parallelism), with batching (the default) and without, to compare
// throughput.
func BenchmarkRedisTake(b *testing.B) {
	srv := redistest.StartServer(b)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	b.Cleanup(func() { client.Close() })
	s, err := New(client)
	if err != nil {
		b.Fatal(err)
	}
	unbatched, err := New(client, WithBatching(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("1key", func(b *testing.B) { benchTake(b, s, 1) })
	b.Run("2keys", func(b *testing.B) { benchTake(b, s, 2) })
	c64 := func(s ratelimit.Store) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
			benchTake(b, s, 1)
		}
	}
	b.Run("1key-c64", c64(s))
	b.Run("1key-c64-unbatched", c64(unbatched))
}

// BenchmarkCommonPath compares, in one run, the script's lean path for the
// common call (one key, no request ID, a plain Take) with its general path
// for the same calls, on a real redis-server: the Redis CPU each call
// costs (INFO commandstats, "redis-µs/op", the figure batching cannot
// hide), the HMGETs it runs ("hmget/op": 1, plus one when a sliding
// window's key skipped sub-buckets since its last charge, to clear them;
// more means the general path) and the calls
// a second at 64 callers. The rounds alternate, so that outside load falls
// on both alike. Run with -benchtime 20000x.
func BenchmarkCommonPath(b *testing.B) {
	srv := redistest.StartServer(b)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	b.Cleanup(func() { client.Close() })
	for _, spec := range []string{"1000000/s", "1000000/s, 60000000/m, 1000000000/h"} {
		for _, general := range []bool{false, true} {
			name := map[bool]string{false: "lean", true: "general"}[general]
			b.Run(fmt.Sprintf("%dlimits/%s", strings.Count(spec, ",")+1, name), func(b *testing.B) {
				s, err := New(client)
				if err != nil {
					b.Fatal(err)
				}
				s.general = general
				p := ratelimit.MustParsePolicy(spec, ratelimit.Named("common"))
				ctx := context.Background()
				mustTake(b, s, p, 1, benchKeys[0]) // loads the script
				if err := client.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
				var n atomic.Uint64
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					keys := make([]string, 1)
					for pb.Next() {
						keys[0] = benchKeys[n.Add(1)%uint64(len(benchKeys))]
						if d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil || !d.Allowed {
							b.Fatalf("Take: %v %+v", err, d)
						}
					}
				})
				b.StopTimer()
				stats := commandStatsFull(b, client)
				st := stats["fcall"]
				if st.calls == 0 {
					st = stats["evalsha"]
				}
				b.ReportMetric(st.usec/float64(max(st.calls, 1)), "redis-µs/op")
				b.ReportMetric(float64(stats["hmget"].calls)/float64(max(st.calls, 1)), "hmget/op")
			})
		}
	}
}
