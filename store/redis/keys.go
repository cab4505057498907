package redis

import (
	"fmt"
	"strings"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// DefaultPrefix is the Redis key prefix when none is set.
const DefaultPrefix = "rl:"

// redisKey builds the Redis key of one identity under one policy:
//
//	<prefix>{<identifier, escaped or hashed>}:<policy name>:<fingerprint>
//
// The hash tag is the identifier alone, so all limits of one identity live
// in one slot (one key) and different identities spread over the cluster.
// Escaping is injective and leaves no '{', '}' or control byte in the tag:
// bytes outside [A-Za-z0-9-._:/@+=] become %XX. Identifiers longer than
// 128 bytes are replaced by '#' and 128 bits of their SHA-256 ('#' never
// survives escaping, so the two forms cannot meet). No input can change
// the prefix, the slot's tag, or reach another identity's key.
func redisKey(prefix, policyID, id string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(id) + len(policyID) + 8)
	b.WriteString(prefix)
	b.WriteByte('{')
	writeTag(&b, id)
	b.WriteString("}:")
	b.WriteString(policyID)
	return b.String()
}

func writeTag(b *strings.Builder, id string) {
	if len(id) > layout.MaxPlainKey {
		b.WriteString(layout.HashedKey(id))
		return
	}
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(id); i++ {
		c := id[i]
		if plainByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
}

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("-._:/@+=", c) >= 0
}

// validPrefix reports why p cannot be a key prefix, or nil.
func validPrefix(p string) error {
	if len(p) > 64 {
		return fmt.Errorf("ratelimit/store: key prefix %q: longer than 64 bytes", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == '{' || c == '}' || c < 0x21 || c > 0x7e {
			return fmt.Errorf("ratelimit/store: key prefix %q: byte %q at offset %d not allowed (printable ASCII, no braces)", p, c, i)
		}
	}
	return nil
}
