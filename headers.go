package ratelimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HeaderStyle selects which rate-limit headers SetHeaders writes. Styles
// combine with |, e.g. HeadersIETF|HeadersXRateLimit for clients that know
// only the legacy names. HeadersIETF is the Limiter's default; HeadersNone
// writes nothing. Bits other than the styles below are ignored.
//
// Every style describes the most restrictive limit of the Decision
// (Decision.Limit), and every number is a non-negative integer: quotas in
// units of cost, durations in whole seconds.
type HeaderStyle uint8

const (
	// HeadersIETF writes the two fields of
	// draft-ietf-httpapi-ratelimit-headers-11, both Structured Field Lists
	// (RFC 9651):
	//
	//	RateLimit-Policy: "api-1s";q=10;w=1, "api-1m";q=120;w=60
	//	RateLimit: "api-1s";r=9;t=1
	//
	// RateLimit-Policy lists every limit of the policy, in order: its name
	// (Limit.Name), its quota q (Limit.Rate; for TokenBucket the larger of
	// Limit.Rate and Limit.Burst) and its window w (Limit.Period in
	// seconds). A limit of a period below one second says w=1 and what it
	// admits in the whole periods of a second: 10/500ms says q=20;w=1. RateLimit names the most restrictive limit, with
	// the cost it can still admit r (Decision.Remaining, at least 0) and
	// its effective window t: the whole seconds within which it admits no
	// more than r (Decision.RefillAfter rounded down), for every algorithm.
	HeadersIETF HeaderStyle = 1 << iota

	// HeadersDraft06 writes the separate integer fields of
	// draft-ietf-httpapi-ratelimit-headers-06 and earlier:
	// RateLimit-Limit (q of the most restrictive limit), RateLimit-Remaining
	// (r) and RateLimit-Reset (t, delta seconds). Each is a plain integer;
	// the quota-policy suffix that draft allowed on RateLimit-Limit is not
	// written.
	HeadersDraft06

	// HeadersXRateLimit writes the legacy, unstandardised X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset with the same values as
	// HeadersDraft06. X-RateLimit-Reset is in delta seconds (seconds from
	// now), not a Unix timestamp as some APIs use.
	HeadersXRateLimit

	// HeadersDraft10 writes the fields of HeadersIETF with the meaning
	// draft-ietf-httpapi-ratelimit-headers-10 gave t: the seconds until the
	// limit's whole quota is back (Decision.ResetAfter rounded up), for
	// clients written against that draft. With HeadersIETF also set,
	// HeadersIETF's t is written.
	HeadersDraft10

	// HeadersNone writes no rate-limit headers.
	HeadersNone HeaderStyle = 0
)

// Canonical header keys (as http.CanonicalHeaderKey spells them), so that
// the map can be written directly and still be read with Header.Get.
const (
	hdrPolicy           = "Ratelimit-Policy"
	hdrRateLimit        = "Ratelimit"
	hdrLimit            = "Ratelimit-Limit"
	hdrRemaining        = "Ratelimit-Remaining"
	hdrReset            = "Ratelimit-Reset"
	hdrXLimit           = "X-Ratelimit-Limit"
	hdrXRemaining       = "X-Ratelimit-Remaining"
	hdrXReset           = "X-Ratelimit-Reset"
	hdrRetryAfter       = "Retry-After"
	allStyles           = HeadersIETF | HeadersDraft06 | HeadersXRateLimit | HeadersDraft10
	maxSFInteger  int64 = 999_999_999_999_999 // RFC 9651 sf-integer: at most 15 digits
)

// SetHeaders writes the rate-limit headers of style for decision d of
// policy p into h, replacing any values those headers had, and, for a
// denial, Retry-After: what a Limiter writes for a request it decided
// alone. The headers of styles not selected are left alone.
//
// Retry-After is RFC 9110 delay-seconds: d.RetryAfter rounded up to whole
// seconds, at least 1 (a client told 0 would retry at once), and never
// before the end of the effective window the RateLimit field's t states
// (draft-11). It is not written when d.Allowed is true, when d.RetryAfter
// is Never (the request's cost can never be admitted, so no wait helps)
// or d.InFlight (every slot of a Concurrent limit is held: a slot frees
// when a request ends, at no time to promise).
//
// It is safe with any input and never panics: with a nil h or HeadersNone
// it does nothing; with a nil or empty p, or a d.Limit that is not an index
// of p's limits, it removes the selected styles' headers it cannot fill
// (RateLimit-Policy is still written when p has limits). The zero Decision
// describes limit 0 with nothing remaining and t=0. Decision.Limits is not
// read, so it may be shorter than the policy. It writes no pk: a Limiter,
// which knows the request's identities, adds each item's.
func SetHeaders(h http.Header, style HeaderStyle, p *Policy, d Decision) {
	if h == nil || style&allStyles == HeadersNone {
		return
	}
	setStyleFields(h, style, p, d, nil)
	setRetryAfter(h, d)
}

// setStyleFields writes the headers of style (not Retry-After) for
// decision d of policy p into h, as SetHeaders says; with keys (the
// request's, as a Limiter writes them), each draft-11 item that belongs
// to one identity carries its partition key (pkOf).
func setStyleFields(h http.Header, style HeaderStyle, p *Policy, d Decision, keys []string) {
	style &= allStyles
	if h == nil || style == HeadersNone {
		return
	}
	var limits []Limit
	var tokenBucket bool
	if p != nil {
		limits, tokenBucket = p.limits, p.algorithm == TokenBucket
	}
	var cur *Limit
	if d.Limit >= 0 && d.Limit < len(limits) {
		cur = &limits[d.Limit]
	}

	// Every value is appended to one buffer, then converted to one string
	// and sliced, so a call costs two allocations whatever the style.
	type field struct {
		key        string
		start, end int
	}
	var (
		stack  [1024]byte
		b      = stack[:0]
		fields [8]field
		nf     int
		drop   [8]string
		nd     int
	)
	var policyValue string // RateLimit-Policy, built once per policy
	var pkBuf [pkLen]byte
	var pk0 []byte // the first identity's partition key, once made
	if style&(HeadersIETF|HeadersDraft10) != 0 {
		switch {
		case len(limits) > 0 && len(keys) == 1:
			// Every limit applies to the one identity: each item says whose.
			start := len(b)
			pk0 = pkOf(&pkBuf, keys[0])
			b = appendPolicyHeader(b, limits, tokenBucket, pk0)
			fields[nf] = field{hdrPolicy, start, len(b)}
			nf++
		case len(limits) > 0:
			policyValue = p.policyHeader()
		default:
			drop[nd] = hdrPolicy
			nd++
		}
		if cur != nil {
			start := len(b)
			b = appendSFString(b, cur.Name)
			b = append(b, ";r="...)
			b = appendSFInt(b, d.Remaining)
			if !cur.Concurrent { // a slot frees when a request ends: no time to tell
				b = append(b, ";t="...)
				if style&HeadersIETF != 0 {
					b = appendSFInt(b, floorSeconds(d.RefillAfter))
				} else {
					b = appendSFInt(b, ceilSeconds(d.ResetAfter))
				}
			}
			if d.Key == 0 && pk0 != nil {
				b = appendPK(b, pk0)
			} else if d.Key >= 0 && d.Key < len(keys) {
				b = appendPK(b, pkOf(&pkBuf, keys[d.Key]))
			}
			fields[nf] = field{hdrRateLimit, start, len(b)}
			nf++
		} else {
			drop[nd] = hdrRateLimit
			nd++
		}
	}

	if style&(HeadersDraft06|HeadersXRateLimit) != 0 {
		// Both legacy styles carry the same three integers: write them
		// once and share the substrings.
		var lim, rem, reset [2]int
		if cur != nil {
			lim[0] = len(b)
			b = appendSFInt(b, limitQuota(cur, tokenBucket))
			lim[1], rem[0] = len(b), len(b)
			b = appendSFInt(b, d.Remaining)
			rem[1], reset[0] = len(b), len(b)
			b = appendSFInt(b, ceilSeconds(d.ResetAfter))
			reset[1] = len(b)
		}
		for _, s := range [...]struct {
			style                  HeaderStyle
			limit, remaining, rset string
		}{
			{HeadersDraft06, hdrLimit, hdrRemaining, hdrReset},
			{HeadersXRateLimit, hdrXLimit, hdrXRemaining, hdrXReset},
		} {
			if style&s.style == 0 {
				continue
			}
			if cur == nil {
				drop[nd], drop[nd+1], drop[nd+2] = s.limit, s.remaining, s.rset
				nd += 3
				continue
			}
			fields[nf] = field{s.limit, lim[0], lim[1]}
			fields[nf+1] = field{s.remaining, rem[0], rem[1]}
			fields[nf+2] = field{s.rset, reset[0], reset[1]}
			nf += 3
		}
	}

	for _, k := range drop[:nd] {
		delete(h, k)
	}
	if nf == 0 && policyValue == "" {
		return
	}
	all := string(b)
	vals := make([]string, nf+1)
	for i, f := range fields[:nf] {
		vals[i] = all[f.start:f.end]
		h[f.key] = vals[i : i+1 : i+1]
	}
	if policyValue != "" {
		vals[nf] = policyValue
		h[hdrPolicy] = vals[nf : nf+1 : nf+1]
	}
}

// writeFields writes the rate-limit headers of style for decision d of
// p, as a Limiter writes them: after those of the Limiters outside it when
// there are some (outer; their lists first; of the legacy styles, the
// limit with the least remaining), and Retry-After for a denial.
func writeFields(h http.Header, style HeaderStyle, p *Policy, d Decision, keys []string, outer, denied bool) {
	if style == HeadersNone {
		return
	}
	if !outer {
		setStyleFields(h, style, p, d, keys)
	} else {
		prevPolicy, prevRL := h.Values(hdrPolicy), h.Values(hdrRateLimit)
		type trio struct{ lim, rem, reset []string }
		var prev [2]trio
		for i, names := range [2][3]string{{hdrLimit, hdrRemaining, hdrReset}, {hdrXLimit, hdrXRemaining, hdrXReset}} {
			prev[i] = trio{h.Values(names[0]), h.Values(names[1]), h.Values(names[2])}
		}
		setStyleFields(h, style, p, d, keys)
		// Draft-10 fields are lists: the outer Limiters' items first.
		if style&(HeadersIETF|HeadersDraft10) != 0 {
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
			setRetryAfter(h, d)
		}
	}
}

// policyHeader returns the RateLimit-Policy value of p, built at its
// first use.
func (p *Policy) policyHeader() string {
	if h := p.header.Load(); h != nil {
		return *h
	}
	h := string(appendPolicyHeader(nil, p.limits, p.algorithm == TokenBucket, nil))
	p.header.Store(&h)
	return h
}

// appendPolicyHeader appends the RateLimit-Policy value of limits, each
// item with the partition key pk when there is one.
func appendPolicyHeader(b []byte, limits []Limit, tokenBucket bool, pk []byte) []byte {
	for i := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, limits[i].Name)
		b = append(b, ";q="...)
		if limits[i].Concurrent {
			// Requests in flight: no window (the draft's quota unit).
			b = appendSFInt(b, limits[i].Rate)
			b = append(b, `;qu="concurrent-requests"`...)
		} else {
			b = appendSFInt(b, limitQuota(&limits[i], tokenBucket))
			b = append(b, ";w="...)
			b = appendSFInt(b, windowSeconds(limits[i].Period))
		}
		b = appendPK(b, pk)
	}
	return b
}

// The partition key (draft-11's pk) of an identity: the first pkLen bytes
// of HMAC-SHA-256, keyed with pkKey, of the identity's key as the Limiter
// stores it. The key is public so that a client can compute its own.
const (
	pkKey = "ratelimit pk"
	pkLen = 8 // 64 bits: short on the wire, far from colliding among one server's identities
)

// pkOf is the partition key of the identity key ("ip:203.0.113.7", "key:"
// and the hash of an API key, "user:42"): never the key itself, the same
// on every server. It is written into dst, which it returns as a slice.
func pkOf(dst *[pkLen]byte, key string) []byte {
	m, ok := pkMACs.Get().(*pkMAC)
	if !ok {
		m = &pkMAC{mac: hmac.New(sha256.New, []byte(pkKey)), sum: make([]byte, 0, sha256.Size)}
	}
	m.in = append(m.in[:0], key...)
	m.mac.Reset()
	m.mac.Write(m.in)
	m.sum = m.mac.Sum(m.sum[:0])
	copy(dst[:], m.sum)
	if cap(m.in) <= maxPooledKey {
		pkMACs.Put(m)
	}
	return dst[:]
}

// pkMAC is a keyed HMAC and its buffers, reused from pkMACs: a request's
// fields then cost no hashing state of their own.
type pkMAC struct {
	mac     hash.Hash
	in, sum []byte
}

// maxPooledKey bounds the identity keys whose buffer goes back to the pool.
const maxPooledKey = 1024

// pkMACs holds the pkMACs not in use (an empty pool makes one).
var pkMACs sync.Pool

// appendPK appends the parameter pk, an RFC 9651 byte sequence, when pk
// is not nil.
func appendPK(b, pk []byte) []byte {
	if pk == nil {
		return b
	}
	b = append(b, ";pk=:"...)
	b = base64.StdEncoding.AppendEncode(b, pk)
	return append(b, ':')
}

// setRetryAfter writes Retry-After into h for a denied decision, as
// SetHeaders says, replacing any previous value; otherwise it leaves h
// unchanged.
func setRetryAfter(h http.Header, d Decision) {
	secs, ok := retryAfterSeconds(d)
	if h == nil || !ok {
		return
	}
	var stack [20]byte
	h[hdrRetryAfter] = []string{string(strconv.AppendInt(stack[:0], secs, 10))}
}

// retryAfterSeconds is the delay setRetryAfter writes for d, and false when
// it writes none.
func retryAfterSeconds(d Decision) (int64, bool) {
	if d.Allowed || d.RetryAfter == Never || d.InFlight {
		return 0, false
	}
	return max(1, ceilSeconds(d.RetryAfter), floorSeconds(d.RefillAfter)), true
}

// limitQuota is the quota a header advertises for l: its rate, or a token
// bucket's burst when that is larger (a burst below the rate, refilled
// within a second, would hide the rate a client can keep); for a period
// below a second, what it admits per second (10/500ms: 20), as its window
// is one second.
func limitQuota(l *Limit, tokenBucket bool) int64 {
	q := l.Rate
	if tokenBucket && l.Burst > l.Rate {
		q = l.Burst
	}
	if l.Period > 0 && l.Period < time.Second {
		per := int64(time.Second / l.Period) // whole periods per second
		if q > maxSFInteger/per {
			return maxSFInteger
		}
		q *= per
	}
	return q
}

// windowSeconds is a limit's period in whole seconds, rounded up, at least 1
// (periods above a second are whole seconds: NewPolicy refuses others).
func windowSeconds(period time.Duration) int64 {
	return max(1, ceilSeconds(period))
}

// ceilSeconds is d in whole seconds rounded up; 0 when d ≤ 0. It does not
// overflow for any Duration.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// floorSeconds is d in whole seconds rounded down; 0 when d ≤ 0.
func floorSeconds(d time.Duration) int64 {
	return max(int64(d/time.Second), 0)
}

// appendSFInt appends v as an RFC 9651 sf-integer, clamped to
// [0, 999999999999999] so the field stays valid whatever the input.
func appendSFInt(b []byte, v int64) []byte {
	return strconv.AppendInt(b, min(max(v, 0), maxSFInteger), 10)
}

// appendSFString appends s as an RFC 9651 sf-string: quoted, with `"` and
// `\` escaped. Bytes an sf-string cannot hold (controls, non-ASCII) are
// written as '?'; limit names never contain them.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
