package ratelimitgrpc

import (
	"context"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitkit/ratelimit"
)

// metadataOf returns the rate-limit fields among h as metadata:
// RateLimit, RateLimit-Policy, the other styles' and Retry-After, keys in
// lower case.
func metadataOf(h http.Header) metadata.MD {
	md := metadata.MD{}
	for k, vs := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "ratelimit") || strings.HasPrefix(lk, "x-ratelimit") || lk == "retry-after" {
			md[lk] = append([]string(nil), vs...)
		}
	}
	return md
}

// failClosedWait is the wait FailClosed's Unavailable promises, as its
// 503's Retry-After does.
const failClosedWait = time.Second

// refused is the status of a call the Limiter did not serve: res is its
// Result, wait the wait it was told (0: none promised).
func refused(ctx context.Context, res ratelimit.Result, wait time.Duration) error {
	var code codes.Code
	var msg string
	switch res.Outcome {
	case ratelimit.Denied:
		code, msg = codes.ResourceExhausted, ratelimit.NewProblem(res).Detail
	case ratelimit.FailedClosed:
		code, msg = codes.Unavailable, "Service temporarily unavailable, please retry shortly."
	default:
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err() // the client left while held
		}
		return status.Error(codes.Internal, "ratelimit: the limiter served nothing")
	}
	var details []protoadapt.MessageV1
	if wait > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
	}
	if name := limitName(res); name != "" && code == codes.ResourceExhausted {
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: name, Description: msg}}})
	}
	st := status.New(code, msg)
	if s, err := st.WithDetails(details...); err == nil {
		st = s
	}
	return st.Err()
}

// limitName is the name of the limit that decided res, or "".
func limitName(res ratelimit.Result) string {
	if res.Policy == nil {
		return ""
	}
	limits := res.Policy.Limits()
	if i := res.Decision.Limit; i >= 0 && i < len(limits) {
		return limits[i].Name
	}
	return ""
}

// HTTPStatus is the HTTP status of a handler's error, as the Limiter's
// WithRefundIf and WithCostAfter see it: 200 for nil, else the status
// the gRPC code maps to (ResourceExhausted 429, Unavailable 503,
// InvalidArgument 400, NotFound 404, Internal 500, ...).
func HTTPStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	switch status.Code(err) {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // the client closed the request
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
