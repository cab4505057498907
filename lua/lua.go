// Package lua holds the Redis scripts of the ratelimit stores, as .lua
// files embedded at build time: counters.lua, the counters of every
// algorithm (a mirror of store/algorithm.go), followed by a driver: take.lua
// (decide and charge one request) or refund.lua (undo one charge).
package lua

import (
	_ "embed"
	"strconv"
	"strings"
)

// Numbers the scripts share with the stores' Go code, handed to Lua by
// name in prelude.
const (
	// ResendIDLen is the length of a script call's resend ID.
	ResendIDLen = 6
	// ResendIDs is how many resend IDs a key remembers (its last charges').
	ResendIDs = 8
	// MaxPending is the most pending reservations a key keeps.
	MaxPending = 32
	// pendingLen is the digits of one pending reservation in the field q:
	// 16 of release time, 10 of cost.
	pendingLen = 26
)

// prelude names those numbers for the scripts.
var prelude = "local RIDLEN, RIDN, QLEN, MAXQ = " + strconv.Itoa(ResendIDLen) + ", " + strconv.Itoa(ResendIDs) + ", " +
	strconv.Itoa(pendingLen) + ", " + strconv.Itoa(MaxPending) + "\n"

var (
	//go:embed counters.lua
	counters string
	//go:embed take.lua
	take string
	//go:embed fast.lua
	fast string
	//go:embed refund.lua
	refund string
	//go:embed reset.lua
	resetScript string
)

// unbaked opens a script that reads the policy from ARGV.
const unbaked = "local TTL, NL, BLOCK, IDTTL, RES, P\n"

// Take decides and charges one request for every key, all or nothing. It
// reads the policy's parameters from ARGV; see Bake for a script that
// carries them.
var Take = unbaked + prelude + counters + take

// Fast is Take's lean path for the common call: one key, no request ID, a
// plain Take. It only exists baked, as the body of the function
// general(now, v) that BakeFast's common path calls when it does not
// answer itself.
var Fast = unbaked + prelude + counters + fast

// Refund undoes one charge.
var Refund = unbaked + prelude + counters + refund

// Reset forgets one identity's counters, keeping the epoch that tells a
// refund of an earlier charge to give nothing back.
var Reset = resetScript

// Baked is the policy a Take script may carry.
type Baked struct {
	TTLMS   int64   // how long a key outlives its last write, ms
	BlockUS int64   // the policy's penalty, µs (0: none)
	IDTTLUS int64   // how long a request ID is remembered, µs
	Reserve bool    // every limit can reserve a place in line
	P       []int64 // 7 numbers per limit (see counters.lua)
}

// Bake returns the Take script with one policy's parameters written into
// it, as ARGV 7 onwards would carry them. The result reads only the
// per-call arguments from ARGV, which saves Redis parsing and converting a
// few dozen arguments on every call.
func Bake(b Baked) string { return bake(b, Take) }

// BakeFast returns Fast with one policy's parameters written into it, as
// a function general(now, v), followed (from the line CommonMark) by code
// written for that policy alone (see hot) that answers a call every limit
// admits and hands the rest to general. Its ARGV: now (µs; 0 = Redis
// TIME), cost, resend ID. The reply is laid out as Take's.
func BakeFast(b Baked) string {
	return "local function general(now, v)\n" + bake(b, Fast) + "end\n" + hot(b)
}

func bake(b Baked, script string) string {
	if len(b.P)%7 != 0 {
		panic("lua: Bake: a partial limit")
	}
	var s strings.Builder
	s.Grow(len(script) + 64 + 12*len(b.P))
	s.WriteString("local TTL, NL, BLOCK, IDTTL, RES, P = ")
	for _, v := range []int64{b.TTLMS, int64(len(b.P) / 7), b.BlockUS, b.IDTTLUS} {
		s.WriteString(strconv.FormatInt(v, 10))
		s.WriteString(", ")
	}
	s.WriteString(strconv.FormatBool(b.Reserve))
	s.WriteString(", {")
	for i, v := range b.P {
		if i > 0 {
			s.WriteString(", ")
		}
		s.WriteString(strconv.FormatInt(v, 10))
	}
	s.WriteString("}\n")
	s.WriteString(script[len(unbaked):])
	return s.String()
}
