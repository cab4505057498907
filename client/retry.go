package client

import (
	"context"
	"io"
	"net/http"
)

// Retrying a request refused with 429: only what the server can receive
// twice without harm (an idempotent method, or an idempotency key it
// deduplicates by), only with a body that can be sent again, only within
// the context and the maximum wait. The wait itself is the gate's: the 429
// spent the budget until its Retry-After, so the retry waits like any
// request.

// drainLimit is how much of a retried 429's body is read before closing
// it, so that its connection can be reused; beyond it, the connection is
// closed instead.
const drainLimit = 64 << 10

// retryable reports whether req may be sent again after a 429.
func (t *transport) retryable(req *http.Request) bool {
	if t.cfg.maxRetries == 0 {
		return false
	}
	if !idempotent(req.Method) && (t.cfg.idemHeader == "" || req.Header.Get(t.cfg.idemHeader) == "") {
		return false
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// idempotent reports the methods RFC 9110 §9.2.2 calls idempotent.
func idempotent(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// nextAttempt returns a copy of req to send again, with a new body, unless
// its wait would pass the context's deadline or the maximum wait, or its
// body cannot be had again: then the 429 is the answer.
func (t *transport) nextAttempt(ctx context.Context, h *host, route string, req *http.Request) (*http.Request, bool) {
	now := t.cfg.clock.Now()
	if ok, v := h.peek(route, now); !ok && t.tooLong(ctx, h, v, now, now) != nil {
		return nil, false
	}
	next := req.Clone(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil || body == nil {
			return nil, false
		}
		next.Body = body
	}
	return next, true
}

// drainAndClose reads what is left of a response body, up to drainLimit,
// and closes it.
func drainAndClose(resp *http.Response) {
	if resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	resp.Body.Close()
}
