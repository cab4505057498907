// Package lua holds the Redis scripts of the ratelimit stores, as .lua
// files embedded at build time. Each algorithm file defines the
// algorithm's functions (fixed window and token bucket share fetchall.lua),
// and a <algorithm>_refund.lua file its refund;
// a driver (take or refund) follows it to make one script per algorithm
// and operation.
package lua

import _ "embed"

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

// Take scripts: check all limits of all keys, charge all or nothing.
var (
	TakeSliding = sliding + take
	TakeFixed   = fetchall + fixed + take
	TakeToken   = fetchall + token + take
)

// Refund scripts: undo one key's charge (Redis Cluster only).
var (
	RefundSliding = slidingRefund + refund
	RefundFixed   = fixedRefund + refund
	RefundToken   = tokenRefund + refund
)
