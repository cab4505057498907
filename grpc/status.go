package ratelimitgrpc

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// recorder is the ResponseWriter a call's decision is written to: the
// headers, the status and (for a refusal) the start of the body.
type recorder struct {
	header http.Header
	code   int
	body   []byte
}

// maxBody is how much of a refusal's body (the problem document) is kept.
const maxBody = 4096

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	if room := maxBody - len(r.body); room > 0 {
		r.body = append(r.body, b[:min(len(b), room)]...)
	}
	return len(b), nil
}

// fields returns the rate-limit fields among h as metadata: RateLimit,
// RateLimit-Policy, the other styles' and Retry-After, keys in lower case.
func fields(h http.Header) metadata.MD {
	md := metadata.MD{}
	for k, vs := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "ratelimit") || strings.HasPrefix(lk, "x-ratelimit") || lk == "retry-after" {
			md[lk] = append([]string(nil), vs...)
		}
	}
	return md
}

// refused turns the answer the Handler wrote instead of calling the
// handler into the call's status.
func refused(ctx context.Context, rec *recorder) error {
	code := codes.Unknown
	switch rec.code {
	case 0:
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err() // the client left while held
		}
		return status.Error(codes.Internal, "ratelimit: the limiter answered nothing")
	case http.StatusTooManyRequests:
		code = codes.ResourceExhausted
	default:
		code = Code(rec.code)
	}
	msg := problemDetail(rec.body)
	if msg == "" {
		msg = http.StatusText(rec.code)
	}
	var details []protoadapt.MessageV1
	if secs, err := strconv.Atoi(rec.header.Get("Retry-After")); err == nil && secs >= 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(secs) * time.Second)})
	}
	if name := limitName(rec.header.Get("RateLimit")); name != "" && code == codes.ResourceExhausted {
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: name, Description: msg}}})
	}
	st := status.New(code, msg)
	if s, err := st.WithDetails(details...); err == nil {
		st = s
	}
	return st.Err()
}

// problemDetail is the detail of an RFC 9457 problem document, or "".
func problemDetail(body []byte) string {
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	return p.Detail
}

// limitName is the name of the first item of a RateLimit field
// (`"api-1s";r=0;t=1`), or "".
func limitName(v string) string {
	v = strings.TrimSpace(v)
	if !strings.HasPrefix(v, `"`) {
		return ""
	}
	end := strings.IndexByte(v[1:], '"')
	if end < 0 {
		return ""
	}
	return v[1 : 1+end]
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

// Code is the gRPC code of the HTTP status a Limiter wrote when it did not
// call the handler: 429 ResourceExhausted, 503 Unavailable (FailClosed),
// and what a denied handler (WithDeniedHandler) may write.
func Code(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown // a refusal is never OK, whatever a denied handler wrote
}
