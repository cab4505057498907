package redis

import (
	"strings"
	"testing"
)

// hashTag returns the part of key Redis Cluster hashes: the text between
// the first '{' and the first '}' after it, when non-empty; else the key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// FuzzRedisKey: for any two identifiers, the keys keep the prefix and the
// policy suffix, the slot is decided by the identifier alone (the same
// identifier under another policy or prefix lands in the same slot), and
// distinct identifiers never share a key.
func FuzzRedisKey(f *testing.F) {
	for _, s := range [][2]string{
		{"ip:192.0.2.1", "ip:192.0.2.2"}, {"user:{a}", "user:%7Ba%7D"}, {"}{", "{}"}, {"a\nb", "a%0Ab"},
		{"#x", "%23x"}, {strings.Repeat("z", 129), strings.Repeat("z", 128)}, {"\xff\xfe", "é"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" {
			return // Take rejects empty keys (TestInvalidRequests) before building any
		}
		ka, kb := redisKey("app:", "p:0123abcd", a), redisKey("app:", "p:0123abcd", b)
		for _, k := range []string{ka, kb} {
			if !strings.HasPrefix(k, "app:{") || !strings.HasSuffix(k, "}:p:0123abcd") {
				t.Fatalf("key %q left its prefix or suffix", k)
			}
			inner := k[len("app:{") : len(k)-len("}:p:0123abcd")]
			if strings.ContainsAny(inner, "{}") || hashTag(k) != inner && inner != "" {
				t.Fatalf("key %q: hash tag %q, want %q", k, hashTag(k), inner)
			}
		}
		if hashTag(redisKey("other:", "q:ffffffff", a)) != hashTag(ka) {
			t.Fatalf("%q: slot depends on the prefix or policy", a)
		}
		if (a == b) != (ka == kb) {
			t.Fatalf("identifiers %q and %q: keys %q and %q", a, b, ka, kb)
		}
	})
}
