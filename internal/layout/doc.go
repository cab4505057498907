// Package layout names, once, how the stores lay out an identity's
// counters: the kinds of counter, each limit's parameters, the memory
// store's fields and the Redis hash's fields. Package ratelimit compiles a
// Policy into a Policy of this package when it is built; the memory store
// (store/memory) and the Redis store (store/redis, whose script receives
// these names in its prelude) read it.
//
// The state of one identity under one policy is a flat array of integers
// (in Redis, a hash of the same numbers, but for a sub-bucket's two in one field) and a short list of pending
// reservations. First come the identity's fields: the time of the last
// charge (MemTime, HashTime); the end of a penalty (MemBlock) and the
// limit it reports (MemBlockLimit); the refund count and Reset epoch
// (MemGen). Then each limit owns a run of fields from its offset (Mem;
// Hash for Redis, whose fields are numbers from FirstHashField):
//
//	Buckets  the sum of the ring, then N+1 sub-bucket costs, then N+1
//	         offsets of each sub-bucket's latest admission within it (a
//	         ring indexed by bucket % (N+1)); a sub-bucket stops counting
//	         one Period after its latest admission (in Redis, a sub-bucket's
//	         cost and offset share its field, as BucketPackFormat says, and
//	         the sum may be marked, as BucketSumSole says)
//	Log      the ring's oldest slot, then Capacity slots: the times of the
//	         last Capacity units of cost charged up to MemTime, oldest
//	         first from that slot (in Redis, packed TimeDigits digits each, Chunk
//	         to a field)
//	Fixed    the window index, and the cost counted in it
//	Token    the theoretical arrival time (TAT) of the next token, after
//	         the charges made up to MemTime, and the emission interval it
//	         was written in (0: never written), which a policy of another
//	         rate reads it in (token.go)
//	Approx   the window index, its cost, and the previous window's
//
// Pending reservations (storekit.Reserver) are admissions whose release
// time lies ahead of MemTime: each is a release time and a cost, kept in
// order of release, shared by every limit of the identity (only a Log and
// a Token reserve; in Redis, the field HashPending, PendingDigits each).
// They count from their release time on but are kept out of the fields
// until a charge at or after that time folds them in, so that a waiter
// who leaves takes its units back exactly, whatever its place in line: a
// log still holds the units they would have pushed out, and a token
// bucket's TAT never included them.
//
// Redis also keeps, per identity, when its expiry was last set
// (HashExpiry) and the resend IDs of its last charges (HashResends: TimeDigits
// digits of the time one was last pushed out, then ResendIDs IDs of
// ResendIDLen characters), and the last denial it kept for the calls
// that repeat it (HashDenial, then one field per limit; DenialDigits),
// while HashTime is marked: written again after a space, which any charge
// undoes.
package layout
