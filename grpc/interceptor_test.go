package ratelimitgrpc_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
)

// details returns the RetryInfo and QuotaFailure of a status error.
func details(err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// TestUnaryAdmitsTheRate: a client calling a 5/s method as fast as it can,
// through a real listener, is admitted 5 a second; every other call ends
// with ResourceExhausted in a trailers-only response (no header metadata:
// a retry policy may retry it): a RetryInfo of the wait, as
// grpc-retry-pushback-ms in the trailer too, at least the store's
// Retry-After and each refusal's a place (200ms) after the one before, a
// QuotaFailure naming the limit and the rate-limit fields in the
// trailer. On memory, miniredis and a real Redis, each on a controlled
// clock.
func TestUnaryAdmitsTheRate(t *testing.T) {
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s, clk := backend(t)
			lim := newLimiter(t, s, ratelimit.MustParsePolicy("5/s", ratelimit.Named("check")))
			client, _ := serve(t, lim)
			// The refusals' places: a refusal happens between its call's
			// start and end, so the latest a place can be is its call's
			// end plus its wait, the earliest its start plus its wait.
			var lastEarliest time.Time
			for sec := range 3 {
				admitted := 0
				for call := range 12 {
					started := time.Now()
					var md, tr metadata.MD
					_, err := client.Check(background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md), grpc.Trailer(&tr))
					if err == nil {
						admitted++
						if got := md.Get("ratelimit-policy"); len(got) != 1 || !strings.HasPrefix(got[0], `"check-1s";q=5;w=1;pk=:`) {
							t.Errorf("second %d call %d: ratelimit-policy %q", sec, call, got)
						}
						continue
					}
					if status.Code(err) != codes.ResourceExhausted {
						t.Fatalf("second %d call %d: %v, want ResourceExhausted", sec, call, err)
					}
					if len(md) != 0 {
						t.Errorf("second %d call %d: a refusal sent header metadata %v: not trailers-only", sec, call, md)
					}
					ri, qf := details(err)
					if ri == nil || ri.RetryDelay.AsDuration() < time.Second-10*time.Millisecond {
						t.Fatalf("second %d call %d: RetryInfo %v, want at least the store's 1s", sec, call, ri)
					}
					wait := ri.RetryDelay.AsDuration()
					if got, want := tr.Get("grpc-retry-pushback-ms"), strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10); len(got) != 1 || got[0] != want {
						t.Errorf("second %d call %d: grpc-retry-pushback-ms %q, want %s (the RetryInfo's)", sec, call, got, want)
					}
					if latest := time.Now().Add(wait); !lastEarliest.IsZero() && latest.Sub(lastEarliest) < 200*time.Millisecond {
						t.Errorf("second %d call %d: told to come back at most %s after the refusal before, want a place of its own (200ms)", sec, call, latest.Sub(lastEarliest))
					}
					lastEarliest = started.Add(wait)
					if qf == nil || len(qf.Violations) != 1 || qf.Violations[0].Subject != "check-1s" {
						t.Errorf("second %d call %d: QuotaFailure %v", sec, call, qf)
					}
					if got := tr.Get("retry-after"); len(got) != 1 || got[0] != "1" {
						t.Errorf("second %d call %d: retry-after trailer %q", sec, call, got)
					}
					if got := tr.Get("ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"check-1s";r=0`) {
						t.Errorf("second %d call %d: ratelimit trailer %q", sec, call, got)
					}
				}
				if admitted != 5 {
					t.Errorf("second %d: %d of 12 admitted, want 5", sec, admitted)
				}
				clk.Advance(time.Second)
			}
		})
	}
}

// TestStreamHoldsASlot: a stream is one decision when it opens and holds
// a Concurrent limit's slot while it lasts: a third stream of "2
// concurrent" is refused without a wait to promise, and a stream that
// ends frees its slot.
func TestStreamHoldsASlot(t *testing.T) {
	for name, backend := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s, _ := backend(t)
			lim := newLimiter(t, s, ratelimit.MustParsePolicy("100/s, 2 concurrent", ratelimit.Named("watch")))
			client, _ := serve(t, lim)
			open := func() (healthpb.Health_WatchClient, context.CancelFunc, error) {
				ctx, cancel := context.WithCancel(background())
				w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
				if err == nil {
					_, err = w.Recv() // the first status, or the refusal
				}
				return w, cancel, err
			}
			_, cancel1, err := open()
			if err != nil {
				t.Fatal(err)
			}
			_, cancel2, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer cancel2()
			_, cancel3, err := open()
			cancel3()
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("a third stream: %v, want ResourceExhausted", err)
			}
			if ri, _ := details(err); ri != nil {
				t.Errorf("a refusal in flight promised a wait: %v", ri)
			}
			cancel1()
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, cancel, err := open()
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the slot of an ended stream was not freed: %v", err)
				}
				time.Sleep(10 * time.Millisecond) // the server sees the cancel after the client
			}
		})
	}
}

// TestFailureModes: with the store down, FailClosed ends a call with
// Unavailable and a RetryInfo of a second; FailOpen lets it through.
func TestFailureModes(t *testing.T) {
	down := storeFunc(func(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
		return ratelimit.Decision{}, errors.New("store down")
	})
	p := ratelimit.MustParsePolicy("5/s")
	closed, _ := serve(t, newLimiter(t, down, p, ratelimit.WithFailureMode(ratelimit.FailClosed)))
	_, err := closed.Check(background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("FailClosed: %v, want Unavailable", err)
	}
	if ri, _ := details(err); ri == nil || ri.RetryDelay.AsDuration() != time.Second {
		t.Errorf("FailClosed: RetryInfo %v, want 1s", ri)
	}
	open, _ := serve(t, newLimiter(t, down, p, ratelimit.WithFailureMode(ratelimit.FailOpen)))
	if _, err := open.Check(background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("FailOpen: %v, want the call through", err)
	}
}

type storeFunc func(context.Context, ratelimit.Request) (ratelimit.Decision, error)

func (f storeFunc) Take(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	return f(ctx, r)
}

// TestRefundByCode: WithRefundIf sees the handler's gRPC code as an HTTP
// status: a call that fails with Internal (500) is given back, one that
// fails with NotFound (404) is not; the handler reads its decision.
func TestRefundByCode(t *testing.T) {
	s, _ := backends(t)["memory"](t)
	lim := newLimiter(t, s, ratelimit.MustParsePolicy("2/m"), ratelimit.WithRefundIf(func(_ *http.Request, status int) bool { return status >= 500 }))
	var remaining []int64
	unary := grpcUnary(lim)
	call := func(code codes.Code) error {
		_, err := unary(peerContext("192.0.2.1:5000", nil), nil, func(ctx context.Context, _ any) (any, error) {
			res, ok := ratelimit.FromContext(ctx)
			if !ok {
				t.Fatal("the handler's context carries no decision")
			}
			remaining = append(remaining, res.Decision.Remaining)
			return nil, status.Error(code, "failed")
		})
		return err
	}
	for i, c := range []codes.Code{codes.Internal, codes.Internal, codes.NotFound, codes.NotFound, codes.NotFound} {
		err := call(c)
		if i < 4 && status.Code(err) != c {
			t.Fatalf("step %d: %v, want the handler's %v", i, err, c)
		}
		if i == 4 && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("step %d: %v, want ResourceExhausted after two charged calls", i, err)
		}
	}
	if want := []int64{1, 1, 1, 0}; len(remaining) != 4 || remaining[0] != want[0] || remaining[3] != want[3] {
		t.Errorf("remaining seen by the handler %v, want %v", remaining, want)
	}
}
