package ratelimitgrpc_test

import (
	"context"
	"net"
	"strings"
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
	if status.Code(err) != codes.DeadlineExceeded || !strings.HasPrefix(status.Convert(err).Message(), "ratelimit:") || arrived() != seen {
		t.Fatalf("step 3: %v after %s, %d calls reached the server; want the interceptor's DeadlineExceeded, none", err, time.Since(start), arrived()-seen)
	}
	clk.Advance(time.Second)
	if _, err := client.Check(background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("step 4: after the wait: %v", err)
	}
}

// TestStreamClientInterceptorPaces: a stream counts as under way until
// its header says the server admitted it, so the client opens no more
// streams than the limit it learnt: with 2/s spent (the store's clock
// stands still), a third stream with a short deadline fails in the
// interceptor without reaching the server, and once the window has
// passed it opens.
func TestStreamClientInterceptorPaces(t *testing.T) {
	s, clk := backends(t)["memory"](t)
	lim := newLimiter(t, s, ratelimit.MustParsePolicy("2/s", ratelimit.Named("two")))
	var opened atomic.Int64
	count := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
		opened.Add(1)
		return next(srv, ss)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(count, ratelimitgrpc.StreamServerInterceptor(lim)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(ratelimitgrpc.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	watch := func(ctx context.Context) error {
		w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		return err
	}
	for step := range 2 {
		ctx, cancel := context.WithCancel(background())
		err := watch(ctx) // the stream stays open until the test ends
		defer cancel()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	short, cancel := context.WithTimeout(background(), 200*time.Millisecond)
	defer cancel()
	err = watch(short)
	if status.Code(err) != codes.DeadlineExceeded || !strings.HasPrefix(status.Convert(err).Message(), "ratelimit:") || opened.Load() != 2 {
		t.Fatalf("step 2: %v, %d streams reached the server; want the interceptor's DeadlineExceeded, 2", err, opened.Load())
	}
	clk.Advance(time.Second)
	ctx, cancel := context.WithTimeout(background(), 10*time.Second)
	defer cancel()
	if err := watch(ctx); err != nil || opened.Load() != 3 {
		t.Fatalf("step 3: %v, %d streams reached the server; want the stream open, 3", err, opened.Load())
	}
}
