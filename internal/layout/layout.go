package layout

import "slices"

// Version changes whenever the stores lay counters out differently, so
// that a store never reads counters laid out by another version.
const Version = 8

// Kind is how a store counts one limit.
type Kind uint8

const (
	// Buckets: sub-buckets, each with its cost and the time of its latest
	// admission within it (SlidingWindow above ExactRateMax, or with a
	// Precision).
	Buckets Kind = iota
	// Log: the times of the last Rate units of cost (SlidingLog, and
	// SlidingWindow up to ExactRateMax).
	Log
	// Fixed: the aligned window's index and its cost (FixedWindow).
	Fixed
	// Token: the theoretical arrival time of GCRA (TokenBucket).
	Token
	// Approx: the aligned window's index, its cost and the previous
	// window's cost (SlidingWindowApprox).
	Approx
	// Concurrent: slots of requests in flight, counted per epoch (Width
	// long, half the lease): the current epoch's index, the slots recorded
	// in it and those recorded in the epoch before. A slot counts until
	// the end of the epoch after the one it was recorded in (concurrent.go).
	Concurrent
)

// Kinds lists every Kind with its name in the Redis script's prelude.
var Kinds = [...]struct {
	Kind Kind
	Lua  string
}{{Buckets, "K_BUCKETS"}, {Log, "K_LOG"}, {Fixed, "K_FIXED"}, {Token, "K_TOKEN"}, {Approx, "K_APPROX"}, {Concurrent, "K_CONC"}}

// Limit is one limit as the stores count it. Times are microseconds.
type Limit struct {
	Kind Kind
	// Capacity is the cost the limit admits at once: its Rate, or the
	// token bucket's Burst.
	Capacity int64
	// Width is a sub-bucket (Buckets), the emission interval (Token), an
	// epoch of half the lease (Concurrent), or the period (the others).
	Width int64
	// N is the number of sub-buckets (Buckets); 1 otherwise.
	N int64
	// Period is the limit's period.
	Period int64
	// Mem is the limit's first field in the memory store's state.
	Mem int
	// Hash is the limit's first field in the Redis hash (fields of limits
	// are numbers from FirstHashField).
	Hash int64
	// Chunk is how many times (TimeDigits each) a Log packs into one hash field.
	Chunk int64
	// MaxCapacity is, for a Log, the largest Capacity a policy of its ID
	// can give it (policies of one ID may differ in their logs' rates):
	// the Redis hash keeps field numbers for that many times, so that
	// the limits after it keep theirs whatever its rate.
	MaxCapacity int64
	// Ring is, for a Log, how many times its ring holds: its Capacity,
	// or more when a policy of the same ID with a larger rate wrote it.
	// A ring only grows (laid out anew, its times kept, older slots
	// empty), so it always holds the newest Capacity units any policy
	// of its ID checks, and never forgets one that still counts.
	Ring int64
}

// Policy is a policy as the stores count it.
type Policy struct {
	Limits []Limit
	// MemFields is the length of an identity's state in the memory store.
	MemFields int
	// TTLMS is how long an identity's counters must outlive its last
	// write, in milliseconds.
	TTLMS int64
	// Block is the policy's penalty (BlockFor), 0 when none.
	Block int64
	// Reserves reports whether every limit can record an admission in
	// the future (a Log or a Token): a place in line can be reserved.
	Reserves bool
	// Pending reports that an identity may hold places in line: the
	// policy reserves, or its counters are a leased policy's, whose
	// leases are recorded ahead of now (ratelimit.Leaser). Both stores
	// then read them with every call.
	Pending bool
	// IDTTL is how long a request ID is remembered: the longest period.
	IDTTL int64
	// Slots reports a Concurrent limit among the limits: a charge holds
	// a slot until released.
	Slots bool
}

// The memory store's identity fields, before the limits' own.
const (
	// MemTime is the time of the last charge: a request is never
	// evaluated earlier, so a clock that steps back lengthens waits.
	MemTime = iota
	// MemBlock is when the penalty ends, 0 when none.
	MemBlock
	// MemBlockLimit is the index of the limit the penalty reports.
	MemBlockLimit
	// MemGen holds, in its low 32 bits, how many refunds the identity
	// has had and, above them (GenEpoch), how many Resets cleared it.
	MemGen
	// MemFirst is the first limit's first field.
	MemFirst
)

// GenEpoch is one Reset in MemGen (and in the hash field HashGen).
const GenEpoch = 1 << 32

// The Redis hash's identity fields. A limit's fields are the numbers from
// FirstHashField on (the time of the last charge is the number 1).
const (
	HashTime       = "1" // MemTime, the field numbered HashTimeField
	HashBlock      = "b" // MemBlock
	HashBlockLimit = "l" // MemBlockLimit
	HashGen        = "g" // MemGen
	HashExpiry     = "x" // the time the key's expiry was last set to
	HashResends    = "d" // resend IDs of the last charges (see ResendIDs)
	HashPending    = "q" // pending reservations (see PendingDigits)
	HashDenial     = "k" // a denial kept for the calls that repeat it, then "k1", "k2"... per limit (see DenialDigits); HashTime is then marked, after a space
	HashTimeField  = 1
	FirstHashField = 2
)

// A sub-bucket's one hash field holds its cost c and the offset l of its
// latest admission within it (0 ≤ l < the ring's width w) as one number,
// c × w + l, written by BucketPackFormat while it is below BucketExact
// (exact in the doubles of Redis Lua, where the remainder by w is then l
// exactly): " 191250" for cost 3 and offset 41250 in sub-buckets of
// 50ms. Beyond, the field holds c and l by BucketWideFormat ("-3.41250"),
// which Lua reads as a negative number: the sign of a field read as a
// number tells the two apart. A field of a cleared sub-bucket is "0".
//
// One field per sub-bucket rather than two halves what the Redis store's
// common call reads and writes, and so its time: a small hash is searched
// in order, field by field. One number rather than a pair splits by
// arithmetic, where the pair takes a search, two substrings and two
// calls (docs/cost.md). The space in front keeps the field a string in
// Redis, which would keep a bare number as an integer, to be formatted
// anew on every read.
const (
	BucketPackFormat = " %d"
	BucketExact      = 1 << 53
	BucketWideFormat = "-%d" + BucketSep + "%d"
	BucketSep        = "."
)

// A ring's sum field holds the sum of its sub-buckets' costs, or, when no
// sub-bucket but the last charge's holds cost, BucketSumSole minus the
// sum (a negative number): the Redis store's common call writes it so on a
// new key, after a lapsed ring, or charging that sub-bucket again, and
// then reads or clears no other sub-bucket when the ring moves on (a call
// that finds the ring lapsed clears the one sub-bucket, not all of them:
// docs/cost.md, "Sparse identities"). Every other write of the ring writes
// the sum plain, which claims nothing.
const BucketSumSole = -1

// Numbers the Redis script shares with the Go side.
const (
	// DenialDigits is the width of each number of a kept denial (see
	// HashDenial), spaces before its digits: in each limit's field its
	// remaining, reset, wait and refill; in the header field, after the
	// denial's time (TimeDigits), how long it holds, then what it was
	// decided on. A denial with a number of more digits (a window over
	// eleven days) is not kept. So a limit's field stays within a small
	// hash's 64 bytes a value.
	DenialDigits = 12
	// ResendIDLen is the length of a script call's resend ID.
	ResendIDLen = 6
	// ResendIDs is how many resend IDs a key remembers: its last charges'.
	ResendIDs = 8
	// MaxPending is the most pending reservations (distinct release
	// times) an identity keeps.
	MaxPending = 32
	// TimeDigits is the width of a time (µs since the epoch, zero-padded)
	// where Redis keeps times as text: a log's slots, a resend record's
	// time, a pending reservation's release (TW in the script).
	TimeDigits = 16
	// CostDigits is the width of a pending reservation's cost.
	CostDigits = 10
	// PendingDigits is the length of one pending reservation in
	// HashPending: its release time, then its cost.
	PendingDigits = TimeDigits + CostDigits
	// Stride is how many numbers describe one limit to the script, at
	// the positions below.
	Stride = 7
)

// Positions of a limit's numbers among the script's parameters, from 1
// after the limit's base (Lua counts from 1), named P_* in its prelude:
// the Kind, Capacity, Width, N, Period, first hash field (Hash) and Chunk.
const (
	PKind = iota + 1
	PCapacity
	PWidth
	PN
	PPeriod
	PHash
	PChunk
)

// Params lists the limits' numbers as the script reads them, Stride per
// limit in the order of the positions above.
func (p *Policy) Params() []int64 {
	out := make([]int64, 0, Stride*len(p.Limits))
	for _, l := range p.Limits {
		out = append(out, int64(l.Kind), l.Capacity, l.Width, l.N, l.Period, l.Hash, l.Chunk)
	}
	return out
}

// MemFields returns how many memory-store fields the limit takes.
func (l Limit) MemFields() int {
	switch l.Kind {
	case Buckets:
		return 1 + 2*int(l.N+1)
	case Log:
		return 1 + int(l.Ring)
	case Fixed:
		return 2
	case Token:
		return 2 // the TAT, and the interval it was written in (token.go)
	}
	return 3
}

// hashFields returns how many hash fields a limit takes (a log: as many
// as its MaxCapacity fills; smallLog as Compile's).
func (l Limit) hashFields(smallLog int64) int64 {
	switch l.Kind {
	case Buckets:
		return 1 + (l.N + 1) // the sum, then one field per sub-bucket (BucketPackFormat)
	case Log:
		return 1 + LogChunks(l.MaxCapacity, smallLog)
	case Fixed:
		return 2
	case Token:
		return 2
	}
	return 3
}

// Chunk sizes of a log: SmallLogChunk times a field (64 bytes,
// the most a small hash keeps in its compact encoding) for the small logs
// of SlidingWindow (Compile's smallLog or less), LogChunk for larger.
const (
	SmallLogChunk = 4
	LogChunk      = 32
)

// LogChunkOf is how many times (TimeDigits each) a log of capacity packs into one
// hash field.
func LogChunkOf(capacity, smallLog int64) int64 {
	if capacity <= smallLog {
		return SmallLogChunk
	}
	return LogChunk
}

// LogChunks is how many hash fields a log of capacity fills.
func LogChunks(capacity, smallLog int64) int64 {
	c := LogChunkOf(capacity, smallLog)
	return (capacity + c - 1) / c
}

// WithRings returns a copy of p whose logs' rings hold rings[i] times
// (limit i's; at least its Capacity), their memory-store fields moved to
// suit: the layout in which the memory store holds an identity's counters
// once policies of the same ID with larger rates grew its rings.
func (p *Policy) WithRings(rings []int64, smallLog int64) *Policy {
	limits := slices.Clone(p.Limits)
	for i := range limits {
		limits[i].Ring = max(rings[i], limits[i].Capacity)
	}
	return Compile(limits, p.Block, smallLog)
}

// LogPointerBase packs a log's pointer field: its oldest slot plus its
// capacity times LogPointerBase, so that a policy of another rate of the
// same ID knows the ring it reads (and lays it out anew for its own).
const LogPointerBase = 1 << 16

// Compile lays out limits (each with its Kind, Capacity, Width, N and
// Period set) for both stores and returns the policy: smallLog is the
// largest log packed four to a field; block the penalty (µs).
func Compile(limits []Limit, block, smallLog int64) *Policy {
	p := &Policy{Limits: limits, Block: block, Reserves: true}
	mem, hash := MemFirst, int64(FirstHashField)
	ttl := block
	for i := range p.Limits {
		l := &p.Limits[i]
		if l.Kind == Log {
			l.Chunk = LogChunkOf(l.Capacity, smallLog)
			l.MaxCapacity = max(l.MaxCapacity, l.Capacity)
			l.Ring = max(l.Ring, l.Capacity)
		}
		l.Mem, l.Hash = mem, hash
		mem += l.MemFields()
		hash += l.hashFields(smallLog)
		if l.Kind != Log && l.Kind != Token {
			p.Reserves = false
		}
		if l.Kind == Concurrent {
			p.Slots = true
		}
		p.IDTTL = max(p.IDTTL, l.Period)
		// How long after its last write, at t, the counters still matter.
		switch l.Kind {
		case Buckets:
			ttl = max(ttl, l.Period+l.Width) // a sub-bucket counts until its latest admission + Period
		case Approx:
			ttl = max(ttl, 2*l.Period) // the window of t is weighed until the next one ends
		case Concurrent:
			ttl = max(ttl, 2*l.Width) // a slot of t's epoch counts until the next one ends
		case Token:
			ttl = max(ttl, l.Width*l.Capacity) // the TAT is at most t + Burst × interval
		default:
			ttl = max(ttl, l.Period) // the newest unit, the window of t: until t + Period
		}
	}
	p.MemFields = mem
	p.TTLMS = (ttl + 999) / 1000
	p.Pending = p.Reserves
	return p
}
