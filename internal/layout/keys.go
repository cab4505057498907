package layout

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxPlainKey is the longest identifier a store keeps as it is; longer
// ones are kept as HashedKey, which bounds the bytes an identity holds.
const MaxPlainKey = 128

// HashedKey stands for an identifier longer than MaxPlainKey: '#' and 128
// bits of its SHA-256, in hex ('#' never survives the Redis store's
// escaping, so the two forms cannot meet).
func HashedKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	var buf [33]byte
	buf[0] = '#'
	hex.Encode(buf[1:], sum[:16])
	return string(buf[:])
}

// IDHash stands for a request ID (ratelimit.Request.ID) in the stores: 96
// bits of its SHA-256, in hex, so that no ID of any length or content
// reaches a key as it is.
func IDHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:12])
}
