package ratelimitgrpc

import (
	"context"
	"net/http"

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
		err := decide(lim, ctx, info.FullMethod, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) },
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
		return decide(lim, ss.Context(), info.FullMethod, ss.SetHeader, func(ctx context.Context) error {
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
// refusal becomes the call's status. setHeader sends response header
// metadata.
func decide(lim *ratelimit.Limiter, ctx context.Context, method string, setHeader func(metadata.MD) error, call func(context.Context) error) error {
	var callErr error
	res, fields, served := lim.Serve(ctx, callOf(ctx, method), func(ctx context.Context, fields http.Header) int {
		if md := metadataOf(fields); len(md) > 0 {
			_ = setHeader(md) // fails only once headers went out: nothing to add then
		}
		callErr = call(ctx)
		return HTTPStatus(callErr) // for WithRefundIf and WithCostAfter
	})
	if served {
		return callErr
	}
	if md := metadataOf(fields); len(md) > 0 {
		_ = setHeader(md)
	}
	return refused(ctx, res, fields)
}
