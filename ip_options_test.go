package ratelimit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

func TestByIPOptions(t *testing.T) {
	bad := []struct {
		opts []ratelimit.IPOption
		want string // the bad value, as the error must name it
	}{
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("10.0.0.0/33")}, `"10.0.0.0/33"`},
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("10.0.0.0/8", "not-an-ip")}, `"not-an-ip"`},
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("")}, `""`},
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("10.0.0.0/8x")}, `"10.0.0.0/8x"`},
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("10.0.0.0/-1")}, `"10.0.0.0/-1"`},
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("2001:db8::/129")}, `"2001:db8::/129"`},
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("fe80::1%eth0")}, `"fe80::1%eth0"`},
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("10.0.0.1:80")}, `"10.0.0.1:80"`},
		{[]ratelimit.IPOption{ratelimit.TrustedProxies("proxy.internal")}, `"proxy.internal"`},
		{[]ratelimit.IPOption{ratelimit.IPv6Prefix(0)}, "0"},
		{[]ratelimit.IPOption{ratelimit.IPv6Prefix(129)}, "129"},
		{[]ratelimit.IPOption{ratelimit.IPv6Prefix(-64)}, "-64"},
		{[]ratelimit.IPOption{ratelimit.IPv4Prefix(0)}, "0"},
		{[]ratelimit.IPOption{ratelimit.IPv4Prefix(33)}, "33"},
		{[]ratelimit.IPOption{testTrusted, ratelimit.ClientIPHeader("")}, `""`},
		{[]ratelimit.IPOption{testTrusted, ratelimit.ClientIPHeader("X Real IP")}, `"X Real IP"`},
		{[]ratelimit.IPOption{testTrusted, ratelimit.ClientIPHeader("X-Real-IP:")}, `"X-Real-IP:"`},
		{[]ratelimit.IPOption{testTrusted, ratelimit.ClientIPHeader("X-Réal-IP")}, `"X-Réal-IP"`},
		{[]ratelimit.IPOption{ratelimit.ClientIPHeader("X-Real-IP")}, `"X-Real-IP"`},
	}
	for i, tt := range bad {
		id := ratelimit.ByIP(tt.opts...)
		for _, via := range []ratelimit.Identifier{id, ratelimit.FirstOf(ratelimit.ByUser(nil), id)} {
			err := identifierErr(via)
			if err == nil {
				t.Errorf("step %d: New accepted it, want an error naming %s", i, tt.want)
				continue
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "ratelimit: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("step %d: error %q: want prefix %q naming %s", i, msg, "ratelimit: ", tt.want)
			}
		}
		// Used anyway, it limits every request as one.
		if key, ok := id.Identify(getFrom("192.0.2.1:1234")); !ok || key != ratelimit.UnknownIPKey {
			t.Errorf("step %d: Identify = %q, %v; want %q, true", i, key, ok, ratelimit.UnknownIPKey)
		}
	}

	good := [][]ratelimit.IPOption{
		nil,
		{nil},
		{ratelimit.TrustedProxies()},
		{ratelimit.TrustedProxies(" 10.0.0.0/8 ", "192.0.2.1", "::1", "2001:db8::/32", "::ffff:10.0.0.0/104", "0.0.0.0/0")},
		{ratelimit.TrustedProxies("10.1.2.3/8"), ratelimit.TrustedProxies("::/0")},
		{testTrusted, ratelimit.ClientIPHeader("True-Client-IP")},
		{testTrusted, ratelimit.ClientIPHeader("forwarded")},
		{ratelimit.IPv6Prefix(1), ratelimit.IPv6Prefix(128), ratelimit.IPv4Prefix(1), ratelimit.IPv4Prefix(32)},
	}
	for i, opts := range good {
		if err := identifierErr(ratelimit.ByIP(opts...)); err != nil {
			t.Errorf("good options %d: %v", i, err)
		}
	}

	// TrustedProxies copies its arguments.
	cidrs := []string{"10.0.0.0/8"}
	opt := ratelimit.TrustedProxies(cidrs...)
	cidrs[0] = "bad"
	if err := identifierErr(ratelimit.ByIP(opt)); err != nil {
		t.Errorf("TrustedProxies kept the caller's slice: %v", err)
	}
}

// Trusted entries are normalised: IPv4-mapped prefixes count as IPv4 and
// host bits are dropped.
func TestByIPTrustedProxyForms(t *testing.T) {
	tests := []struct {
		cidr, peer string
		trusted    bool
	}{
		{"::ffff:10.0.0.0/104", "10.1.1.1:1", true},
		{"::ffff:10.0.0.0/104", "11.1.1.1:1", false},
		{"::ffff:10.0.0.1", "10.0.0.1:1", true},
		{"10.1.2.3/8", "10.200.0.1:1", true},
		{"2001:db8::/32", "[2001:db8:5::1]:1", true},
		{"2001:db8::/32", "[2001:db9::1]:1", false},
		{"::/0", "10.0.0.1:1", false}, // IPv6 prefixes never cover IPv4 clients
		{"0.0.0.0/0", "198.51.100.1:1", true},
		{"::1", "[::1]:1", true},
		{"192.0.2.10", "[::ffff:192.0.2.10]:1", true},
	}
	for _, tt := range tests {
		id := mustByIP(t, ratelimit.TrustedProxies(tt.cidr))
		r := identReq(tt.peer, xffLine("203.0.113.7"))
		got := ipKey(t, id, r) == "ip:203.0.113.7"
		if got != tt.trusted {
			t.Errorf("TrustedProxies(%q), peer %s: trusted %v, want %v", tt.cidr, tt.peer, got, tt.trusted)
		}
	}
}

func TestClientIP(t *testing.T) {
	id := mustByIP(t, testTrusted, ratelimit.IPv4Prefix(24)).(*ratelimit.IPIdentifier)
	tests := []struct {
		r      *http.Request
		want   string // "" means not determined
		wantID string
	}{
		{identReq("203.0.113.7:1"), "203.0.113.7", "ip:203.0.113.0/24"},
		{identReq("[2001:db8:1:2:3:4:5:6]:1"), "2001:db8:1:2:3:4:5:6", "ip:2001:db8:1:2::/64"},
		{identReq("[fe80::1%eth0]:1"), "fe80::1", "ip:fe80::/64"},
		{identReq("[::ffff:203.0.113.7]:1"), "203.0.113.7", "ip:203.0.113.0/24"},
		{identReq("10.0.0.1:1", xffLine("198.51.100.9, 10.0.0.2")), "198.51.100.9", "ip:198.51.100.0/24"},
		{identReq("198.51.100.66:1", xffLine("198.51.100.9")), "198.51.100.66", "ip:198.51.100.0/24"},
		{identReq("garbage"), "", "ip:unknown"},
		{nil, "", "ip:unknown"},
	}
	for i, tt := range tests {
		a, ok := id.ClientIP(tt.r)
		got := ""
		if ok {
			got = a.String()
		}
		if got != tt.want {
			t.Errorf("case %d: ClientIP = %q, %v; want %q", i, got, ok, tt.want)
		}
		if key, _ := id.Identify(tt.r); key != tt.wantID {
			t.Errorf("case %d: Identify = %q, want %q", i, key, tt.wantID)
		}
	}

	// The zero value and a nil pointer resolve like ByIP().
	for _, z := range []*ratelimit.IPIdentifier{{}, nil} {
		r := identReq("[2001:db8:1:2::9]:1", xffLine("203.0.113.7"))
		if key, ok := z.Identify(r); key != "ip:2001:db8:1:2::/64" || !ok {
			t.Errorf("%#v: Identify = %q, %v; want the RemoteAddr's /64", z, key, ok)
		}
		if key, _ := z.Identify(identReq("203.0.113.7:1")); key != "ip:203.0.113.7" {
			t.Errorf("%#v: Identify = %q, want ip:203.0.113.7", z, key)
		}
	}
}

func BenchmarkByIP(b *testing.B) {
	b.Run("RemoteAddr", func(b *testing.B) {
		id := mustByIP(b)
		r := identReq("203.0.113.7:51234", xffLine("198.51.100.1"))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			id.Identify(r)
		}
	})
	b.Run("RemoteAddrIPv6", func(b *testing.B) {
		id := mustByIP(b)
		r := identReq("[2001:db8:1:2:3:4:5:6]:51234")
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			id.Identify(r)
		}
	})
	b.Run("TrustedXFF3Hops", func(b *testing.B) {
		id := mustByIP(b, testTrusted)
		r := identReq("10.0.0.1:443", xffLine("198.51.100.1, 203.0.113.7, 10.0.0.3, 10.0.0.2"))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			id.Identify(r)
		}
	})
	b.Run("TrustedForwarded3Hops", func(b *testing.B) {
		id := mustByIP(b, testTrusted, ratelimit.ClientIPHeader("Forwarded"))
		r := identReq("10.0.0.1:443", fwdLine(`for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.3, for=10.0.0.2`))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			id.Identify(r)
		}
	})
}
