package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// headerLine is one header line added to a test request.
type headerLine struct{ name, value string }

// identReq returns a GET request from remoteAddr carrying the header lines,
// added in order (repeated names make several lines).
func identReq(remoteAddr string, lines ...headerLine) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	for _, h := range lines {
		r.Header.Add(h.name, h.value)
	}
	return r
}

func xffLine(v string) headerLine { return headerLine{"X-Forwarded-For", v} }

func fwdLine(v string) headerLine { return headerLine{"Forwarded", v} }

// mustByIP builds a ByIP identifier or fails the test.
func mustByIP(t testing.TB, opts ...ratelimit.IPOption) ratelimit.Identifier {
	t.Helper()
	id := ratelimit.ByIP(opts...)
	if err := identifierErr(id); err != nil {
		t.Fatalf("ByIP: %v", err)
	}
	return id
}

// ipKey identifies r with id, checks the invariants every ByIP key has
// (always applies, "ip:" prefix, canonical address or prefix) and returns
// the key.
func ipKey(t testing.TB, id ratelimit.Identifier, r *http.Request) string {
	t.Helper()
	key, ok := id.Identify(r)
	if !ok {
		t.Fatalf("Identify(RemoteAddr %q): ok = false, want true", r.RemoteAddr)
	}
	if err := checkIPKey(key); err != nil {
		t.Fatalf("Identify(RemoteAddr %q): %v", r.RemoteAddr, err)
	}
	return key
}

// checkIPKey reports why key is not a well-formed ByIP key.
func checkIPKey(key string) error {
	rest, ok := strings.CutPrefix(key, "ip:")
	if !ok {
		return fmt.Errorf("key %q does not start with ip:", key)
	}
	if key == ratelimit.UnknownIPKey {
		return nil
	}
	if strings.Contains(rest, "/") {
		p, err := netip.ParsePrefix(rest)
		if err != nil {
			return fmt.Errorf("key %q: %v", key, err)
		}
		if p != p.Masked() || p.String() != rest || p.Addr().Is4In6() {
			return fmt.Errorf("key %q is not a canonical masked prefix", key)
		}
		return nil
	}
	a, err := netip.ParseAddr(rest)
	if err != nil {
		return fmt.Errorf("key %q: %v", key, err)
	}
	if a.String() != rest || a.Zone() != "" || a.Is4In6() {
		return fmt.Errorf("key %q is not a canonical address", key)
	}
	return nil
}

func TestByIPRemoteAddr(t *testing.T) {
	id := mustByIP(t)
	tests := []struct {
		remoteAddr string
		want       string
	}{
		{"203.0.113.7:1234", "ip:203.0.113.7"},
		{"203.0.113.7", "ip:203.0.113.7"},
		{"0.0.0.0:0", "ip:0.0.0.0"},
		{"[2001:db8:1:2:3:4:5:6]:443", "ip:2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", "ip:2001:db8:1:2::/64"},
		{"[2001:db8:1:2::1]", "ip:2001:db8:1:2::/64"},
		{"[2001:DB8:0001:0002:0:0:0:1]:80", "ip:2001:db8:1:2::/64"},
		{"[::1]:80", "ip:::/64"},
		{"[fe80::1%eth0]:80", "ip:fe80::/64"},
		{"fe80::1%eth0", "ip:fe80::/64"},
		{"[::ffff:203.0.113.7]:80", "ip:203.0.113.7"},
		{"::ffff:203.0.113.7", "ip:203.0.113.7"},
		{"[::ffff:203.0.113.7%eth0]:80", "ip:203.0.113.7"},
		// Nothing usable: one shared bucket.
		{"", "ip:unknown"},
		{"garbage", "ip:unknown"},
		{"localhost:8080", "ip:unknown"},
		{"@", "ip:unknown"},
		{"/run/app.sock", "ip:unknown"},
		{"203.0.113.7:http", "ip:unknown"},
		{"203.0.113.7:", "ip:unknown"},
		{"203.0.113.7:123456", "ip:unknown"},
		{"300.0.113.7:80", "ip:unknown"},
		{"[203.0.113.7]:80", "ip:unknown"},
		{"[2001:db8::1", "ip:unknown"},
		{"[2001:db8::1]x", "ip:unknown"},
		{" 203.0.113.7:80", "ip:unknown"},
		{"1.2.3.4%eth0", "ip:unknown"},
	}
	for _, tt := range tests {
		if got := ipKey(t, id, identReq(tt.remoteAddr)); got != tt.want {
			t.Errorf("RemoteAddr %q: key %q, want %q", tt.remoteAddr, got, tt.want)
		}
	}
	if key, ok := id.Identify(nil); key != ratelimit.UnknownIPKey || !ok {
		t.Errorf("Identify(nil) = %q, %v; want %q, true", key, ok, ratelimit.UnknownIPKey)
	}
}

// Trusted proxies used by most tests below.
var testTrusted = ratelimit.TrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.10")

func TestByIPIgnoresHeadersFromUntrustedPeers(t *testing.T) {
	const attacker = "198.51.100.66:5555"
	const attackerKey = "ip:198.51.100.66"
	const victimKey = "ip:203.0.113.7"
	configs := map[string]ratelimit.Identifier{
		"no trusted proxies": mustByIP(t),
		"X-Forwarded-For":    mustByIP(t, testTrusted),
		"Forwarded":          mustByIP(t, testTrusted, ratelimit.ClientIPHeader("Forwarded")),
		"X-Real-IP":          mustByIP(t, testTrusted, ratelimit.ClientIPHeader("X-Real-IP")),
		"CF-Connecting-IP":   mustByIP(t, testTrusted, ratelimit.ClientIPHeader("cf-connecting-ip")),
	}
	// spoof returns every header an attacker could forge, naming addr.
	spoof := func(addr string) []headerLine {
		return []headerLine{
			xffLine(addr), xffLine(addr + ", 10.0.0.1"),
			fwdLine("for=" + addr), fwdLine(`for="[` + addr + `]:1"`),
			{"X-Real-IP", addr}, {"CF-Connecting-IP", addr}, {"True-Client-IP", addr},
		}
	}
	for name, id := range configs {
		t.Run(name, func(t *testing.T) {
			// Evasion: rotating spoofed values never changes the key.
			for i := 0; i < 50; i++ {
				addr := fmt.Sprintf("203.0.%d.%d", i/10, i)
				if i%2 == 1 {
					addr = fmt.Sprintf("2001:db8:%x::1", i)
				}
				if got := ipKey(t, id, identReq(attacker, spoof(addr)...)); got != attackerKey {
					t.Fatalf("spoofed %s: key %q, want %q", addr, got, attackerKey)
				}
			}
			// Lockout: naming the victim never charges the victim's key.
			if got := ipKey(t, id, identReq(attacker, spoof("203.0.113.7")...)); got != attackerKey || got == victimKey {
				t.Fatalf("spoofing the victim: key %q, want %q", got, attackerKey)
			}
			// Spoofing a trusted proxy address does not help either.
			if got := ipKey(t, id, identReq(attacker, spoof("10.0.0.1")...)); got != attackerKey {
				t.Fatalf("spoofing a proxy: key %q, want %q", got, attackerKey)
			}
		})
	}

	// Behind a trusted proxy that appends the peer it saw, forged entries
	// to the left are never reached.
	id := configs["X-Forwarded-For"]
	for i := 0; i < 20; i++ {
		forged := fmt.Sprintf("203.0.113.%d, 10.0.0.%d", i, i)
		r := identReq("10.0.0.1:443", xffLine(forged+", 198.51.100.66"))
		if got := ipKey(t, id, r); got != attackerKey {
			t.Fatalf("forged %q via trusted proxy: key %q, want %q", forged, got, attackerKey)
		}
	}
}

type ipCase struct {
	name  string
	peer  string
	lines []headerLine
	want  string
}

func runIPCases(t *testing.T, id ratelimit.Identifier, tests []ipCase) {
	t.Helper()
	for _, tt := range tests {
		if got := ipKey(t, id, identReq(tt.peer, tt.lines...)); got != tt.want {
			t.Errorf("%s: key %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestByIPTrustedXForwardedFor(t *testing.T) {
	const peer = "10.0.0.1:443"
	// hops returns n distinct trusted addresses, comma separated; the
	// leftmost is 10.1.0.1 and the rightmost 10.1.0.n.
	hops := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("10.1.%d.%d", (i+1)/256, (i+1)%256)
		}
		return strings.Join(s, ", ")
	}
	tests := []ipCase{
		{"one hop", peer, []headerLine{xffLine("203.0.113.7")}, "ip:203.0.113.7"},
		{"client then trusted hops", peer, []headerLine{xffLine("203.0.113.7, 10.0.0.2, 10.0.0.3")}, "ip:203.0.113.7"},
		{"forged left of client", peer, []headerLine{xffLine("1.1.1.1, 8.8.8.8, 203.0.113.7, 10.0.0.2")}, "ip:203.0.113.7"},
		{"several header lines", peer, []headerLine{xffLine("198.51.100.1, 203.0.113.7"), xffLine("10.0.0.2"), xffLine("10.0.0.3")}, "ip:203.0.113.7"},
		{"client in the last line", peer, []headerLine{xffLine("10.0.0.2"), xffLine("203.0.113.7")}, "ip:203.0.113.7"},
		{"ipv6 peer, ipv4 hop, ipv6 client", "[2001:db8:ffff::1]:443", []headerLine{xffLine("2001:db8:aaaa:bbbb::5, 10.0.0.9")}, "ip:2001:db8:aaaa:bbbb::/64"},
		{"ipv4 peer, ipv6 hop, ipv4 client", peer, []headerLine{xffLine("203.0.113.7, 2001:db8:ffff:1::2")}, "ip:203.0.113.7"},
		{"single trusted address", "192.0.2.10:80", []headerLine{xffLine("203.0.113.7")}, "ip:203.0.113.7"},
		{"neighbour of single trusted address", "192.0.2.11:80", []headerLine{xffLine("203.0.113.7")}, "ip:192.0.2.11"},
		{"mapped peer is trusted", "[::ffff:10.0.0.1]:443", []headerLine{xffLine("203.0.113.7")}, "ip:203.0.113.7"},
		{"all trusted: leftmost", peer, []headerLine{xffLine("10.0.0.5, 10.0.0.6")}, "ip:10.0.0.5"},
		{"no header: peer", peer, nil, "ip:10.0.0.1"},
		{"empty header: peer", peer, []headerLine{xffLine("")}, "ip:10.0.0.1"},
		{"empty elements skipped", peer, []headerLine{xffLine(" 203.0.113.7 ,, \t, 10.0.0.2 ,")}, "ip:203.0.113.7"},
		{"bracketed ipv6", peer, []headerLine{xffLine("[2001:db8::1]")}, "ip:2001:db8::/64"},
		{"mapped client", peer, []headerLine{xffLine("::ffff:203.0.113.7")}, "ip:203.0.113.7"},
		{"mapped trusted hop", peer, []headerLine{xffLine("203.0.113.7, ::ffff:10.0.0.2")}, "ip:203.0.113.7"},
		{"zone dropped", peer, []headerLine{xffLine("fe80::1%eth0")}, "ip:fe80::/64"},
		{"non-canonical ipv6", peer, []headerLine{xffLine("2001:DB8:0:0:0:0:0:1")}, "ip:2001:db8::/64"},
		// Malformed entries stop the walk at the last trusted hop.
		{"unknown rightmost", peer, []headerLine{xffLine("203.0.113.7, unknown")}, "ip:10.0.0.1"},
		{"garbage mid-chain", peer, []headerLine{xffLine("203.0.113.7, garbage, 10.0.0.2")}, "ip:10.0.0.2"},
		{"ipv4 with port", peer, []headerLine{xffLine("203.0.113.7:1234, 10.0.0.2")}, "ip:10.0.0.2"},
		{"ipv6 with port", peer, []headerLine{xffLine("[2001:db8::1]:1234")}, "ip:10.0.0.1"},
		{"hostname", peer, []headerLine{xffLine("client.example")}, "ip:10.0.0.1"},
		{"obfuscated", peer, []headerLine{xffLine("_hidden, 10.0.0.2")}, "ip:10.0.0.2"},
		{"garbage in a later line", peer, []headerLine{xffLine("203.0.113.7"), xffLine("nope")}, "ip:10.0.0.1"},
		{"bracketed ipv4", peer, []headerLine{xffLine("[203.0.113.7]")}, "ip:10.0.0.1"},
		// Work caps.
		{"64 trusted hops then client", peer, []headerLine{xffLine("203.0.113.7, " + hops(64))}, "ip:10.1.0.1"},
		{"63 trusted hops then client", peer, []headerLine{xffLine("203.0.113.7, " + hops(63))}, "ip:203.0.113.7"},
		{"long junk left of the client", peer, []headerLine{xffLine(strings.Repeat("x", 100_000) + ", 203.0.113.7, 10.0.0.2")}, "ip:203.0.113.7"},
		{"long junk line before", peer, []headerLine{xffLine(strings.Repeat("x", 100_000)), xffLine("203.0.113.7, 10.0.0.2")}, "ip:203.0.113.7"},
	}
	runIPCases(t, mustByIP(t, testTrusted), tests)
	runIPCases(t, mustByIP(t, testTrusted, ratelimit.ClientIPHeader("x-forwarded-for")), tests)
}

// The 8 KB window may cut an entry: its tail must never be read as an
// address ("11.2.3.4" cut to "1.2.3.4").
func TestByIPXForwardedForCutEntry(t *testing.T) {
	id := mustByIP(t, testTrusted)
	right := ", 10.0.0.2" + strings.Repeat(" ", 8<<10-len("1.2.3.4, 10.0.0.2"))
	if n := len("1.2.3.4" + right); n != 8<<10 {
		t.Fatalf("setup: window is %d bytes", n)
	}
	tests := []ipCase{
		{"cut inside an entry", "10.0.0.1:1", []headerLine{xffLine("11.2.3.4" + right)}, "ip:10.0.0.2"},
		{"cut inside an entry of an earlier line", "10.0.0.1:1", []headerLine{xffLine("11.2.3.4" + right[:100]), xffLine(right[100:])}, "ip:10.0.0.2"},
		{"fits exactly", "10.0.0.1:1", []headerLine{xffLine("1.2.3.4" + right)}, "ip:1.2.3.4"},
	}
	runIPCases(t, id, tests)
}

func TestByIPTrustedForwarded(t *testing.T) {
	const peer = "10.0.0.1:443"
	tests := []ipCase{
		{"token", peer, []headerLine{fwdLine("for=203.0.113.7")}, "ip:203.0.113.7"},
		{"quoted", peer, []headerLine{fwdLine(`for="203.0.113.7"`)}, "ip:203.0.113.7"},
		{"quoted with port", peer, []headerLine{fwdLine(`for="203.0.113.7:4711"`)}, "ip:203.0.113.7"},
		{"ipv6 bracketed with port", peer, []headerLine{fwdLine(`for="[2001:db8:cafe::17]:4711"`)}, "ip:2001:db8:cafe::/64"},
		{"ipv6 bracketed", peer, []headerLine{fwdLine(`for="[2001:db8:cafe::17]"`)}, "ip:2001:db8:cafe::/64"},
		{"ipv6 obfuscated port", peer, []headerLine{fwdLine(`for="[2001:db8:cafe::17]:_p.1"`)}, "ip:2001:db8:cafe::/64"},
		{"name case-insensitive", peer, []headerLine{fwdLine(`For="[2001:db8:cafe::17]"`)}, "ip:2001:db8:cafe::/64"},
		{"other params", peer, []headerLine{fwdLine("FOR=203.0.113.7;proto=https;by=10.0.0.1")}, "ip:203.0.113.7"},
		{"for not first", peer, []headerLine{fwdLine(`proto=https; host="a.example"; for=203.0.113.7`)}, "ip:203.0.113.7"},
		{"trusted hop", peer, []headerLine{fwdLine(`for=203.0.113.7, for="[2001:db8:ffff::9]:80";proto=http, for=10.0.0.2`)}, "ip:203.0.113.7"},
		{"several lines", peer, []headerLine{fwdLine("for=198.51.100.1"), fwdLine("for=203.0.113.7;proto=http, for=10.0.0.2")}, "ip:203.0.113.7"},
		{"all trusted: leftmost", peer, []headerLine{fwdLine("for=10.0.0.5, for=10.0.0.6")}, "ip:10.0.0.5"},
		{"mapped", peer, []headerLine{fwdLine(`for="[::ffff:203.0.113.7]"`)}, "ip:203.0.113.7"},
		{"no header", peer, nil, "ip:10.0.0.1"},
		{"empty elements skipped", peer, []headerLine{fwdLine("for=203.0.113.7, , for=10.0.0.2")}, "ip:203.0.113.7"},
		{"empty pairs skipped", peer, []headerLine{fwdLine("for=203.0.113.7;;proto=http;")}, "ip:203.0.113.7"},
		// Malformed or obfuscated: the last trusted hop.
		{"unknown", peer, []headerLine{fwdLine("for=203.0.113.7, for=unknown, for=10.0.0.2")}, "ip:10.0.0.2"},
		{"quoted unknown", peer, []headerLine{fwdLine(`for="unknown"`)}, "ip:10.0.0.1"},
		{"obfuscated", peer, []headerLine{fwdLine(`for="_hidden", for=10.0.0.2`)}, "ip:10.0.0.2"},
		{"obfuscated token", peer, []headerLine{fwdLine(`for=_SEVKISEK`)}, "ip:10.0.0.1"},
		{"no for", peer, []headerLine{fwdLine("proto=https")}, "ip:10.0.0.1"},
		{"repeated for", peer, []headerLine{fwdLine("for=203.0.113.7;for=198.51.100.1")}, "ip:10.0.0.1"},
		{"unterminated quote", peer, []headerLine{fwdLine(`for="203.0.113.7`)}, "ip:10.0.0.1"},
		{"stray quote", peer, []headerLine{fwdLine(`for=203.0.113.7"`)}, "ip:10.0.0.1"},
		{"escaped quote", peer, []headerLine{fwdLine(`for="\"203.0.113.7\""`)}, "ip:10.0.0.1"},
		{"comma inside quotes", peer, []headerLine{fwdLine(`for="203.0.113.7,198.51.100.1"`)}, "ip:10.0.0.1"},
		{"pair without =", peer, []headerLine{fwdLine("for=203.0.113.7;secure")}, "ip:10.0.0.1"},
		{"bad port", peer, []headerLine{fwdLine(`for="203.0.113.7:99999"`)}, "ip:10.0.0.1"},
		{"bracketed ipv4", peer, []headerLine{fwdLine(`for="[203.0.113.7]"`)}, "ip:10.0.0.1"},
		{"unbalanced bracket", peer, []headerLine{fwdLine(`for="[2001:db8::1"`)}, "ip:10.0.0.1"},
		{"hostname", peer, []headerLine{fwdLine(`for=client.example`)}, "ip:10.0.0.1"},
		{"space around =", peer, []headerLine{fwdLine(`for = 203.0.113.7`)}, "ip:10.0.0.1"},
		{"empty value", peer, []headerLine{fwdLine(`for=`)}, "ip:10.0.0.1"},
		{"X-Forwarded-For not read", peer, []headerLine{xffLine("203.0.113.7")}, "ip:10.0.0.1"},
	}
	runIPCases(t, mustByIP(t, testTrusted, ratelimit.ClientIPHeader("Forwarded")), tests)
}

func TestByIPTrustedSingleHeader(t *testing.T) {
	const peer = "10.0.0.1:443"
	realLine := func(v string) headerLine { return headerLine{"X-Real-IP", v} }
	tests := []ipCase{
		{"ipv4", peer, []headerLine{realLine("203.0.113.7")}, "ip:203.0.113.7"},
		{"spaces", peer, []headerLine{realLine(" 203.0.113.7\t")}, "ip:203.0.113.7"},
		{"ipv6", peer, []headerLine{realLine("2001:db8:1:2::99")}, "ip:2001:db8:1:2::/64"},
		{"mapped", peer, []headerLine{realLine("::ffff:203.0.113.7")}, "ip:203.0.113.7"},
		{"trusted address is used as is", peer, []headerLine{realLine("10.0.0.9")}, "ip:10.0.0.9"},
		{"missing", peer, nil, "ip:10.0.0.1"},
		{"empty", peer, []headerLine{realLine("")}, "ip:10.0.0.1"},
		{"list", peer, []headerLine{realLine("203.0.113.7, 198.51.100.1")}, "ip:10.0.0.1"},
		{"two lines", peer, []headerLine{realLine("203.0.113.7"), realLine("198.51.100.1")}, "ip:10.0.0.1"},
		{"with port", peer, []headerLine{realLine("203.0.113.7:80")}, "ip:10.0.0.1"},
		{"garbage", peer, []headerLine{realLine("unknown")}, "ip:10.0.0.1"},
		{"X-Forwarded-For not read", peer, []headerLine{xffLine("203.0.113.7")}, "ip:10.0.0.1"},
		{"untrusted peer", "198.51.100.66:1", []headerLine{realLine("203.0.113.7")}, "ip:198.51.100.66"},
	}
	runIPCases(t, mustByIP(t, testTrusted, ratelimit.ClientIPHeader("x-real-ip")), tests)
}

func TestByIPPrefixes(t *testing.T) {
	tests := []struct {
		opts       []ratelimit.IPOption
		remoteAddr string
		want       string
	}{
		{nil, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2::/64"},
		{[]ratelimit.IPOption{ratelimit.IPv6Prefix(48)}, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1::/48"},
		{[]ratelimit.IPOption{ratelimit.IPv6Prefix(56)}, "[2001:db8:1:2ff::1]:1", "ip:2001:db8:1:200::/56"},
		{[]ratelimit.IPOption{ratelimit.IPv6Prefix(128)}, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2:3:4:5:6"},
		{[]ratelimit.IPOption{ratelimit.IPv6Prefix(1)}, "[2001:db8::1]:1", "ip:::/1"},
		{[]ratelimit.IPOption{ratelimit.IPv6Prefix(48)}, "203.0.113.7:1", "ip:203.0.113.7"},
		{nil, "203.0.113.7:1", "ip:203.0.113.7"},
		{[]ratelimit.IPOption{ratelimit.IPv4Prefix(32)}, "203.0.113.7:1", "ip:203.0.113.7"},
		{[]ratelimit.IPOption{ratelimit.IPv4Prefix(24)}, "203.0.113.7:1", "ip:203.0.113.0/24"},
		{[]ratelimit.IPOption{ratelimit.IPv4Prefix(24)}, "[::ffff:203.0.113.7]:1", "ip:203.0.113.0/24"},
		{[]ratelimit.IPOption{ratelimit.IPv4Prefix(1)}, "203.0.113.7:1", "ip:128.0.0.0/1"},
		{[]ratelimit.IPOption{ratelimit.IPv4Prefix(24)}, "[2001:db8:1:2::1]:1", "ip:2001:db8:1:2::/64"},
		{[]ratelimit.IPOption{ratelimit.IPv4Prefix(24), ratelimit.IPv4Prefix(16)}, "203.0.113.7:1", "ip:203.0.0.0/16"},
	}
	for _, tt := range tests {
		id := mustByIP(t, tt.opts...)
		if got := ipKey(t, id, identReq(tt.remoteAddr)); got != tt.want {
			t.Errorf("%s with %d options: key %q, want %q", tt.remoteAddr, len(tt.opts), got, tt.want)
		}
	}

	// Rotating addresses inside one /64 stays in one bucket; the next /64
	// is another.
	id := mustByIP(t)
	want := ipKey(t, id, identReq("[2001:db8:0:1::1]:1"))
	for i := 0; i < 100; i++ {
		addr := fmt.Sprintf("[2001:db8:0:1:%x:%x:%x:%x]:1", i, i*7, i*13, i*31)
		if got := ipKey(t, id, identReq(addr)); got != want {
			t.Fatalf("%s: key %q, want %q", addr, got, want)
		}
	}
	if got := ipKey(t, id, identReq("[2001:db8:0:2::1]:1")); got == want {
		t.Fatalf("neighbouring /64 shares key %q", got)
	}
}
