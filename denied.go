package ratelimit

import (
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The "type" members of the problem documents a Limiter answers with.
const (
	// ProblemType is the "type" of the problem documents DefaultDeniedHandler
	// writes: the quota-exceeded problem type of
	// draft-ietf-httpapi-ratelimit-headers-11, registered by IANA, whose
	// member violated-policies names the exceeded policies. The members limit,
	// quota, window, identifier and retry_after are this package's (see
	// Problem).
	ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// UnavailableProblemType is the "type" of the problem document of the 503
	// that FailClosed answers while the store fails: the
	// temporary-reduced-capacity problem type of the same draft.
	UnavailableProblemType = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// Problem is the RFC 9457 problem document DefaultDeniedHandler writes, as
// JSON with the member names in the struct tags. Custom denied handlers
// can build one with NewProblem, adjust it and encode it with
// encoding/json; clients can decode a 429 body into it.
type Problem struct {
	// Type is ProblemType.
	Type string `json:"type"`
	// Title is "Too Many Requests".
	Title string `json:"title"`
	// Status is 429.
	Status int `json:"status"`
	// Detail is one or two English sentences naming the violated limit and
	// when to retry, e.g. `Rate limit "default-1s" (10 per 1s) exceeded.
	// Retry in 1 second.`, and saying so when a denial blocks the client
	// for a while (Policy.BlockFor).
	Detail string `json:"detail"`
	// ViolatedPolicies names the exceeded policies, as RateLimit-Policy
	// names them (Limit.Name): every limit that denied the request, the
	// most restrictive first. Omitted when unknown.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// Limit is the name of the violated limit (Limit.Name); omitted when
	// unknown.
	Limit string `json:"limit,omitempty"`
	// Quota is the violated limit's capacity in units of cost: its Rate,
	// or its Burst for the token bucket (the q of RateLimit-Policy).
	// Omitted when the limit is unknown.
	Quota int64 `json:"quota,omitempty"`
	// Window is the violated limit's Period in whole seconds, rounded up,
	// at least 1 (the w of RateLimit-Policy). Omitted when the limit is
	// unknown.
	Window int64 `json:"window,omitempty"`
	// Identifier is the kind of identifier whose limit ran out: the prefix
	// of its key ("ip", "key", "user", or the prefix of a custom key, such
	// as "tenant" for "tenant:acme"), never its value. Omitted when the key
	// has no lowercase prefix before a colon.
	Identifier string `json:"identifier,omitempty"`
	// RetryAfter is the number of seconds to wait before retrying, as in
	// the Retry-After header: rounded up, at least 1. Omitted (0) when the
	// request can never be admitted (RetryAfter is Never), when the
	// decision allowed it, or when there is no Result.
	RetryAfter int64 `json:"retry_after,omitempty"`
}

// NewProblem returns the problem document describing res, as
// DefaultDeniedHandler writes it. It accepts any Result: members it cannot
// fill (no Policy, a Decision.Limit out of range) are left out. Err's text
// is never included.
func NewProblem(res Result) Problem {
	pb := Problem{Type: ProblemType, Title: "Too Many Requests", Status: http.StatusTooManyRequests}
	d := res.Decision
	var l *Limit
	if p := res.Policy; p != nil && d.Limit >= 0 && d.Limit < len(p.limits) {
		l = &p.limits[d.Limit]
		pb.Limit = l.Name
		pb.Quota = limitQuota(l, p.algorithm == TokenBucket)
		if !l.Concurrent { // requests in flight have no window
			pb.Window = windowSeconds(l.Period)
		}
		pb.ViolatedPolicies = []string{l.Name}
		for i, ls := range d.Limits {
			if i != d.Limit && i < len(p.limits) && !ls.Allowed && ls.RetryAfter != 0 {
				pb.ViolatedPolicies = append(pb.ViolatedPolicies, p.limits[i].Name)
			}
		}
	}
	if d.Key >= 0 && d.Key < len(res.Keys) {
		pb.Identifier = keyKind(res.Keys[d.Key])
	}
	var b strings.Builder
	if d.RetryAfter == Never && !d.Allowed {
		b.WriteString("This request's cost ")
		if res.Cost > 0 {
			b.WriteString("(" + strconv.FormatInt(res.Cost, 10) + ") ")
		}
		if l != nil {
			b.WriteString("exceeds the limit ")
			writeLimit(&b, l, res.Policy.algorithm == TokenBucket)
		} else {
			b.WriteString("exceeds a rate limit")
		}
		b.WriteString(" and can never be admitted.")
		pb.Detail = b.String()
		return pb
	}
	if l != nil && l.Concurrent && d.InFlight {
		b.WriteString("Concurrency limit " + strconv.Quote(l.Name) + " (" + strconv.FormatInt(l.Rate, 10) +
			" requests in flight) reached: retry when one of this client's requests has ended.")
		pb.Detail = b.String()
		return pb
	}
	if l != nil {
		b.WriteString("Rate limit ")
		writeLimit(&b, l, res.Policy.algorithm == TokenBucket)
		if block := res.Policy.block; block > 0 {
			b.WriteString(" exceeded, so this client is blocked for " + FormatPeriod(block) + ".")
		} else {
			b.WriteString(" exceeded.")
		}
	} else {
		b.WriteString("Rate limit exceeded.")
	}
	if secs, ok := retryAfterSeconds(d); ok {
		pb.RetryAfter = secs
		b.WriteString(" Retry in " + strconv.FormatInt(secs, 10))
		if secs == 1 {
			b.WriteString(" second.")
		} else {
			b.WriteString(" seconds.")
		}
	}
	pb.Detail = b.String()
	return pb
}

// keyKind returns the prefix of key before its first colon when it is 1 to
// 16 lowercase letters ("ip", "key", "user"), else "".
func keyKind(key string) string {
	i := strings.IndexByte(key, ':')
	if i < 1 || i > 16 {
		return ""
	}
	for j := 0; j < i; j++ {
		if c := key[j]; c < 'a' || c > 'z' {
			return ""
		}
	}
	return key[:i]
}

// writeLimit writes l for people: `"api-1s" (10 per 1s)`, with the burst
// of a token bucket when it differs from the rate.
func writeLimit(b *strings.Builder, l *Limit, tokenBucket bool) {
	b.WriteString(strconv.Quote(l.Name))
	if l.Concurrent {
		b.WriteString(" (" + strconv.FormatInt(l.Rate, 10) + " concurrent)")
		return
	}
	b.WriteString(" (" + strconv.FormatInt(l.Rate, 10) + " per " + FormatPeriod(l.Period))
	if tokenBucket && l.Burst > 0 && l.Burst != l.Rate {
		b.WriteString(", burst " + strconv.FormatInt(l.Burst, 10))
	}
	b.WriteByte(')')
}

// DefaultDeniedHandler returns the handler that answers denied requests
// unless WithDeniedHandler replaces it; a replacement may call it too. It
// answers 429 Too Many Requests with Content-Type application/problem+json
// and an RFC 9457 problem document (see Problem and NewProblem) naming the
// violated limit and when to retry, built from the Result in the request's
// context. Without a Result it still answers a valid 429 problem document,
// with a generic detail and no limit members.
//
// It sets Cache-Control: no-store and X-Content-Type-Options: nosniff. It
// does not set the rate-limit headers or Retry-After: the Limiter writes
// them (SetHeaders) before calling it, so a replacement
// handler need not either.
func DefaultDeniedHandler() http.Handler { return deniedHandler }

var deniedHandler http.Handler = http.HandlerFunc(serveDenied)

func serveDenied(w http.ResponseWriter, r *http.Request) {
	var pb Problem
	if res, ok := FromContext(r.Context()); ok {
		pb = NewProblem(res)
	} else {
		pb = Problem{Type: ProblemType, Title: "Too Many Requests", Status: http.StatusTooManyRequests, Detail: "Rate limit exceeded."}
	}
	var buf [512]byte
	body := pb.appendJSON(buf[:0])
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body) // an error means the client is gone: nothing to do
}

// appendJSON appends pb as JSON and a newline, byte for byte what an
// encoding/json.Encoder writes (same member order, omitempty, HTML-safe
// escaping, a final newline), without its reflection: the deny path runs
// for every rejected request of a flood.
func (pb Problem) appendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, pb.Type)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, pb.Title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(pb.Status), 10)
	b = append(b, `,"detail":`...)
	b = appendJSONString(b, pb.Detail)
	if len(pb.ViolatedPolicies) > 0 {
		b = append(b, `,"violated-policies":[`...)
		for i, v := range pb.ViolatedPolicies {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, v)
		}
		b = append(b, ']')
	}
	if pb.Limit != "" {
		b = append(b, `,"limit":`...)
		b = appendJSONString(b, pb.Limit)
	}
	for _, m := range [...]struct {
		name string
		v    int64
	}{{`,"quota":`, pb.Quota}, {`,"window":`, pb.Window}} {
		if m.v != 0 {
			b = append(b, m.name...)
			b = strconv.AppendInt(b, m.v, 10)
		}
	}
	if pb.Identifier != "" {
		b = append(b, `,"identifier":`...)
		b = appendJSONString(b, pb.Identifier)
	}
	if pb.RetryAfter != 0 {
		b = append(b, `,"retry_after":`...)
		b = strconv.AppendInt(b, pb.RetryAfter, 10)
	}
	return append(b, '}', '\n')
}

// appendJSONString appends s as a JSON string escaped as encoding/json
// does by default: quotes, backslashes and control bytes; <, > and & for
// HTML safety; U+2028 and U+2029; invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&15])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
