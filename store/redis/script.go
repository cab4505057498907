package redis

import (
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/lua"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
)

// The store's one script (script.lua): its operations are chosen by the
// first argument.
const (
	opTake     = "t"
	opFast     = "f" // a plain Take with no request ID
	opMulti    = "m" // several opFast calls of one baked policy, in one run (batch.go)
	opAlike    = "u" // an opMulti run whose calls share their number of keys, now and cost, given once
	opDeclined = "g" // an opFast call a run declined: the general path at once (multi.go's alone)
	opRefund   = "r"
	opReset    = "x"
	opSlots    = "c" // release or renew a charge's slots (slots.go)
)

// evalSource is the script as EVAL runs it: head (the prelude of names
// and the policy, when baked), then the lua package's Source, which
// makes every function of the script on each run (a library, loaded once,
// makes them once: functions.go), then main, which answers the call.
func evalSource(head string) string {
	return head + "local KEYS, ARGV = KEYS, ARGV\n" + lua.Source +
		"tonumber, floor, ceil, fmt, sub, find, byte, char = std()\n" +
		"return main()\n"
}

// prelude gives the script, by name, the numbers internal/layout names:
// the kinds of counter, the positions of a limit's parameters, the hash
// fields and the bounds the Go side shares.
var prelude = func() string {
	var b strings.Builder
	line := func(names []string, values []string) {
		b.WriteString("local " + strings.Join(names, ", ") + " = " + strings.Join(values, ", ") + "\n")
	}
	var kinds, kindValues []string
	for _, k := range layout.Kinds {
		kinds, kindValues = append(kinds, k.Lua), append(kindValues, strconv.Itoa(int(k.Kind)))
	}
	line(kinds, kindValues)
	num := func(vs ...int64) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = strconv.FormatInt(v, 10)
		}
		return out
	}
	line([]string{"P_KIND", "P_CAP", "P_WIDTH", "P_N", "P_PERIOD", "P_HASH", "P_CHUNK", "STRIDE"},
		num(layout.PKind, layout.PCapacity, layout.PWidth, layout.PN, layout.PPeriod, layout.PHash, layout.PChunk, layout.Stride))
	quote := func(vs ...string) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = strconv.Quote(v)
		}
		return out
	}
	line([]string{"F_BLOCK", "F_BLOCKLIM", "F_GEN", "F_EXPIRY", "F_RESENDS", "F_PENDING", "F_DENIAL"},
		quote(layout.HashBlock, layout.HashBlockLimit, layout.HashGen, layout.HashExpiry, layout.HashResends, layout.HashPending, layout.HashDenial))
	dw := strconv.Itoa(layout.DenialDigits)
	line([]string{"DW", "DFMT", "DMAX"}, append(append(num(layout.DenialDigits), quote("%"+dw+"d")...), "1"+strings.Repeat("0", layout.DenialDigits)))
	line([]string{"RIDLEN", "RIDN", "QLEN", "MAXQ", "EPOCH", "MAXREP"},
		num(layout.ResendIDLen, layout.ResendIDs, layout.PendingDigits, layout.MaxPending, layout.GenEpoch, ratelimit.MaxRepeats))
	line([]string{"M_UPTO", "M_FORCE", "M_LEASE"}, quote(modeUpTo, modeForce, modeLease))
	line([]string{"RHEAD", "KHEAD", "RLIM", "MARGS"}, num(rHeader, rKeyHead, rPerLimit, multiArgs))
	b.WriteString(runResetLine())
	line([]string{"Q_TTL", "Q_LIMITS", "Q_BLOCK", "Q_IDTTL", "Q_RESERVES", "Q_PENDING", "QHEAD"},
		num(qTTL, qLimits, qBlock, qIDTTL, qReserves, qPending, qHead))
	line([]string{"F_TIME", "I_TIME"}, append(quote(layout.HashTime), num(layout.HashTimeField)...))
	line([]string{"XSLACK", "MAXSPAN"}, num(expirySlack, layout.MaxSpanUS))
	tfmt := "%0" + strconv.Itoa(layout.TimeDigits) + "d"
	line([]string{"TW", "TFMT", "QFMT", "ZEROT"}, append(num(layout.TimeDigits), quote(tfmt, tfmt+"%0"+strconv.Itoa(layout.CostDigits)+"d", strings.Repeat("0", layout.TimeDigits))...))
	line([]string{"BSEP", "BFMT", "BPACK"}, quote(layout.BucketSep, layout.BucketWideFormat, layout.BucketPackFormat))
	line([]string{"BEXACT", "SOLE"}, num(layout.BucketExact, layout.BucketSumSole))
	line([]string{"LOGBASE", "LOGSMALL", "SCHUNK", "LCHUNK"}, num(layout.LogPointerBase, ratelimit.ExactRateMax, layout.SmallLogChunk, layout.LogChunk))
	return b.String()
}()

// genericHead is the head of the script for any policy: the call carries
// the policy.
var genericHead = prelude + "local BAKED, NAMES, POLICYID = nil, nil, nil\n"

// generic is the generic script as EVAL runs it (each store has its own
// *script of it: scripts.generic).
var generic = goredis.NewScript(evalSource(genericHead))

// Positions of the policy's header among its numbers (Lua counts from 1),
// named Q_* in the script's prelude: the TTL (ms), the number of limits,
// the penalty (µs), the request-ID lifetime (µs), whether it reserves
// and whether an identity may hold places in line (layout.Policy's
// Reserves and Pending; 1 or 0); qHead numbers in all, then
// layout.Stride numbers per limit.
const (
	qTTL = iota + 1
	qLimits
	qBlock
	qIDTTL
	qReserves
	qPending
	qHead = qPending
)

// expirySlack is how far past what its counters need a key's expiry is
// pushed, in µs per ms of the policy's TTL: a quarter TTL, so that a busy
// key's expiry is pushed out once per quarter TTL rather than on every
// call (XSLACK in the script).
const expirySlack = 250

// policyNumbers lists a policy as the script reads it (script.lua, "The
// policy"): the header at the positions q*, then layout.Stride numbers per
// limit.
func policyNumbers(lay *layout.Policy) []int64 {
	head := make([]int64, qHead, qHead+len(lay.Limits)*layout.Stride)
	head[qTTL-1], head[qLimits-1], head[qBlock-1], head[qIDTTL-1] = lay.TTLMS, int64(len(lay.Limits)), lay.Block, lay.IDTTL
	if lay.Reserves {
		head[qReserves-1] = 1
	}
	if lay.Pending {
		head[qPending-1] = 1
	}
	return append(head, lay.Params()...)
}

// bakedHead is the head of the script with the policy's numbers given as
// data, so that a call carries only its own arguments: Redis then parses
// and converts a few numbers per call instead of a few dozen. It holds the
// policy's numbers and the names of its hash fields (see leanFields).
func bakedHead(nums []int64) string {
	last := leanFields(nums)
	var b strings.Builder
	b.Grow(len(prelude) + 32 + 12*len(nums) + 6*int(last))
	b.WriteString(prelude)
	b.WriteString("local BAKED, NAMES, POLICYID = {")
	for i, v := range nums {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(v, 10))
	}
	b.WriteString("}, {")
	for f := int64(1); f <= last; f++ {
		if f > 1 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(strconv.FormatInt(f, 10)))
	}
	b.WriteString("}, " + strconv.Quote(policyID(nums)) + "\n")
	return b.String()
}

// policyID names a policy (its numbers nums) in the denials its script
// keeps (lua/denial.lua), so that a key's next policy does not take its
// last one's: an FNV-1a hash of the numbers, in hex.
func policyID(nums []int64) string {
	h := fnv.New32a()
	for _, v := range nums {
		h.Write(strconv.AppendInt(nil, v, 10))
		h.Write([]byte{' '})
	}
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

// leanFields returns the last numbered hash field the lean path of the
// common call (lean.lua) names for a policy (its numbers nums): a baked
// script carries the names of fields 1 to it as strings (NAMES), so that
// the path looks a name up where it would make it with nm, at several
// times the cost.
func leanFields(nums []int64) int64 {
	last := int64(1)
	for i := qHead; i+layout.Stride <= len(nums); i += layout.Stride {
		p := func(at int) int64 { return nums[i+at-1] }
		end := p(layout.PHash)
		switch layout.Kind(p(layout.PKind)) {
		case layout.Buckets:
			end += p(layout.PN) + 1 // each sub-bucket's cost and latest admission (layout.BucketPackFormat)
		case layout.Log:
			end += (p(layout.PCapacity) + p(layout.PChunk) - 1) / p(layout.PChunk)
		case layout.Fixed, layout.Token:
			end++ // the window's cost; the interval a TAT was written in
		case layout.Approx:
			end += 2
		}
		last = max(last, end)
	}
	return last
}

// prepared is what a policy's calls send besides their keys and own
// arguments: the script and, unless it has the policy baked in, the
// policy's numbers, boxed once so that a call does not box them again.
type prepared struct {
	script *script
	tail   []any
}

// maxPrepared bounds the policies whose arguments are kept prepared;
// maxBaked, those that get a script of their own (see prepare).
const (
	maxPrepared = 1024
	maxBaked    = 64
	// maxLibraries bounds the baked policies whose script is also a
	// library (FUNCTION LOAD): a library is kept, persisted and
	// replicated with the data, about 165 KB each, until deleted, and
	// every version of the script that a deploy brings adds its own. The
	// first maxLibraries policies a store sees, and the generic script,
	// go by FCALL; later ones by EVALSHA, as on a server without
	// functions.
	maxLibraries = 16
)

// scripts keeps the prepared policies of one store.
type scripts struct {
	cache    sync.Map     // *ratelimit.Policy → *prepared
	mu       sync.Mutex   // held while preparing a policy not in cache
	count    int          // policies in cache; guarded by mu
	maxBaked int          // policies that get a baked script
	fn       atomic.Int32 // what the server has: fnUnknown (try FCALL) or fnOff
	once     sync.Once
	any      *script // the generic script (anyPolicy)
}

// anyPolicy returns the store's generic script.
func (s *scripts) anyPolicy() *script {
	s.once.Do(func() { s.any = newScript(genericHead, &s.fn) })
	return s.any
}

// prepare returns the policy's prepared calls, computing them once. The
// first maxBaked policies get a script of their own with their numbers
// baked in (Redis keeps one such script per distinct policy); later ones,
// and those beyond maxPrepared, use the generic script with the policy in
// the call's arguments.
func (s *scripts) prepare(pol *ratelimit.Policy, ttlExtraMS int64) *prepared {
	if v, ok := s.cache.Load(pol); ok {
		return v.(*prepared)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.cache.Load(pol); ok { // prepared while this call waited
		return v.(*prepared)
	}
	lay := plan.Layout(pol)
	nums := policyNumbers(lay)
	nums[0] += ttlExtraMS
	n := s.count + 1
	p := &prepared{}
	if n <= s.maxBaked {
		fn := &s.fn
		if n > maxLibraries {
			fn = nil // EVALSHA
		}
		p.script = newScript(bakedHead(nums), fn)
		p.script.run = runLimits(nums)
	} else {
		p.script = s.anyPolicy()
		p.tail = make([]any, len(nums))
		for i, v := range nums {
			p.tail[i] = v
		}
	}
	// Policies are meant to be built once; a program that builds one per
	// request must not grow the cache without bound.
	if n <= maxPrepared {
		s.cache.Store(pol, p)
		s.count = n
	}
	return p
}
