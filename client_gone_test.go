package ratelimit_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestHandlerClientGone: a client that went away (its request's context
// is canceled) does not decide the request: the store still gets its own
// timeout, its failure goes to the fallback, and the answer is the same as
// for a client that stayed.
func TestHandlerClientGone(t *testing.T) {
	for _, mode := range []ratelimit.FailureMode{ratelimit.FailOpen, ratelimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			var h hookRecorder
			fallback := &recStore{}
			lim := newLimiter(t, &blockStore{}, ratelimit.MustParsePolicy("2/m"), append(h.options(),
				ratelimit.WithFailureMode(mode), ratelimit.WithFallback(fallback), ratelimit.WithTimeout(20*time.Millisecond),
				ratelimit.WithLogger(discardLogger))...)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			w := httptest.NewRecorder()
			returnsWithin(t, func() { lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA).WithContext(ctx)) })
			if w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
				t.Errorf("status %d, RateLimit %q: want the fallback's admission, with headers", w.Code, w.Header().Get("RateLimit"))
			}
			if n := len(fallback.requests()); n != 1 {
				t.Errorf("fallback asked %d times, want 1", n)
			}
			if errs := h.errors(); len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) || errors.Is(errs[0], context.Canceled) {
				t.Errorf("hook errors %v, want one timeout, no cancellation", errs)
			}
		})
	}
}

// halfClosed sends one complete request over a fresh TCP connection, then
// closes its write side (as a client that has nothing more to say does),
// and returns the status it reads back, 0 if none.
func halfClosed(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /sms HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"); err != nil {
		return 0
	}
	_ = c.(*net.TCPConn).CloseWrite() // net/http now cancels the request's context
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestHalfClosedClientsStayLimited: a client that half-closes its
// connection right after its request must not get past the limit. net/http
// cancels such a request's context, often while the store call is in
// flight; the decision must not depend on it (no "store failure" for a fail
// open Limiter to serve uncharged). Real TCP clients against a real server,
// miniredis and real Redis (with and without ContextTimeoutEnabled), with
// and without a fallback store: under 5/h, at most 5 of 300 half-closed
// requests may reach the protected handler.
func TestHalfClosedClientsStayLimited(t *testing.T) {
	stores := map[string]func(t *testing.T) ratelimit.Store{
		"miniredis": func(t *testing.T) ratelimit.Store {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { c.Close() })
			return mustRedis(t, c)
		},
	}
	if realRedisAvailable() {
		srv := redistest.StartServer(t)
		for _, honored := range []bool{true, false} {
			name := "real"
			if !honored {
				name = "real-no-ctx-timeout"
			}
			stores[name] = func(t *testing.T) ratelimit.Store {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: honored})
				t.Cleanup(func() { c.Close() })
				return mustRedis(t, c)
			}
		}
	}
	policyN := 0
	for name, mk := range stores {
		for _, withFallback := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: "+fallback"}[withFallback], func(t *testing.T) {
				policyN++
				p := ratelimit.MustParsePolicy("5/h", ratelimit.Named("sms"+string(rune('a'+policyN))))
				// A generous timeout: only the clients' leaving may matter
				// here, not a store slowed down by a loaded machine (a
				// timeout is a store failure, which FailOpen serves).
				var storeErrs atomic.Int64
				opts := []ratelimit.Option{ratelimit.WithLogger(discardLogger), ratelimit.WithTimeout(10 * time.Second),
					ratelimit.WithErrorHook(func(*http.Request, error) { storeErrs.Add(1) })}
				if withFallback {
					opts = append(opts, ratelimit.WithFallback(store.NewMemory()))
				}
				lim := newLimiter(t, mk(t), p, opts...)
				var served atomic.Int64
				srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					served.Add(1) // the side effect a bypass would buy: an SMS sent
					io.WriteString(w, "sent")
				})))
				defer srv.Close()
				addr := srv.Listener.Addr().String()
				const clients, each = 10, 30
				var ok, limited atomic.Int64
				var wg sync.WaitGroup
				deadline := time.Now().Add(30 * time.Second)
				for g := 0; g < clients; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < each && time.Now().Before(deadline); i++ {
							switch halfClosed(addr) {
							case http.StatusOK:
								ok.Add(1)
							case http.StatusTooManyRequests:
								limited.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				t.Logf("%d half-closed requests: handler ran %d times, %d read 200, %d read 429", clients*each, served.Load(), ok.Load(), limited.Load())
				if served.Load() > 5 {
					t.Fatalf("the handler ran %d times under 5/h (%d store errors): half-closed connections bypass the limit", served.Load(), storeErrs.Load())
				}
				if storeErrs.Load() != 0 {
					t.Fatalf("%d store errors: a client leaving must not look like a store failure", storeErrs.Load())
				}
				if limited.Load() == 0 {
					t.Fatal("no client read a 429: the test did not reach the limit")
				}
			})
		}
	}
}
