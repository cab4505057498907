package ratelimit

import (
	"bufio"
	"net"
	"net/http"
)

// Handler returns next wrapped by the limiter, for chi (r.Use(l.Handler),
// r.With(l.Handler)) or plain net/http (l.Handler(mux)).
//
// For each request: requests WithSkip exempts pass unlimited; every
// identifier gives a key (those that do not apply are skipped; if none
// applies the request passes unlimited), the policy (WithPolicyFunc or the
// default) and the cost are chosen, and the store is asked once, within
// the timeout, on a context that the client's going away does not cancel.
// Then:
//
//   - Allowed: the rate-limit headers are set and next serves the request
//     (after holding it, with WithMaxDelay, until its turn).
//   - Denied: the headers, Retry-After (unless the cost exceeds the
//     policy's capacity: it would never be admitted) and "Cache-Control:
//     no-store" are set and the denied handler answers 429.
//   - No store could decide: the failure mode applies.
//
// Both next and the denied handler find the Result in the request's
// context (FromContext). A request with cost 0 is never denied, and in a
// dry run (WithDryRun) nothing is blocked.
//
// Limiters stack: a Limiter on the router and a stricter one on a route
// both limit a request; both appear in RateLimit-Policy and RateLimit, the
// legacy header styles describe the one with the least remaining, a 429's
// Retry-After is the wait of the Limiter that denied, and a request denied
// (or refused by FailClosed) inside is refunded to the Limiters outside
// it, since it was not served. AllFromContext lists every Result.
//
// Handler panics if next is nil.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("ratelimit: Handler: nil next handler")
	}
	if l == nil || l.store == nil {
		panic("ratelimit: Handler: Limiter not built by New")
	}
	return &limitedHandler{l: l, next: next}
}

type limitedHandler struct {
	l    *Limiter
	next http.Handler
}

func (h *limitedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.l.handle(r, w.Header(), func(req *http.Request, o Outcome, serve bool) (int, int64) {
		switch {
		case !serve && o == FailedClosed:
			serviceUnavailable(w)
			return 0, 0
		case !serve:
			w.Header().Set("Cache-Control", "no-store")
			dw := &deniedWriter{ResponseWriter: w}
			h.l.denied.ServeHTTP(dw, req)
			dw.finish()
			return 0, 0
		case h.l.refundIf == nil && h.l.costAfter == nil:
			h.next.ServeHTTP(w, req)
			return 0, 0
		}
		sw := &statusWriter{ResponseWriter: w}
		h.next.ServeHTTP(sw, req)
		return sw.result(), sw.written
	})
}

// serviceUnavailable answers FailClosed's 503 (run wrote its Retry-After):
// a problem document of the temporary-reduced-capacity type that says
// nothing of the error.
func serviceUnavailable(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(unavailableBody) // an error means the client is gone
}

// unavailableBody is the 503's problem document.
var unavailableBody = Problem{Type: UnavailableProblemType, Title: "Service Unavailable", Status: http.StatusServiceUnavailable,
	Detail: "Service temporarily unavailable, please retry shortly."}.appendJSON(nil)

// deniedWriter makes a denied handler's response a 429 unless the handler
// writes a status of its own.
type deniedWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *deniedWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *deniedWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends the status first, as a Write would.
func (w *deniedWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over; the handler answers on it.
func (w *deniedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.wrote = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *deniedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *deniedWriter) finish() {
	if !w.wrote {
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// statusWriter records the status a handler answered with and the bytes
// of body it wrote (WithRefundIf, WithCostAfter).
type statusWriter struct {
	http.ResponseWriter
	status   int
	written  int64
	hijacked bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// result is the status the client got: 200 when the handler wrote
// nothing, 0 when it hijacked the connection.
func (w *statusWriter) result() int {
	switch {
	case w.hijacked:
		return 0
	case w.status == 0:
		return http.StatusOK
	}
	return w.status
}
