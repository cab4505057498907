// Package lua holds the Redis scripts of the ratelimit stores, as .lua
// files embedded at build time. Each algorithm file defines the
// algorithm's functions (fixed window and token bucket share fetchall.lua),
// and a <algorithm>_refund.lua file its refund;
// a driver (take or refund) follows it to make one script per algorithm
// and operation.
package lua

import (
	_ "embed"
	"strconv"
	"strings"
)

var (
	//go:embed sliding.lua
	sliding string
	//go:embed fixed.lua
	fixed string
	//go:embed token.lua
	token string
	//go:embed fetchall.lua
	fetchall string
	//go:embed sliding_refund.lua
	slidingRefund string
	//go:embed fixed_refund.lua
	fixedRefund string
	//go:embed token_refund.lua
	tokenRefund string
	//go:embed take.lua
	take string
	//go:embed refund.lua
	refund string
)

// unbaked opens a Take script that reads the policy from ARGV.
const unbaked = "local TTL, NF, NL, P\n"

// Take scripts: check all limits of all keys, charge all or nothing. They
// read the policy's parameters from ARGV; see Bake for scripts that carry
// them.
var (
	TakeSliding = unbaked + sliding + take
	TakeFixed   = unbaked + fetchall + fixed + take
	TakeToken   = unbaked + fetchall + token + take
)

// Bake returns script, one of the Take scripts, with one policy's
// parameters written into it: the TTL in milliseconds, the number of
// fields, and four numbers per limit (len(p)/4 limits), as ARGV 3 onwards
// would carry them. The result reads only now and cost from ARGV, which
// saves Redis parsing and converting a dozen arguments on every call.
func Bake(script string, ttlMS int64, nf int, p []int64) string {
	if !strings.HasPrefix(script, unbaked) || len(p)%4 != 0 {
		panic("lua: Bake: not a Take script, or a partial limit")
	}
	b := make([]byte, 0, len(script)+64+12*len(p))
	b = append(b, "local TTL, NF, NL, P = "...)
	b = strconv.AppendInt(b, ttlMS, 10)
	b = append(b, ", "...)
	b = strconv.AppendInt(b, int64(nf), 10)
	b = append(b, ", "...)
	b = strconv.AppendInt(b, int64(len(p)/4), 10)
	b = append(b, ", {"...)
	for i, v := range p {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, "}\n"...)
	return string(append(b, script[len(unbaked):]...))
}

// Refund scripts: undo one key's charge (Redis Cluster only).
var (
	RefundSliding = slidingRefund + refund
	RefundFixed   = fixedRefund + refund
	RefundToken   = tokenRefund + refund
)
