package client

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Reading what a response says of the server's limits. Every form is
// turned into the same answer: the quota policies (RateLimit-Policy), what
// remains of some of them and how long until more comes back (RateLimit,
// or the legacy fields), and Retry-After. A field that does not parse is
// ignored, as if it were absent; a member of a list whose values make no
// sense (a negative remaining, a missing quota) is skipped.

// DefaultPause is how long the transport waits for a quota the server says
// is spent without saying when it comes back (a RateLimit member without
// t, a legacy remaining of 0 without reset, a 429 without Retry-After).
const DefaultPause = time.Second

// maxSeconds bounds every delay and count read from a header (about 31
// years), so that no arithmetic on them can overflow.
const maxSeconds = 1_000_000_000

// epochThreshold: an X-RateLimit-Reset at or above it is a Unix time (as
// GitHub and others send), not a delay in seconds (as this project's
// server sends). 10^9 s is September 2001, and a delay of 31 years.
const epochThreshold = 1_000_000_000

// Field names, in canonical form.
const (
	hdrPolicy     = "Ratelimit-Policy"
	hdrRateLimit  = "Ratelimit"
	hdrLimit      = "Ratelimit-Limit"
	hdrRemaining  = "Ratelimit-Remaining"
	hdrReset      = "Ratelimit-Reset"
	hdrXLimit     = "X-Ratelimit-Limit"
	hdrXRemaining = "X-Ratelimit-Remaining"
	hdrXReset     = "X-Ratelimit-Reset"
	hdrRetryAfter = "Retry-After"
	hdrDate       = "Date"
)

// form says which fields an answer's limits were read from.
type form uint8

const (
	formNone       form = iota
	formIETF            // RateLimit (draft-10 and draft-11)
	formDraft06         // RateLimit-Remaining and RateLimit-Reset
	formXRateLimit      // X-RateLimit-Remaining and X-RateLimit-Reset
)

// policyInfo is one quota policy (a RateLimit-Policy member, or the quota
// of a legacy RateLimit-Limit / X-RateLimit-Limit).
type policyInfo struct {
	key        string        // the state key: name, plus the partition key if any
	name       string        // the member's name; "" for the legacy forms
	quota      int64         // q
	window     time.Duration // w; 0 when not said
	concurrent bool          // qu="concurrent-requests": no window
}

// limitInfo is what remains of one policy (a RateLimit member, or the
// legacy remaining and reset).
type limitInfo struct {
	key, name string
	remaining int64
	// wait is how long after the answer the server admits more than
	// remaining, at the latest: (t+1)s for RateLimit (draft-11's t is
	// rounded down, draft-10's is until the whole quota is back: t+1 is
	// safe for both), the reset for the legacy forms (until the whole
	// quota is back, rounded up), DefaultPause when not said.
	wait time.Duration
	// least is how long the server says it admits no more than remaining,
	// at least: t, or the legacy reset less a second; 0 when not said.
	least time.Duration
}

// answer is what one response says of the limits.
type answer struct {
	form          form
	policies      []policyInfo
	limits        []limitInfo
	retryAfter    time.Duration
	hasRetryAfter bool
}

// readAnswer reads the rate-limit fields of h, received at now. HTTP-dates
// and Unix times are measured from the response's Date when it has a valid
// one (the server's clock), else from now.
func readAnswer(h http.Header, now time.Time) answer {
	var a answer
	if h == nil {
		return a
	}
	serverNow := now
	if d, err := http.ParseTime(h.Get(hdrDate)); err == nil {
		serverNow = d
	}
	a.policies = readPolicies(fieldValue(h, hdrPolicy))
	if a.limits = readRateLimit(fieldValue(h, hdrRateLimit)); len(a.limits) > 0 {
		a.form = formIETF
	} else if l, p, ok := readDraft06(h); ok {
		a.form, a.limits = formDraft06, []limitInfo{l}
		a.policies = addLegacyPolicy(a.policies, p)
	} else if l, p, ok := readXRateLimit(h, serverNow); ok {
		a.form, a.limits = formXRateLimit, []limitInfo{l}
		a.policies = addLegacyPolicy(a.policies, p)
	}
	a.retryAfter, a.hasRetryAfter = parseRetryAfter(h.Get(hdrRetryAfter), serverNow)
	return a
}

// fieldValue joins the field lines of key into one value, as RFC 9651
// says lists spread over several lines are to be combined; "" when absent.
func fieldValue(h http.Header, key string) string {
	return strings.Join(h[key], ", ")
}

// policyKey is the state key of a policy: its name, and its partition key
// (draft-10/11's pk) when it has one, so that quotas the server keeps apart
// are kept apart here.
func policyKey(name string, it sfItem) string {
	if pk, ok := it.param("pk"); ok && (pk.kind == sfBytes || pk.kind == sfString || pk.kind == sfToken) {
		return name + "\x00" + pk.str
	}
	return name
}

// memberName returns the name of a RateLimit or RateLimit-Policy member: an
// sf-string as the drafts say, or an sf-token, which some servers send.
func memberName(it sfItem) (string, bool) {
	if it.bare.kind == sfString || it.bare.kind == sfToken {
		return it.bare.str, true
	}
	return "", false
}

// intParam returns a parameter that must be an integer from 0 to
// maxSeconds; ok is false when it is absent or anything else.
func intParam(it sfItem, key string) (v int64, present, ok bool) {
	b, present := it.param(key)
	if !present {
		return 0, false, false
	}
	if b.kind != sfInteger || b.num < 0 {
		return 0, true, false
	}
	return min(b.num, maxSeconds), true, true
}

// readPolicies reads RateLimit-Policy: members "name";q=10;w=1, with
// qu="concurrent-requests" for a limit of requests in flight, and the
// draft-06 form 10;w=1 (an anonymous policy). Members without a valid
// quota are skipped; a repeated key keeps its first member.
func readPolicies(v string) []policyInfo {
	if v == "" {
		return nil
	}
	members, err := parseSFList(v)
	if err != nil {
		return nil
	}
	var out []policyInfo
	for _, m := range members {
		if m.isInn {
			continue
		}
		it := m.item
		var p policyInfo
		if it.bare.kind == sfInteger { // draft-06: the quota is the item
			if it.bare.num < 0 {
				continue
			}
			p.quota = min(it.bare.num, maxSeconds)
		} else {
			name, ok := memberName(it)
			if !ok {
				continue
			}
			q, _, ok := intParam(it, "q")
			if !ok {
				continue
			}
			p.key, p.name, p.quota = policyKey(name, it), name, q
			if qu, ok := it.param("qu"); ok && qu.kind == sfString && qu.str == "concurrent-requests" {
				p.concurrent = true
			}
		}
		if w, present, ok := intParam(it, "w"); present && ok && w > 0 && !p.concurrent {
			p.window = time.Duration(w) * time.Second
		}
		if !hasPolicy(out, p.key) {
			out = append(out, p)
		}
	}
	return out
}

func hasPolicy(ps []policyInfo, key string) bool {
	for _, p := range ps {
		if p.key == key {
			return true
		}
	}
	return false
}

// addLegacyPolicy adds the anonymous policy of a legacy form, unless
// RateLimit-Policy described it already.
func addLegacyPolicy(ps []policyInfo, p policyInfo) []policyInfo {
	if p.quota < 0 || hasPolicy(ps, "") {
		return ps
	}
	return append(ps, p)
}

// readRateLimit reads the RateLimit field of draft-10 and draft-11:
// members "name";r=9;t=1. A member without a valid r, or with a t that is
// not a non-negative integer, is skipped. A repeated key keeps the least
// remaining and the longest wait.
func readRateLimit(v string) []limitInfo {
	if v == "" {
		return nil
	}
	members, err := parseSFList(v)
	if err != nil {
		return nil
	}
	var out []limitInfo
	for _, m := range members {
		if m.isInn {
			continue
		}
		name, ok := memberName(m.item)
		if !ok {
			continue
		}
		r, _, ok := intParam(m.item, "r")
		if !ok {
			continue
		}
		l := limitInfo{key: policyKey(name, m.item), name: name, remaining: r, wait: DefaultPause}
		if t, present, ok := intParam(m.item, "t"); present {
			if !ok {
				continue
			}
			l.wait, l.least = time.Duration(t+1)*time.Second, time.Duration(t)*time.Second
		}
		out = mergeLimit(out, l)
	}
	return out
}

func mergeLimit(ls []limitInfo, l limitInfo) []limitInfo {
	for i := range ls {
		if ls[i].key == l.key {
			ls[i].remaining = min(ls[i].remaining, l.remaining)
			ls[i].wait = max(ls[i].wait, l.wait)
			ls[i].least = max(ls[i].least, l.least)
			return ls
		}
	}
	return append(ls, l)
}

// readDraft06 reads RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset of draft-06 and earlier: Remaining and Reset are
// sf-integers (Reset in delta seconds, until the quota is whole again);
// Limit is a list whose first member is the quota, possibly with a w
// parameter (the quota policy of drafts 00-03). Without a valid Remaining
// there is no answer. The policy's quota is -1 when Limit is absent or
// invalid.
func readDraft06(h http.Header) (limitInfo, policyInfo, bool) {
	rem, ok := sfNonNegative(fieldValue(h, hdrRemaining))
	if !ok {
		return limitInfo{}, policyInfo{}, false
	}
	l := limitInfo{remaining: rem, wait: DefaultPause}
	if reset, ok := sfNonNegative(fieldValue(h, hdrReset)); ok {
		l.wait = time.Duration(reset) * time.Second
		l.least = max(l.wait-time.Second, 0)
	}
	p := policyInfo{quota: -1}
	if v := fieldValue(h, hdrLimit); v != "" {
		if ms, err := parseSFList(v); err == nil && len(ms) > 0 && !ms[0].isInn &&
			ms[0].item.bare.kind == sfInteger && ms[0].item.bare.num >= 0 {
			p.quota = min(ms[0].item.bare.num, maxSeconds)
			if w, _, ok := intParam(ms[0].item, "w"); ok && w > 0 {
				p.window = time.Duration(w) * time.Second
			}
		}
	}
	return l, p, true
}

// sfNonNegative parses v as an sf-integer item of at least 0 (parameters
// allowed and ignored).
func sfNonNegative(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	it, err := parseSFItem(v)
	if err != nil || it.bare.kind != sfInteger || it.bare.num < 0 {
		return 0, false
	}
	return min(it.bare.num, maxSeconds), true
}

// readXRateLimit reads the unstandardised X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset: decimal digits only. A
// Reset of epochThreshold or more is a Unix time, else a delay in seconds.
func readXRateLimit(h http.Header, serverNow time.Time) (limitInfo, policyInfo, bool) {
	rem, ok := parseDigits(h.Get(hdrXRemaining))
	if !ok {
		return limitInfo{}, policyInfo{}, false
	}
	l := limitInfo{remaining: min(rem, maxSeconds), wait: DefaultPause}
	if reset, ok := parseDigits(h.Get(hdrXReset)); ok {
		if reset >= epochThreshold {
			l.wait = min(max(time.Unix(reset, 0).Sub(serverNow), 0), maxSeconds*time.Second)
		} else {
			l.wait = time.Duration(reset) * time.Second
		}
		l.least = max(l.wait-time.Second, 0)
	}
	p := policyInfo{quota: -1}
	if q, ok := parseDigits(h.Get(hdrXLimit)); ok {
		p.quota = min(q, maxSeconds)
	}
	return l, p, true
}

// parseDigits parses 1*DIGIT, surrounded by optional whitespace. Values
// above maxDigits are clamped to it, so that a huge value cannot overflow;
// callers bound the result further.
func parseDigits(v string) (int64, bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return 0, false
		}
	}
	v = strings.TrimLeft(v, "0")
	if len(v) > 15 {
		return maxDigits, true
	}
	n, _ := strconv.ParseInt("0"+v, 10, 64)
	return min(n, maxDigits), true
}

// maxDigits is the largest value parseDigits returns, as large as an
// sf-integer.
const maxDigits = 999_999_999_999_999

// parseRetryAfter parses Retry-After (RFC 9110 §10.2.3): delay-seconds, or
// an HTTP-date, measured from serverNow (a date in the past is 0).
func parseRetryAfter(v string, serverNow time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	if s, ok := parseDigits(v); ok {
		return time.Duration(min(s, maxSeconds)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(serverNow)
	return min(max(d, 0), maxSeconds*time.Second), true
}
