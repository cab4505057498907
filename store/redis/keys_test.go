package redis

import (
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// TestHostileKeys: identifiers that try to break out of their key (braces,
// colons, newlines, invalid UTF-8, 10 KB) stay inside their prefix and
// their own slot, and never meet another identity's key.
func TestHostileKeys(t *testing.T) {
	ids := []string{
		"ip:192.0.2.1", "user:{evil}", "user:}{", "user:{", "a}b{c}", "user:1\r\nDEL x", "key:\x00\xff\xfe",
		"user:%7B", "user:{", "#deadbeef", strings.Repeat("a", 10_000), strings.Repeat("a", 10_001),
		strings.Repeat("{", 129), "user:é", "user:\xc3", "ip:::1", "ip:0:0:0:0:0:0:0:1",
	}
	seen := map[string]string{}
	for _, id := range ids {
		key := redisKey("app:", "default:0000abcd", id)
		if !strings.HasPrefix(key, "app:{") || !strings.HasSuffix(key, "}:default:0000abcd") {
			t.Fatalf("%q: key %q left its prefix or suffix", id, key)
		}
		tag := key[len("app:{") : len(key)-len("}:default:0000abcd")]
		if strings.ContainsAny(tag, "{}\r\n\x00 ") || len(tag) > 3*layout.MaxPlainKey {
			t.Fatalf("%q: tag %q has a brace, control byte, or is too long", id, tag)
		}
		if prev, dup := seen[key]; dup && prev != id {
			t.Fatalf("%q and %q share key %q", prev, id, key)
		}
		seen[key] = id
	}
	if err := validPrefix("a{b"); err == nil {
		t.Fatal("prefix with a brace accepted")
	}
	if _, err := New(nil); err == nil {
		t.Fatal("nil client accepted")
	}
}
