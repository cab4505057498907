// Command _example serves the gRPC health service behind the ratelimit
// interceptors on a loopback port, then calls it as fast as it can for
// three seconds and prints what each second admitted and refused.
//
//	cd grpc && go run ./_example
//
// Check is limited to 5 a second per client address; Watch to 2 streams
// in flight. Nothing but Go is needed: the store is in memory.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
	ratelimitgrpc "github.com/ratelimitkit/ratelimit/grpc"
	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("5/s", ratelimit.Named("check")),
		ratelimit.WithPolicyFunc(ratelimitgrpc.MethodPolicies(map[string]*ratelimit.Policy{
			"/grpc.health.v1.Health/Watch": ratelimit.MustParsePolicy("10/s, 2 concurrent", ratelimit.Named("watch")),
		})),
		ratelimit.WithMaxHeld(0)) // refuse at once rather than hold a call for its turn
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim)),
		grpc.ChainStreamInterceptor(ratelimitgrpc.StreamServerInterceptor(lim)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	start := time.Now()
	for sec := 1; sec <= 3; sec++ {
		admitted, refused := 0, 0
		var wait time.Duration
		var fields metadata.MD
		for time.Since(start) < time.Duration(sec)*time.Second {
			var md metadata.MD
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
			switch status.Code(err) {
			case codes.OK:
				admitted++
				fields = md
			case codes.ResourceExhausted:
				refused++
				for _, d := range status.Convert(err).Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						wait = ri.RetryDelay.AsDuration()
					}
				}
			default:
				log.Fatal(err)
			}
		}
		fmt.Printf("second %d: %d admitted, %d ResourceExhausted (RetryInfo %v); ratelimit %q\n",
			sec, admitted, refused, wait, fields.Get("ratelimit"))
	}
}
