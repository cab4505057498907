package ratelimitgrpc_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
)

// TestRefusalPushback: what grpc-retry-pushback-ms says where the wait is
// not a limit's: -1 (do not retry) for a cost no wait can admit, the
// second FailClosed promises, and nothing for a refusal in flight, whose
// slot frees when a call ends (a client's own backoff applies). Each in
// a trailers-only response, a stream's refusal before its first message
// too.
func TestRefusalPushback(t *testing.T) {
	down := storeFunc(func(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
		return ratelimit.Decision{}, errors.New("store down")
	})
	s, _ := backends(t)["memory"](t)
	for i, c := range []struct {
		name   string
		lim    *ratelimit.Limiter
		stream bool
		code   codes.Code
		want   []string // grpc-retry-pushback-ms
	}{
		{name: "cost above the limit", lim: newLimiter(t, s, ratelimit.MustParsePolicy("5/s", ratelimit.Named("big")),
			ratelimit.WithCostFunc(func(*http.Request) int64 { return 10 })), code: codes.ResourceExhausted, want: []string{"-1"}},
		{name: "FailClosed", lim: newLimiter(t, down, ratelimit.MustParsePolicy("5/s"), ratelimit.WithFailureMode(ratelimit.FailClosed)),
			code: codes.Unavailable, want: []string{"1000"}},
		{name: "a stream in flight", lim: newLimiter(t, s, ratelimit.MustParsePolicy("1 concurrent", ratelimit.Named("one"))),
			stream: true, code: codes.ResourceExhausted},
	} {
		client, _ := serve(t, c.lim)
		var md, tr metadata.MD
		var err error
		if c.stream {
			ctx, cancel := context.WithCancel(background())
			defer cancel()
			holder, herr := client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if herr == nil {
				_, herr = holder.Recv() // the stream holds the one slot
			}
			if herr != nil {
				t.Fatalf("step %d (%s): the first stream: %v", i, c.name, herr)
			}
			var w healthpb.Health_WatchClient
			if w, err = client.Watch(background(), &healthpb.HealthCheckRequest{}); err == nil {
				_, err = w.Recv()
				md, _ = w.Header()
				tr = w.Trailer()
			}
		} else {
			_, err = client.Check(background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md), grpc.Trailer(&tr))
		}
		if status.Code(err) != c.code {
			t.Fatalf("step %d (%s): %v, want %v", i, c.name, err, c.code)
		}
		if len(md) != 0 {
			t.Errorf("step %d (%s): header metadata %v before the refusal, want a trailers-only response", i, c.name, md)
		}
		if got := tr.Get("grpc-retry-pushback-ms"); len(got) != len(c.want) || len(got) == 1 && got[0] != c.want[0] {
			t.Errorf("step %d (%s): grpc-retry-pushback-ms %q, want %q", i, c.name, got, c.want)
		}
	}
}
