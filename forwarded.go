package ratelimit

// Parsing of the addresses that RemoteAddr and the forwarded headers
// (X-Forwarded-For, X-Real-IP, RFC 7239 Forwarded) carry, for ByIP.

import (
	"net/netip"
	"strings"
)

// portRule says which port, if any, an address may carry.
type portRule uint8

const (
	portNone    portRule = iota // no port allowed
	portDigits                  // optional decimal port, 0 to 65535
	portRFC7239                 // optional port: decimal or obfuscated "_name"
)

// parseNode parses an address as RemoteAddr, a forwarded entry or a
// Forwarded node carries it: "192.0.2.1", "2001:db8::1", "[2001:db8::1]",
// and, if the rule allows a port, "192.0.2.1:80" or "[2001:db8::1]:80".
// The result has no zone and is unmapped.
func parseNode(s string, rule portRule) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	host, port, hasPort, bracketed := s, "", false, false
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, bracketed = s[1:end], true
		if rest := s[end+1:]; rest != "" {
			if rest[0] != ':' {
				return netip.Addr{}, false
			}
			port, hasPort = rest[1:], true
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// Exactly one colon: IPv4 (or a name) with a port. Two or more
		// colons without brackets can only be a bare IPv6 address.
		host, port, hasPort = s[:i], s[i+1:], true
	}
	if hasPort && !validPort(port, rule) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (bracketed && !a.Is6()) {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

func validPort(p string, rule portRule) bool {
	switch rule {
	case portDigits, portRFC7239:
		if p == "" {
			return false
		}
		if rule == portRFC7239 && p[0] == '_' {
			// obfport = "_" 1*(ALPHA / DIGIT / "." / "_" / "-")
			if len(p) == 1 {
				return false
			}
			for i := 1; i < len(p); i++ {
				c := p[i]
				if !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
					return false
				}
			}
			return true
		}
		if len(p) > 5 {
			return false
		}
		n := 0
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return false
			}
			n = n*10 + int(p[i]-'0')
		}
		return n <= 65535
	}
	return false
}

// parseForwardedElement returns the address in the for= parameter of one
// RFC 7239 forwarded-element, such as `for="[2001:db8::1]:4711";proto=https`.
// It fails on a malformed element, a missing or repeated for=, and for=
// values that are not addresses ("unknown", "_hidden").
func parseForwardedElement(elem string) (netip.Addr, bool) {
	var value string
	found := false
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		if pair = trimOWS(pair); pair == "" {
			continue
		}
		name, v, ok := strings.Cut(pair, "=")
		if !ok || !isToken(name) {
			return netip.Addr{}, false
		}
		if len(v) > 0 && v[0] == '"' {
			if len(v) < 2 || v[len(v)-1] != '"' || strings.ContainsAny(v[1:len(v)-1], "\"\\") {
				return netip.Addr{}, false
			}
			v = v[1 : len(v)-1]
		} else if strings.ContainsAny(v, "\"\\") {
			return netip.Addr{}, false
		}
		if strings.EqualFold(name, "for") {
			if found {
				return netip.Addr{}, false
			}
			value, found = v, true
		}
	}
	if !found {
		return netip.Addr{}, false
	}
	// "unknown" and obfuscated "_name" identifiers are not addresses, so
	// parseNode rejects them like any other non-address.
	return parseNode(value, portRFC7239)
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}
