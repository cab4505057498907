package layout

// A Concurrent limit counts slots, one per request in flight, in epochs of
// Width µs, half its lease: fields (from Mem, or Hash) the current epoch's
// index E, the slots recorded in E and those recorded in E−1. A slot
// recorded at t counts until the end of the epoch after t's, so for more
// than half a lease and at most a lease; its holder renews it (records it
// anew) every quarter lease while it runs, and a holder that dies without
// releasing it holds it at most a lease. The charge's mark (a receipt's, per limit) is the epoch its slot
// is recorded in, plus one (0: none). Both stores compute these the same
// way; the Redis script mirrors them (lua/concurrent.lua).

// SlotsHeld returns the slots a Concurrent limit's fields (epoch e0, then
// cur and prev) hold at t, with the epoch's width w.
func SlotsHeld(e0, cur, prev, t, w int64) int64 {
	switch e := t / w; e0 {
	case e:
		return cur + prev
	case e - 1:
		return cur
	}
	return 0
}

// SlotsRolled returns the fields of a Concurrent limit moved to t's epoch:
// its index, the slots recorded in it and in the one before.
func SlotsRolled(e0, cur, prev, t, w int64) (e, c, p int64) {
	switch e = t / w; e0 {
	case e:
		return e, cur, prev
	case e - 1:
		return e, 0, cur
	}
	return e, 0, 0
}

// SlotsFreed returns cur and prev, rolled to t's epoch e, with the slot
// recorded in epoch mark−1 taken out, if it still counts (never below 0).
func SlotsFreed(cur, prev, e, mark int64) (int64, int64) {
	switch mark - 1 {
	case e:
		cur = max(cur-1, 0)
	case e - 1:
		prev = max(prev-1, 0)
	}
	return cur, prev
}
