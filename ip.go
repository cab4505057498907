package ratelimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// Work limits for forwarded headers: text beyond the rightmost
// maxForwardedBytes of a header, and entries beyond the rightmost
// maxForwardedHops, are never looked at.
const (
	maxForwardedBytes = 8 << 10
	maxForwardedHops  = 64
)

// IPOption configures ByIP.
type IPOption func(*ipConfig)

type ipConfig struct {
	trusted   []string
	header    string
	headerSet bool
	v4Bits    int
	v6Bits    int
}

// TrustedProxies lists the proxies whose forwarded headers ByIP believes,
// as CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or single addresses
// ("192.0.2.10", "::1"), IPv4 or IPv6. IPv4-mapped IPv6 forms
// ("::ffff:10.0.0.0/104") are taken as IPv4. Host bits after the prefix
// length are ignored ("10.1.2.3/8" trusts 10.0.0.0/8). Repeated options
// add up. Without TrustedProxies, ByIP reads no header at all and uses
// RemoteAddr. The strings are parsed by ByIP, which rejects bad ones.
//
// List only addresses the proxies connect from. Trusting "0.0.0.0/0" or
// "::/0" believes the headers of any client, which is safe only if the
// server cannot be reached except through the proxies.
func TrustedProxies(cidrs ...string) IPOption {
	cidrs = append([]string(nil), cidrs...)
	return func(c *ipConfig) { c.trusted = append(c.trusted, cidrs...) }
}

// ClientIPHeader names the header the trusted proxies set to tell the
// client's address:
//
//   - "X-Forwarded-For" (the default): a comma-separated list of hops,
//     possibly over several header lines, read right to left.
//   - "Forwarded" (RFC 7239): its for= parameters, read right to left.
//   - any other name, such as "X-Real-IP", "True-Client-IP" or
//     "CF-Connecting-IP": a header holding exactly one address.
//
// Names are case-insensitive. The header is read only when the request's
// peer is one of the TrustedProxies, so ByIP rejects ClientIPHeader
// without TrustedProxies. Use a single-value header only if every trusted
// proxy sets it, overwriting any value the client sent.
func ClientIPHeader(name string) IPOption {
	return func(c *ipConfig) { c.header, c.headerSet = name, true }
}

// IPv6Prefix sets the prefix length, 1 to 128 bits (default 64), by which
// ByIP groups IPv6 clients: with one key per /64, a client rotating
// addresses inside its allocation still counts as one. Use 48 or 56 to
// group whole sites, 128 to limit each address alone.
func IPv6Prefix(bits int) IPOption { return func(c *ipConfig) { c.v6Bits = bits } }

// IPv4Prefix sets the prefix length, 1 to 32 bits (default 32: one key per
// address), by which ByIP groups IPv4 clients.
func IPv4Prefix(bits int) IPOption { return func(c *ipConfig) { c.v4Bits = bits } }

// IPIdentifier identifies requests by client IP address. Build one with
// ByIP, which returns it as an Identifier; assert to *IPIdentifier to call
// ClientIP. The zero value (and a nil pointer) resolves like ByIP(): it
// uses RemoteAddr only, with the default prefixes. An IPIdentifier is
// immutable and safe for concurrent use.
type IPIdentifier struct {
	err     error // the options' mistake: New refuses the identifier
	trusted []netip.Prefix
	header  string // canonical header name
	mode    ipHeaderMode
	v4Bits  int // 0 means 32
	v6Bits  int // 0 means 64
}

type ipHeaderMode uint8

const (
	headerXFF ipHeaderMode = iota
	headerForwarded
	headerSingle
)

// ByIP returns an Identifier that limits by client IP address, with keys
// such as "ip:203.0.113.7", "ip:203.0.113.0/24" (with IPv4Prefix(24)) or
// "ip:2001:db8:1:2::/64". Addresses are written in their canonical form,
// so equal addresses always give equal keys; IPv4-mapped IPv6 addresses
// (::ffff:203.0.113.7) count as IPv4, and IPv6 zones (%eth0) are dropped.
// The identifier always applies: its ok is always true.
//
// The client address is the host of r.RemoteAddr ("host:port" or a bare
// host) unless TrustedProxies are configured and the RemoteAddr peer is
// one of them. Only then is ClientIPHeader (default X-Forwarded-For) read;
// a request from any other peer is judged by RemoteAddr alone whatever
// headers it carries, so a spoofed header can neither evade a limit nor
// charge someone else's.
//
// X-Forwarded-For and Forwarded are walked from the right (the hop nearest
// the server), skipping trusted proxies; the first untrusted address is the
// client. If every entry is trusted, the leftmost is used. An entry that is
// not a plain IP address (a hostname, "unknown", an obfuscated "_name", an
// X-Forwarded-For entry with a port, garbage) stops the walk, and the last
// trusted hop reached is used instead: never a value derived from the bad
// entry. Forwarded for= values may be quoted and, as RFC 7239 allows, carry
// a port and brackets (for="[2001:db8::1]:4711"); quoted values holding
// commas, semicolons or backslash escapes are treated as bad entries. Only
// the rightmost 8 KB and 64 entries are examined; the walk stops there as
// if at a bad entry. A single-value header (X-Real-IP and the like) must
// be exactly one header line holding one address, else the peer's address
// is used.
//
// When the address cannot be determined at all (RemoteAddr empty or not an
// IP address), the key is UnknownIPKey: every such request shares one
// bucket.
//
// A mistake in the options (a trusted proxy that is not a CIDR prefix or
// IP address, a prefix length out of range, an invalid header name, or
// ClientIPHeader without TrustedProxies) makes New and WithIdentifiers
// fail with an error starting "ratelimit: " and naming the bad value; the
// identifier itself, used anyway, gives every request UnknownIPKey (one
// shared limit, never none). To limit authenticated callers, use ByUser or
// ByHeader instead, or alongside.
//
// ByIP returns the *IPIdentifier itself, an Identifier whose ClientIP
// says which address it resolved for a request.
func ByIP(opts ...IPOption) *IPIdentifier {
	id, err := byIP(opts)
	if err != nil {
		return &IPIdentifier{err: err}
	}
	return id
}

func byIP(opts []IPOption) (*IPIdentifier, error) {
	c := ipConfig{header: "X-Forwarded-For", v4Bits: 32, v6Bits: 64}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.v4Bits < 1 || c.v4Bits > 32 {
		return nil, fmt.Errorf("ratelimit: IPv4 prefix length %d is out of range 1 to 32", c.v4Bits)
	}
	if c.v6Bits < 1 || c.v6Bits > 128 {
		return nil, fmt.Errorf("ratelimit: IPv6 prefix length %d is out of range 1 to 128", c.v6Bits)
	}
	id := &IPIdentifier{v4Bits: c.v4Bits, v6Bits: c.v6Bits}
	for _, s := range c.trusted {
		p, err := parseTrustedProxy(s)
		if err != nil {
			return nil, err
		}
		id.trusted = append(id.trusted, p)
	}
	if err := validHeaderName(c.header); err != nil {
		return nil, fmt.Errorf("ratelimit: client IP header %q: %w", c.header, err)
	}
	if c.headerSet && len(id.trusted) == 0 {
		return nil, fmt.Errorf("ratelimit: client IP header %q is only read from trusted proxies, and no TrustedProxies are configured", c.header)
	}
	id.header = textproto.CanonicalMIMEHeaderKey(c.header)
	switch id.header {
	case "X-Forwarded-For":
		id.mode = headerXFF
	case "Forwarded":
		id.mode = headerForwarded
	default:
		id.mode = headerSingle
	}
	return id, nil
}

// parseTrustedProxy parses one TrustedProxies entry.
func parseTrustedProxy(s string) (netip.Prefix, error) {
	t := strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(t, "/") {
		var err error
		if p, err = netip.ParsePrefix(t); err != nil {
			return netip.Prefix{}, fmt.Errorf("ratelimit: trusted proxy %q is not a CIDR prefix or IP address: %w", s, err)
		}
	} else {
		a, err := netip.ParseAddr(t)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("ratelimit: trusted proxy %q is not a CIDR prefix or IP address: %w", s, err)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("ratelimit: trusted proxy %q: IPv6 zones are not supported", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Identify returns the key of the request's client address, grouped by
// the configured prefix, or UnknownIPKey. ok is always true.
func (id *IPIdentifier) Identify(r *http.Request) (key string, ok bool) {
	if id != nil && id.err != nil {
		return UnknownIPKey, true
	}
	a, ok := id.ClientIP(r)
	if !ok {
		return UnknownIPKey, true
	}
	return id.key(a), true
}

// ClientIP reports the client address Identify resolves the request to,
// before prefix grouping (useful for logs), following the rules of ByIP.
// The address is unmapped (IPv4-mapped IPv6 becomes IPv4) and has no zone.
// ok is false when no address could be determined; Identify then uses
// UnknownIPKey.
func (id *IPIdentifier) ClientIP(r *http.Request) (addr netip.Addr, ok bool) {
	if r == nil {
		return netip.Addr{}, false
	}
	peer, ok := parseNode(r.RemoteAddr, portDigits)
	if !ok {
		return netip.Addr{}, false
	}
	if id == nil || !id.trusts(peer) {
		return peer, true
	}
	lines := r.Header[id.header]
	if id.mode == headerSingle {
		if len(lines) != 1 {
			return peer, true
		}
		if a, ok := parseNode(trimOWS(lines[0]), portNone); ok {
			return a, true
		}
		return peer, true
	}
	return id.walk(lines, peer), true
}

// trusts reports whether a is inside a trusted proxy prefix.
func (id *IPIdentifier) trusts(a netip.Addr) bool {
	for _, p := range id.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// walk resolves a list header (X-Forwarded-For or Forwarded) sent by the
// trusted peer: entries right to left, across header lines from the last.
func (id *IPIdentifier) walk(lines []string, peer netip.Addr) netip.Addr {
	last := peer // the last trusted hop reached
	budget, hops := maxForwardedBytes, 0
	for li := len(lines) - 1; li >= 0; li-- {
		line, cut := lines[li], false
		if len(line) > budget {
			line, cut = line[len(line)-budget:], true
		}
		budget -= len(line)
		for {
			i := strings.LastIndexByte(line, ',')
			if i < 0 && cut {
				// The leftmost piece may be the tail of a longer entry.
				return last
			}
			if elem := trimOWS(line[i+1:]); elem != "" { // empty list elements are skipped
				if hops++; hops > maxForwardedHops {
					return last
				}
				var a netip.Addr
				var ok bool
				if id.mode == headerForwarded {
					a, ok = parseForwardedElement(elem)
				} else {
					a, ok = parseNode(elem, portNone)
				}
				if !ok {
					return last
				}
				if !id.trusts(a) {
					return a
				}
				last = a
			}
			if i < 0 {
				break
			}
			line = line[:i]
		}
	}
	return last
}

// key formats a's key, grouped by the configured prefix.
func (id *IPIdentifier) key(a netip.Addr) string {
	bits, full := 64, 128
	if id != nil && id.v6Bits != 0 {
		bits = id.v6Bits
	}
	if a.Is4() {
		bits, full = 32, 32
		if id != nil && id.v4Bits != 0 {
			bits = id.v4Bits
		}
	}
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	if bits >= full {
		b = a.AppendTo(b)
	} else if p, err := a.Prefix(bits); err == nil {
		b = p.AppendTo(b)
	} else {
		return UnknownIPKey // unreachable: bits is validated and a has no zone
	}
	return string(b)
}

// ClientIn returns a function, for WithSkip, that reports whether a
// request's client address is in one of cidrs ("10.0.0.0/8", "::1", or a
// bare address): for health checkers and internal networks. The client
// address is the one ip resolves (ByIP's rules, trusted proxies included);
// a nil ip means the TCP peer (RemoteAddr), forwarded headers ignored. A
// request whose address cannot be determined is not in any range. It
// reports an error, starting "ratelimit: ", for a malformed CIDR or address.
func ClientIn(ip *IPIdentifier, cidrs ...string) (func(*http.Request) bool, error) {
	if len(cidrs) == 0 {
		return nil, errors.New("ratelimit: ClientIn: no ranges")
	}
	prefixes := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := parseTrustedProxy(s)
		if err != nil {
			return nil, fmt.Errorf("ratelimit: ClientIn: %q is not a CIDR prefix or IP address", s)
		}
		prefixes = append(prefixes, p)
	}
	if ip == nil {
		ip = ByIP() // no options: no mistake
	}
	if err := ip.configErr(); err != nil {
		return nil, fmt.Errorf("ratelimit: ClientIn: %w", err)
	}
	return func(r *http.Request) bool {
		a, ok := ip.ClientIP(r)
		if !ok {
			return false
		}
		for _, p := range prefixes {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}, nil
}

// configErr is the mistake in the options ByIP was given, or nil.
func (id *IPIdentifier) configErr() error {
	if id == nil {
		return nil
	}
	return id.err
}
