package ratelimitgrpc_test

import (
	"context"
	"net"
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
)

// TestClientInterceptors: through the client interceptors, streams and
// unary calls pass; once the server refused a call with a wait, a call
// whose deadline comes before that wait ends fails at once with
// DeadlineExceeded, without reaching the server, and a call with time
// enough waits and is admitted.
func TestClientInterceptors(t *testing.T) {
	s, clk := backends(t)["memory"](t)
	lim := newLimiter(t, s, ratelimit.MustParsePolicy("2/s", ratelimit.Named("two")))
	a := &attempts{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(a.interceptor, ratelimitgrpc.UnaryServerInterceptor(lim)),
		grpc.ChainStreamInterceptor(ratelimitgrpc.StreamServerInterceptor(lim)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(ratelimitgrpc.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(ratelimitgrpc.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	ctx, cancel := context.WithCancel(background())
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	cancel()
	if err != nil {
		t.Fatalf("step 0: a stream through the interceptor: %v", err)
	}
	if _, err := client.Check(background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("step 1: %v", err)
	}
	_, err = client.Check(background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("step 2: %v, want the limit's refusal (the store's clock stands still)", err)
	}
	arrived := func() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.arrived) }
	seen := arrived()
	short, cancel := context.WithTimeout(background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = client.Check(short, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 50*time.Millisecond || arrived() != seen {
		t.Fatalf("step 3: %v after %s, %d calls reached the server; want DeadlineExceeded at once, none", err, time.Since(start), arrived()-seen)
	}
	clk.Advance(time.Second)
	if _, err := client.Check(background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("step 4: after the wait: %v", err)
	}
}
