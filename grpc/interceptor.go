package ratelimitgrpc

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimitkit/ratelimit"
)

// UnaryServerInterceptor limits unary calls with lim: each call is one
// decision, as an HTTP request through lim.Handler would be (see the
// package documentation).
func UnaryServerInterceptor(lim *ratelimit.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if c.skip[info.FullMethod] {
			return handler(ctx, req)
		}
		var resp any
		err := c.decide(lim, ctx, info.FullMethod,
			func(md metadata.MD) error { return grpc.SetHeader(ctx, md) },
			func(md metadata.MD) error { return grpc.SetTrailer(ctx, md) },
			func(ctx context.Context) (err error) {
				resp, err = handler(ctx, req)
				return err
			})
		return resp, err
	}
}

// StreamServerInterceptor limits streams with lim: each stream is one
// decision when it opens, and a Concurrent limit's slot is held while it
// lasts.
func StreamServerInterceptor(lim *ratelimit.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if c.skip[info.FullMethod] {
			return handler(srv, ss)
		}
		return c.decide(lim, ss.Context(), info.FullMethod, ss.SetHeader,
			func(md metadata.MD) error { ss.SetTrailer(md); return nil },
			func(ctx context.Context) error {
				return handler(srv, &stream{ServerStream: ss, ctx: ctx})
			})
	}
}

// stream is a ServerStream whose context carries the decision.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// decide runs the call of method through lim (Limiter.Serve): call runs,
// on the context that carries the decision, only when served; else the
// refusal becomes the call's status. setHeader sends an admitted call's
// fields as header metadata. A refusal sends nothing before its status:
// its fields and the pushback go in the trailer (setTrailer), so that the
// response is trailers-only, which a client's retry policy may retry.
func (c *config) decide(lim *ratelimit.Limiter, ctx context.Context, method string, setHeader, setTrailer func(metadata.MD) error, call func(context.Context) error) error {
	var callErr error
	res, fields, served := lim.Serve(ctx, callOf(ctx, method), func(ctx context.Context, fields http.Header) int {
		if res, ok := ratelimit.FromContext(ctx); ok && res.Outcome == ratelimit.Allowed && !isRetry(ctx) {
			c.line.admitted(res, time.Now())
		}
		if md := metadataOf(fields); len(md) > 0 {
			_ = setHeader(md) // fails only once headers went out: nothing to add then
		}
		callErr = call(ctx)
		return HTTPStatus(callErr) // for WithRefundIf and WithCostAfter
	})
	if served {
		return callErr
	}
	wait, helps := c.wait(res)
	md := metadataOf(fields)
	switch {
	case !helps:
		md.Set(pushbackKey, "-1")
	case wait > 0:
		md.Set(pushbackKey, strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10))
	}
	_ = setTrailer(md)
	return refused(ctx, res, wait)
}

// wait is how long a client refused by res should wait (0: no wait can be
// promised), and false when no wait helps.
func (c *config) wait(res ratelimit.Result) (time.Duration, bool) {
	switch res.Outcome {
	case ratelimit.Denied:
		return c.line.pushback(res, time.Now())
	case ratelimit.FailedClosed:
		return failClosedWait, true
	}
	return 0, true
}

// isRetry reports whether the call is a retry of a refused attempt
// (grpc-go's retry policy says so in grpc-previous-rpc-attempts): its
// place in the line was taken when the attempt before it was refused.
func isRetry(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get("grpc-previous-rpc-attempts")) > 0
}
