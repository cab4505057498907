package redistest

import "strings"

// numSlots is the fixed number of hash slots in Redis Cluster.
const numSlots = 16384

// keySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM variant)
// of the key, or of its hash tag — the text between the first '{' and the
// first '}' after it, when that text is not empty — modulo 16384.
func keySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) % numSlots
}

// crc16 computes CRC-16/XMODEM: polynomial 0x1021, initial value 0, no
// reflection, no final XOR. Bitwise on purpose: it runs once per lookup in tests.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for bit := 0; bit < 8; bit++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
