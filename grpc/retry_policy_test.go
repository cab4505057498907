package ratelimitgrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
	ratelimitgrpc "github.com/ratelimitkit/ratelimit/grpc"
	"github.com/ratelimitkit/ratelimit/store"
)

// retryConfig is a stock grpc-go service config: the health service's
// calls retry RESOURCE_EXHAUSTED up to 5 attempts, with grpc-go's own
// backoff unless the server pushes back.
const retryConfig = `{"methodConfig": [{
	"name": [{"service": "grpc.health.v1.Health"}],
	"retryPolicy": {
		"maxAttempts": 5,
		"initialBackoff": "0.1s",
		"maxBackoff": "1s",
		"backoffMultiplier": 2,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
	}
}]}`

// attempts counts what the server sees: every attempt, and the times of
// the calls the handler served.
type attempts struct {
	mu      sync.Mutex
	arrived []time.Time
	served  []time.Time
	refused []time.Time
}

func (a *attempts) interceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	a.mu.Lock()
	a.arrived = append(a.arrived, time.Now())
	a.mu.Unlock()
	resp, err := next(ctx, req)
	if status.Code(err) == codes.ResourceExhausted {
		a.mu.Lock()
		a.refused = append(a.refused, time.Now())
		a.mu.Unlock()
	}
	return resp, err
}

// servedHealth is the health service, recording each call it serves.
type servedHealth struct {
	*health.Server
	a *attempts
}

func (s servedHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.a.mu.Lock()
	s.a.served = append(s.a.served, time.Now())
	s.a.mu.Unlock()
	return s.Server.Check(ctx, req)
}

// TestStockRetryPolicyHonoursRefusals: a stock grpc-go client with a
// service-config retry policy on RESOURCE_EXHAUSTED, 16 goroutines
// calling a 10/s method back to back for 5 s of real time. A refusal is
// trailers-only with grpc-retry-pushback-ms, so the client retries it,
// once the wait has passed, at a place of its own: the server sees at
// most 2.5 attempts per admission without holding (a first attempt may
// be refused, its retry is admitted) and at most 1.3 with the default
// holding, and never serves more than the limit. Through the package's
// client interceptor, the client paces itself: once one call has taught
// it the limit, the server refuses none of its attempts. (Calls that
// left before it knew, 16 against a limit of 10, may be refused and
// retried for a while: the pacing counts them under way, but the server
// places their retries.)
func TestStockRetryPolicyHonoursRefusals(t *testing.T) {
	const rate, goroutines, span = 10, 16, 5 * time.Second
	if testing.Short() {
		t.Skip("runs 20 s of real time; go test without -short runs it")
	}
	if raceDetector {
		t.Skip("measures attempts a second in real time, which the race detector's slowdown distorts; CI runs it without -race (.ci/run, step 9)")
	}
	for _, c := range []struct {
		name   string
		opts   []ratelimit.Option
		client bool    // through UnaryClientInterceptor
		most   float64 // attempts per second, in units of the rate
	}{
		{name: "holding off", opts: []ratelimit.Option{ratelimit.WithMaxHeld(0)}, most: 2.5},
		{name: "default holding", most: 1.3},
		{name: "client interceptor, holding off", opts: []ratelimit.Option{ratelimit.WithMaxHeld(0)}, client: true, most: 1.3},
	} {
		t.Run(c.name, func(t *testing.T) {
			lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy(fmt.Sprintf("%d/s", rate), ratelimit.Named("check")), c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			a := &attempts{}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(grpc.ChainUnaryInterceptor(a.interceptor, ratelimitgrpc.UnaryServerInterceptor(lim)))
			healthpb.RegisterHealthServer(srv, servedHealth{health.NewServer(), a})
			go srv.Serve(ln)
			defer srv.Stop()
			dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(retryConfig)}
			if c.client {
				dial = append(dial, grpc.WithUnaryInterceptor(ratelimitgrpc.UnaryClientInterceptor()))
			}
			conn, err := grpc.NewClient(ln.Addr().String(), dial...)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := healthpb.NewHealthClient(conn)
			if c.client { // one call teaches the interceptor the limit
				if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
					t.Fatal(err)
				}
			}

			start := time.Now()
			var wg sync.WaitGroup
			var failed atomic.Int64
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < span {
						// A call begun within the span ends as the server
						// and the retry policy make it: its deadline only
						// bounds the test.
						ctx, cancel := context.WithTimeout(context.Background(), 4*span)
						_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
						cancel()
						switch code := status.Code(err); {
						case err == nil:
						case code == codes.ResourceExhausted:
							failed.Add(1)
						default:
							t.Errorf("call: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			took := time.Since(start).Seconds()
			a.mu.Lock()
			served := append([]time.Time(nil), a.served...)
			late := 0 // refusals in the steady state: the last two seconds
			for _, at := range a.refused {
				if d := at.Sub(start); d >= span-2*time.Second && d < span {
					late++
				}
			}
			// The attempts a second the server sees in the steady state:
			// those that arrive from the first second to the end of
			// the span (not the first burst, nor the calls ending).
			steady := 0
			for _, at := range a.arrived {
				if d := at.Sub(start); d >= time.Second && d < span {
					steady++
				}
			}
			a.mu.Unlock()
			perSec := float64(steady) / (span - time.Second).Seconds()
			t.Logf("%.1f attempts a second from 1s to %s (%.2f× the limit); in all %d attempts in %.1fs, %d served, %d refused (%d in the last 2s of the span), %d calls gave up",
				perSec, span, perSec/rate, len(a.arrived), took, len(served), len(a.refused), late, failed.Load())
			if c.client && len(a.refused) > 0 {
				t.Errorf("%d attempts refused through the client interceptor once it knew the limit, want none", len(a.refused))
			}
			if perSec > c.most*rate {
				t.Errorf("%.1f attempts a second, want at most %.1f× the limit of %d", perSec, c.most, rate)
			}
			// Every call served was one the limit admitted: at most the
			// rate for each second of the run and its first burst. (The
			// handler's clock reads a held call later than the store
			// admitted it, so the windows of these times prove nothing
			// finer; the stores' checkers pin every window.)
			if most := int(float64(rate) * (took + 1)); len(served) > most {
				t.Errorf("%d served in %.1fs, want at most %d", len(served), took, most)
			}
			if len(served) < int(float64(rate)*span.Seconds()*0.8) {
				t.Errorf("%d served, want about the limit of %d a second for %s", len(served), rate, span)
			}
		})
	}
}
