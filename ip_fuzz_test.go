package ratelimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// Trusted proxies of the fuzz configuration, as TrustedProxies takes them
// and as the properties check them.
var fuzzTrusted = []string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.10", "::ffff:172.16.0.0/108"}

func fuzzTrusts(a netip.Addr) bool {
	for _, s := range []string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.10/32", "172.16.0.0/12"} {
		if netip.MustParsePrefix(s).Contains(a) {
			return true
		}
	}
	return false
}

// xffCandidates returns every address an X-Forwarded-For walk may name:
// the entries of the lines that parse as an address on their own.
func xffCandidates(lines []string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, line := range lines {
		for _, e := range strings.Split(line, ",") {
			e = strings.Trim(e, " \t")
			if len(e) > 2 && e[0] == '[' && e[len(e)-1] == ']' {
				e = e[1 : len(e)-1]
			}
			if a, err := netip.ParseAddr(e); err == nil {
				out[a.WithZone("").Unmap()] = true
			}
		}
	}
	return out
}

// fwdCandidates returns every address a Forwarded walk may name: the
// for= values of the header that hold an address, with or without port.
func fwdCandidates(header string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, part := range strings.FieldsFunc(header, func(r rune) bool { return r == ',' || r == ';' || r == '\n' }) {
		part = strings.Trim(part, " \t")
		if len(part) < 4 || !strings.EqualFold(part[:4], "for=") {
			continue
		}
		v := strings.Trim(part[4:], `"`)
		host := v
		if i := strings.IndexByte(v, ']'); strings.HasPrefix(v, "[") && i > 0 {
			host = v[1:i]
		} else if i := strings.IndexByte(v, ':'); i >= 0 && strings.Count(v, ":") == 1 {
			host = v[:i]
		}
		if a, err := netip.ParseAddr(host); err == nil {
			out[a.WithZone("").Unmap()] = true
		}
	}
	return out
}

// FuzzClientIP feeds arbitrary RemoteAddr and forwarded headers to ByIP
// configured with testTrusted proxies, for each kind of client IP header.
// X-Forwarded-For and Forwarded values are split on newlines into several
// header lines.
func FuzzClientIP(f *testing.F) {
	seeds := []struct{ remote, xff, fwd, real string }{
		{"203.0.113.7:1234", "", "", ""},
		{"10.0.0.1:443", "203.0.113.7, 10.0.0.2", "for=203.0.113.7, for=10.0.0.2", "203.0.113.7"},
		{"10.0.0.1:443", "198.51.100.1, 203.0.113.7\n10.0.0.2", "for=198.51.100.1\nfor=\"[2001:db8:cafe::17]:4711\";proto=https", "2001:db8::1"},
		{"[2001:db8:ffff::1]:443", "2001:db8:aaaa::5, 10.0.0.9", `For="[2001:db8:cafe::17]:_obf"`, " 203.0.113.7 "},
		{"[::ffff:10.0.0.1]:80", "::ffff:203.0.113.7, ::ffff:172.16.0.1", `for="_hidden", for=unknown`, "unknown"},
		{"192.0.2.10", "unknown, 203.0.113.7:80, [2001:db8::1]:80, [2001:db8::2]", `for="203.0.113.7`, "203.0.113.7:80"},
		{"[fe80::1%eth0]:80", "fe80::1%eth0", `for=203.0.113.7;for=10.0.0.1`, ""},
		{"198.51.100.66:5555", "203.0.113.7", "for=203.0.113.7", "203.0.113.7"},
		{"", ",,, ,", ";;,;", ""},
		{"garbage", "10.0.0.2, 10.0.0.3", `for="\"x\""`, "10.0.0.2"},
		{"[2001:db8::1", "11.2.3.4" + strings.Repeat(" ", 9000) + ", 10.0.0.2", `for=[2001:db8::1]:80`, "[2001:db8::1]"},
		// The 8 KB window starts inside "11.2.3.4": "1.2.3.4" must not be read.
		{"10.0.0.1:1", "11.2.3.4, 10.0.0.2" + strings.Repeat(" ", 8<<10-len("1.2.3.4, 10.0.0.2")), "", ""},
	}
	for _, s := range seeds {
		f.Add(s.remote, s.xff, s.fwd, s.real)
	}

	build := func(opts ...ratelimit.IPOption) *ratelimit.IPIdentifier {
		return ratelimit.ByIP(append(opts, ratelimit.IPv6Prefix(56), ratelimit.IPv4Prefix(32))...)
	}
	plain := build()
	tp := ratelimit.TrustedProxies(fuzzTrusted...)
	ids := map[string]*ratelimit.IPIdentifier{
		"X-Forwarded-For": build(tp),
		"Forwarded":       build(tp, ratelimit.ClientIPHeader("Forwarded")),
		"X-Real-IP":       build(tp, ratelimit.ClientIPHeader("X-Real-IP")),
	}

	f.Fuzz(func(t *testing.T, remoteAddr, xffValue, fwdValue, realIP string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remoteAddr
		xffLines := strings.Split(xffValue, "\n")
		r.Header["X-Forwarded-For"] = xffLines
		r.Header["Forwarded"] = strings.Split(fwdValue, "\n")
		r.Header["X-Real-Ip"] = []string{realIP}

		plainKey, ok := plain.Identify(r)
		if !ok {
			t.Fatalf("plain: ok = false")
		}
		if err := checkIPKey(plainKey); err != nil {
			t.Fatalf("plain: %v", err)
		}
		peer, peerOK := plain.ClientIP(r)
		if peerOK != (plainKey != ratelimit.UnknownIPKey) {
			t.Fatalf("plain: ClientIP ok %v but key %q", peerOK, plainKey)
		}
		if peerOK && (peer.Zone() != "" || peer.Is4In6()) {
			t.Fatalf("plain: ClientIP %v is not unmapped and zone-free", peer)
		}

		for name, id := range ids {
			key, ok := id.Identify(r)
			if !ok {
				t.Fatalf("%s: ok = false", name)
			}
			if err := checkIPKey(key); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			client, clientOK := id.ClientIP(r)
			if clientOK != peerOK {
				t.Fatalf("%s: ClientIP ok %v, RemoteAddr ok %v", name, clientOK, peerOK)
			}
			if !peerOK {
				if key != ratelimit.UnknownIPKey {
					t.Fatalf("%s: RemoteAddr %q unusable but key %q", name, remoteAddr, key)
				}
				continue
			}
			if client.Zone() != "" || client.Is4In6() {
				t.Fatalf("%s: ClientIP %v is not unmapped and zone-free", name, client)
			}
			// The key groups the client address.
			if rest := strings.TrimPrefix(key, "ip:"); strings.Contains(rest, "/") {
				if !netip.MustParsePrefix(rest).Contains(client) {
					t.Fatalf("%s: key %q does not contain client %v", name, key, client)
				}
			} else if rest != client.String() {
				t.Fatalf("%s: key %q, client %v", name, key, client)
			}
			if !fuzzTrusts(peer) {
				// Headers from untrusted peers are ignored.
				if key != plainKey || client != peer {
					t.Fatalf("%s: untrusted peer %v: key %q, client %v; want %q from RemoteAddr alone", name, peer, key, client, plainKey)
				}
				continue
			}
			// A testTrusted peer: the client is the peer or an address that
			// appears, whole, in the header; never part of a bad entry.
			if client == peer {
				continue
			}
			switch name {
			case "X-Forwarded-For":
				if !xffCandidates(xffLines)[client] {
					t.Fatalf("%s: client %v is not an entry of %.200q", name, client, xffLines)
				}
			case "X-Real-IP":
				if a, err := netip.ParseAddr(strings.Trim(realIP, " \t[]")); err != nil || a.WithZone("").Unmap() != client {
					t.Fatalf("%s: client %v, header %.200q", name, client, realIP)
				}
			case "Forwarded":
				if !fwdCandidates(fwdValue)[client] {
					t.Fatalf("%s: client %v is not a for= value of %.200q", name, client, fwdValue)
				}
			}
		}
	})
}

// FuzzByIPOptions checks that New refuses ByIP's bad configuration with an
// error, never a panic, and that accepted testTrusted proxies parse.
func FuzzByIPOptions(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "192.0.2.1", "::1", "2001:db8::/32", "::ffff:10.0.0.0/104", "", "x", "10.0.0.0/33", "fe80::1%eth0", " 10.0.0.0/8 "} {
		f.Add(s, "X-Forwarded-For", 64, 32)
	}
	f.Add("10.0.0.0/8", "Forwarded", 1, 1)
	f.Add("10.0.0.0/8", "X Real IP", 0, 33)
	f.Fuzz(func(t *testing.T, cidr, header string, v6, v4 int) {
		id := ratelimit.ByIP(ratelimit.TrustedProxies(cidr), ratelimit.ClientIPHeader(header), ratelimit.IPv6Prefix(v6), ratelimit.IPv4Prefix(v4))
		if identifierErr(id) != nil {
			return
		}
		if v6 < 1 || v6 > 128 || v4 < 1 || v4 > 32 || header == "" {
			t.Fatalf("accepted v6 %d, v4 %d, header %q", v6, v4, header)
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header.Set(header, "203.0.113.7")
		key, ok := id.Identify(r)
		if err := checkIPKey(key); !ok || err != nil {
			t.Fatalf("Identify = %q, %v: %v", key, ok, err)
		}
	})
}
