package ratelimit

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrCostOverCapacity is wrapped by the error the error hook and the log
// get for a request whose cost is above the capacity of its policy (its
// smallest Rate, or Burst): it can never be admitted, so it is a
// configuration mistake (say WithCost above a cheaper tier's capacity, from
// WithPolicyFunc). The request is denied, without Retry-After.
var ErrCostOverCapacity = errors.New("cost above the policy's capacity")

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
	return &handler{l: l, next: next}
}

type handler struct {
	l    *Limiter
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l := h.l
	if l.skip != nil && l.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	keys := l.identify(r)
	if keys == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	res := Result{Policy: l.policy, Keys: keys, Cost: l.cost, DryRun: l.dryRun}
	if l.policyFn != nil {
		if p := l.policyFn(r); p != nil {
			res.Policy = p
		}
	}
	if l.costFn != nil {
		res.Cost = max(l.costFn(r), 0)
	}
	if res.Cost > res.Policy.MaxCost() {
		l.overCapacity(r, res)
	}
	a := ask{policy: res.Policy, keys: keys, cost: res.Cost, id: l.requestID(r)}
	var fallback, failed bool
	var held error
	res.Decision, fallback, failed, res.Err, held = l.admit(r, a)
	if held != nil {
		// The client left while held: its place was given back, and the
		// Limiters outside, which charged it, give theirs back too.
		refuseOuter(&frame{outer: frameOf(r.Context())})
		return
	}
	f := &frame{res: res, lim: l}
	r = r.WithContext(withFrame(r.Context(), f))
	d := &res.Decision
	denied := !d.Allowed && res.Cost > 0
	outcome := Allowed
	switch {
	case failed && l.mode == FailClosed && !l.dryRun && res.Cost > 0:
		outcome = FailedClosed
	case failed:
		outcome = FailedOpen
	case denied && l.dryRun:
		outcome = DryRunDenied
	case denied:
		outcome = Denied
	}
	l.notify(r, res, outcome, fallback)
	switch outcome {
	case FailedClosed:
		refuseOuter(f)
		serviceUnavailable(w, l.style)
		return
	case FailedOpen:
		h.serve(w, r, f)
		return
	}
	l.writeHeaders(w.Header(), f, denied)
	if outcome == Denied {
		refuseOuter(f)
		w.Header().Set("Cache-Control", "no-store")
		dw := &deniedWriter{ResponseWriter: w}
		l.denied.ServeHTTP(dw, r)
		dw.finish()
		return
	}
	h.serve(w, r, f)
}

// serve runs next, then gives the charge back when WithRefundIf says so or
// a Limiter inside refused the request, or settles it to WithCostAfter's
// cost. A handler that panics keeps its charge as it was.
func (h *handler) serve(w http.ResponseWriter, r *http.Request, f *frame) {
	l := h.l
	// Slots of Concurrent limits are held while the handler runs, and
	// released when it returns, however it does (a panic too).
	defer l.holdSlots(r, f.res.Decision.Receipt)()
	if l.refundIf == nil && l.costAfter == nil {
		h.next.ServeHTTP(w, r)
	} else {
		sw := &statusWriter{ResponseWriter: w}
		h.next.ServeHTTP(sw, r)
		switch {
		case f.refused.Load():
		case l.refundIf != nil && l.refundIf(r, sw.result()):
			l.giveBack(r, f.res.Decision)
		case l.costAfter != nil:
			l.settleAfter(r, f.res.Decision, l.costAfter(r, sw.result(), sw.written))
		}
	}
	if f.refused.Load() {
		l.giveBack(r, f.res.Decision)
	}
}

// refuseOuter tells the Limiters outside f that the request was not
// served, so they give their charges back.
func refuseOuter(f *frame) {
	for o := f.outer; o != nil; o = o.outer {
		if o.lim != nil {
			o.refused.Store(true)
		}
	}
}

// stacked reports whether another Limiter handled the request before f.
func stacked(f *frame) bool {
	for o := f.outer; o != nil; o = o.outer {
		if o.lim != nil {
			return true
		}
	}
	return false
}

// writeHeaders writes the rate-limit headers of f's decision, after those
// of the Limiters outside it, and Retry-After for a denial.
func (l *Limiter) writeHeaders(h http.Header, f *frame, denied bool) {
	if l.style == HeadersNone {
		return
	}
	d, p := f.res.Decision, f.res.Policy
	if !stacked(f) {
		SetHeaders(h, l.style, p, d)
	} else {
		prevPolicy, prevRL := h.Values(hdrPolicy), h.Values(hdrRateLimit)
		type trio struct{ lim, rem, reset []string }
		var prev [2]trio
		for i, names := range [2][3]string{{hdrLimit, hdrRemaining, hdrReset}, {hdrXLimit, hdrXRemaining, hdrXReset}} {
			prev[i] = trio{h.Values(names[0]), h.Values(names[1]), h.Values(names[2])}
		}
		SetHeaders(h, l.style, p, d)
		// Draft-10 fields are lists: the outer Limiters' items first.
		if l.style&(HeadersIETF|HeadersDraft10) != 0 {
			for _, kv := range [...]struct {
				name string
				prev []string
			}{{hdrPolicy, prevPolicy}, {hdrRateLimit, prevRL}} {
				if len(kv.prev) > 0 && h.Get(kv.name) != "" {
					h[kv.name] = []string{strings.Join(kv.prev, ", ") + ", " + h.Get(kv.name)}
				}
			}
		}
		// The legacy fields hold one limit: the one with the least left.
		for i, names := range [2][3]string{{hdrLimit, hdrRemaining, hdrReset}, {hdrXLimit, hdrXRemaining, hdrXReset}} {
			if len(prev[i].rem) == 0 || h.Get(names[1]) == "" {
				continue
			}
			was, err1 := strconv.ParseInt(prev[i].rem[0], 10, 64)
			now, err2 := strconv.ParseInt(h.Get(names[1]), 10, 64)
			if err1 == nil && err2 == nil && was < now {
				h[names[0]], h[names[1]], h[names[2]] = prev[i].lim, prev[i].rem, prev[i].reset
			}
		}
	}
	if denied {
		if d.RetryAfter == Never {
			h.Del(hdrRetryAfter) // waiting does not help; an outer dry run's value would mislead
		} else {
			SetRetryAfter(h, d)
		}
	}
}

// identify returns the keys of the identifiers that apply to r, without
// duplicates, or nil if none applies.
func (l *Limiter) identify(r *http.Request) []string {
	var keys []string
ids:
	for _, id := range l.ids {
		k, ok := id.Identify(r)
		if !ok || k == "" {
			continue
		}
		for _, seen := range keys {
			if seen == k {
				continue ids
			}
		}
		if keys == nil {
			keys = make([]string, 0, len(l.ids))
		}
		keys = append(keys, k)
	}
	return keys
}

// requestID returns the request ID of r's idempotency header (hashed), or
// "" when there is none.
func (l *Limiter) requestID(r *http.Request) string {
	if l.idHeader == "" {
		return ""
	}
	vals := r.Header[l.idHeader]
	if len(vals) == 0 {
		return ""
	}
	v := trimOWS(vals[0])
	if v == "" || len(v) > 1024 {
		return ""
	}
	sum := sha256.Sum256([]byte(v))
	return "idem:" + hex.EncodeToString(sum[:16])
}

// overCapacity reports a request whose cost can never be admitted.
func (l *Limiter) overCapacity(r *http.Request, res Result) {
	err := fmt.Errorf("ratelimit: cost %d of policy %q: %w (%d): it can never be admitted; check WithCost, WithCostFunc and WithPolicyFunc",
		res.Cost, res.Policy.Name(), ErrCostOverCapacity, res.Policy.MaxCost())
	l.report(r.Context(), r, "config", res.Policy, err)
}

// serviceUnavailable answers FailClosed's 503: a problem document of the
// temporary-reduced-capacity type that says nothing of the error.
func serviceUnavailable(w http.ResponseWriter, style HeaderStyle) {
	h := w.Header()
	if style != HeadersNone {
		h.Set("Retry-After", strconv.Itoa(int(failClosedRetryAfter/time.Second)))
	}
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
