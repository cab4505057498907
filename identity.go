package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
)

// Identifier turns a request into the key it is limited under, such as
// "ip:203.0.113.7" or "user:42". ok is false when the identifier does not
// apply to the request (no user on an anonymous request); the Limiter then
// skips it. Identify must be safe for concurrent use and must not panic on
// any input.
type Identifier interface {
	Identify(r *http.Request) (key string, ok bool)
}

// IdentifierFunc adapts a function to Identifier.
type IdentifierFunc func(r *http.Request) (key string, ok bool)

// Identify calls f(r).
func (f IdentifierFunc) Identify(r *http.Request) (string, bool) { return f(r) }

// ByHeader returns an Identifier that limits by the value of the request
// header name, typically an API key header such as "X-API-Key". The key is
// "key:" followed by the first 32 hex digits (128 bits) of the SHA-256 of
// the value, so raw API keys never reach the store. The first header line
// is used (as http.Header.Get does), with surrounding spaces and tabs
// trimmed; a missing or empty value makes the identifier not apply
// (ok == false).
//
// ByHeader does not check the value: a client may send any value and so
// get fresh buckets. Pair it with ByIP, or, once keys are verified by an
// authentication middleware that runs first, use ByUser instead.
//
// A name that is not a valid header name (an RFC 9110 token) makes New and
// WithIdentifiers fail with an error starting "ratelimit: "; the
// identifier itself, used anyway, never applies.
func ByHeader(name string) Identifier {
	if err := validHeaderName(name); err != nil {
		return &badIdentifier{fmt.Errorf("ratelimit: ByHeader: header name %q: %w", name, err)}
	}
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	return IdentifierFunc(func(r *http.Request) (string, bool) {
		if r == nil {
			return "", false
		}
		vals := r.Header[canonical]
		if len(vals) == 0 {
			return "", false
		}
		v := trimOWS(vals[0])
		if v == "" {
			return "", false
		}
		sum := sha256.Sum256([]byte(v))
		var buf [len("key:") + 32]byte
		copy(buf[:], "key:")
		hex.Encode(buf[len("key:"):], sum[:16])
		return string(buf[:]), true
	})
}

// badIdentifier is an identifier built from a mistake: it never applies,
// and New refuses it with the mistake.
type badIdentifier struct{ err error }

func (b *badIdentifier) Identify(*http.Request) (string, bool) { return "", false }
func (b *badIdentifier) configErr() error                      { return b.err }

// misconfigured is an identifier that knows it was built from a mistake.
type misconfigured interface{ configErr() error }

// identifierErr returns the mistake an identifier (or one FirstOf combines)
// was built from, or nil.
func identifierErr(id Identifier) error {
	switch v := id.(type) {
	case misconfigured:
		return v.configErr()
	case *firstOf:
		for _, m := range v.ids {
			if err := identifierErr(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// ByUser returns an Identifier that limits by the user fn finds on the
// request, typically one an authentication middleware stored in the
// request context. The key is "user:" + id; the store escapes or hashes
// keys, so id may hold any text. When fn reports ok == false or an empty
// id (an anonymous request), the identifier does not apply; pair it with
// ByIP so anonymous requests are limited too. A nil fn gives an Identifier
// that never applies.
func ByUser(fn func(r *http.Request) (id string, ok bool)) Identifier {
	if fn == nil {
		return IdentifierFunc(func(*http.Request) (string, bool) { return "", false })
	}
	return IdentifierFunc(func(r *http.Request) (string, bool) {
		id, ok := fn(r)
		if !ok || id == "" {
			return "", false
		}
		return "user:" + id, true
	})
}

// FirstOf returns an Identifier that uses the first of ids that applies to
// a request: FirstOf(byKey, byIP) limits a request by its API key when it
// has one, and by its IP address otherwise, so key holders get their own
// budget instead of sharing their IP's. It applies when any of ids does.
// ids must not be empty or hold a nil Identifier; FirstOf panics then, as
// it is written in the program, never built from input.
func FirstOf(ids ...Identifier) Identifier {
	if len(ids) == 0 {
		panic("ratelimit: FirstOf: no identifiers")
	}
	for i, id := range ids {
		if id == nil || isNilFunc(id) {
			panic(fmt.Sprintf("ratelimit: FirstOf: identifier %d is nil", i))
		}
	}
	return &firstOf{ids: append([]Identifier(nil), ids...)}
}

// firstOf is FirstOf's identifier.
type firstOf struct{ ids []Identifier }

func (f *firstOf) Identify(r *http.Request) (string, bool) {
	for _, id := range f.ids {
		if k, ok := id.Identify(r); ok && k != "" {
			return k, true
		}
	}
	return "", false
}

// identify returns the keys of the identifiers ids that apply to r, without
// duplicates, or nil if none applies.
func identify(ids []Identifier, r *http.Request) []string {
	var keys []string
ids:
	for _, id := range ids {
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
			keys = make([]string, 0, len(ids))
		}
		keys = append(keys, k)
	}
	return keys
}

// requestID returns the request ID of r's idempotency header (hashed;
// WithIdempotencyKey), or "" when there is none.
func requestID(header string, r *http.Request) string {
	if header == "" {
		return ""
	}
	vals := r.Header[header]
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

// validHeaderName reports why name cannot be a header field name, or nil.
func validHeaderName(name string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("character %q at offset %d is not allowed in a header name", name[i], i)
		}
	}
	return nil
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	return isAlnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// trimOWS trims the optional whitespace (spaces and tabs) HTTP allows
// around header values and list elements.
func trimOWS(s string) string { return strings.Trim(s, " \t") }

// isNilFunc reports whether v is a nil func in an interface.
func isNilFunc(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Func && rv.IsNil()
}
