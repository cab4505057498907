package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

// benchPolicy has the shape of "10/s, 120/m, 240/h" with rates high enough
// that the benchmarks stay on the allow path.
var benchPolicy = ratelimit.MustParsePolicy("1000000/s, 12000000/m, 24000000/h")

// benchIPs is the number of distinct clients the benchmarks cycle through.
const benchIPs = 1 << 12

// benchRequests returns one GET per client address.
func benchRequests() []*http.Request {
	reqs := make([]*http.Request, benchIPs)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/api/items", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&0xff) + ":40000"
	}
	return reqs
}

// discard is a ResponseWriter that keeps nothing but its header map, which
// it clears before each request.
type discard struct {
	h    http.Header
	code int
}

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(p []byte) (int, error) { return len(p), nil }
func (w *discard) WriteHeader(code int)        { w.code = code }

// fixedStore admits everything without locking: it measures the Limiter
// alone.
type fixedStore struct{ d ratelimit.Decision }

func (s *fixedStore) Take(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
	return s.d, nil
}

type benchStore struct {
	name  string
	store ratelimit.Store
}

// benchStores returns the memory store, a store that always allows (the
// Limiter alone), and, when redis-server is on PATH, the Redis store on a
// real redis-server on loopback.
func benchStores(b *testing.B) []benchStore {
	out := []benchStore{
		{"memory", store.NewMemory()},
		{"fixed", &fixedStore{d: allowAll(ratelimit.Request{Policy: benchPolicy})}},
	}
	if _, err := exec.LookPath("redis-server"); err == nil {
		srv := redistest.StartServer(b)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { client.Close() })
		rs, err := store.NewRedis(client)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, benchStore{"redis", rs})
	}
	return out
}

var noContent = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })

func BenchmarkHandler(b *testing.B) {
	for _, s := range benchStores(b) {
		b.Run(s.name, func(b *testing.B) {
			srv := newLimiter(b, s.store, benchPolicy).Handler(noContent)
			reqs := benchRequests()
			w := &discard{h: http.Header{}}
			denied := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clear(w.h)
				w.code = 0
				srv.ServeHTTP(w, reqs[i%benchIPs])
				if w.code != http.StatusNoContent {
					denied++
				}
			}
			b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
		})
	}
}

func BenchmarkHandlerParallel(b *testing.B) {
	for _, s := range benchStores(b) {
		b.Run(s.name, func(b *testing.B) {
			srv := newLimiter(b, s.store, benchPolicy).Handler(noContent)
			var denied, next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				reqs := benchRequests()
				w := &discard{h: http.Header{}}
				i := int(next.Add(1)) * 997
				for pb.Next() {
					clear(w.h)
					w.code = 0
					srv.ServeHTTP(w, reqs[i%benchIPs])
					if w.code != http.StatusNoContent {
						denied.Add(1)
					}
					i++
				}
			})
			b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
		})
	}
}

func BenchmarkAllow(b *testing.B) {
	lim := newLimiter(b, store.NewMemory(), benchPolicy)
	keys := make([]string, benchIPs)
	for i := range keys {
		keys[i] = "job:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := lim.Allow(ctx, keys[i%benchIPs]); err != nil {
			b.Fatal(err)
		}
	}
}
