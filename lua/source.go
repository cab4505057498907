package lua

import _ "embed"

var (
	//go:embed script.lua
	opening string
	//go:embed lean.lua
	lean string
	//go:embed reset.lua
	reset string
	//go:embed resend.lua
	resend string
	//go:embed policy.lua
	policy string
	//go:embed log.lua
	logRing string
	//go:embed token.lua
	token string
	//go:embed approx.lua
	approx string
	//go:embed concurrent.lua
	concurrent string
	//go:embed sliding.lua
	sliding string
	//go:embed fixed.lua
	fixed string
	//go:embed counters.lua
	counters string
	//go:embed refund.lua
	refund string
	//go:embed slots.lua
	slots string
	//go:embed frame.lua
	frame string
	//go:embed denial.lua
	denial string
	//go:embed take.lua
	take string
)

// Source is the script's text, without the prelude of names store/redis
// puts before it: the opening (script.lua), the frame of the lean path of
// the common call (lean.lua), the reset, the resend IDs, the policy and
// places in line, the algorithms, each with its own arithmetic, the steps
// of the general path and those of its lean path (a log's ring, a token
// bucket, the approximation, a Concurrent limit's slots, sub-buckets, a
// fixed window), the counters of every algorithm one step at a time, the
// refund, the slots' release and renewal, a key's frame in a take (its
// read, its debt's expiry, its reply and writes), a denial kept for the
// calls that repeat it, the take and main, which answers a call.
var Source = opening + lean + reset + resend + policy + logRing + token + approx + concurrent + sliding + fixed + counters + refund + slots + frame + denial + take
