package memory

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
)

// floodClock is a controlled clock for the flood tests.
type floodClock struct{ ns atomic.Int64 }

func newFloodClock() *floodClock {
	c := &floodClock{}
	c.ns.Store(time.Date(2031, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *floodClock) Now() time.Time            { return time.Unix(0, c.ns.Load()) }
func (c *floodClock) Advance(d time.Duration)   { c.ns.Add(int64(d)) }
func (c *floodClock) Since0(t0 time.Time) int64 { return c.ns.Load() - t0.UnixNano() }

// heapInUse returns the bytes of heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC() // the second cycle frees what finalizers of the first released
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// floodKey is the i-th distinct identity of a flood: what ByIP would make
// of a client rotating through addresses.
func floodKey(i int) string {
	return "ip:10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + "/" + strconv.Itoa(i>>24)
}

// TestFloodDistinctIdentities sends a flood of distinct identities, each
// once, through a memory store on a three-limit policy. The bounded store
// (WithMaxKeys) must hold exactly its bound once full, each new identity
// evicting exactly one held (never a sweep of many, never none), and
// allocate no more per new identity when holding many than when holding
// few; the unbounded store must let idle identities go as its clock
// advances. Heap in use is measured after a GC before and after, with the
// store alive, and logged per identity held. The checks count, never time:
// what a new identity costs in time, holding few or many, is
// BenchmarkFloodNewIdentity's, side by side. The flood is ten times the
// bound (100,000; 20,000 without RATELIMIT_FULL=1; a third of the flood
// under -race).
func TestFloodDistinctIdentities(t *testing.T) {
	maxKeys := testmode.Scale(100_000, 20_000)
	total := 10 * maxKeys
	if raceDetector {
		total = 3 * maxKeys
	}
	p := ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("flood"))

	t.Run("bounded", func(t *testing.T) { floodBounded(t, p, maxKeys, total) })
	t.Run("unbounded expiring", func(t *testing.T) { floodUnboundedExpiring(t, total) })
	t.Run("longest keys", func(t *testing.T) { floodLongestKeys(t, p) })
}

// floodBounded sends total distinct identities to a store of at most
// maxKeys, its clock frozen: nothing expires, every key over the bound
// evicts one.
func floodBounded(t *testing.T, p *ratelimit.Policy, maxKeys, total int) {
	clk := newFloodClock() // frozen: nothing expires, every key over the bound evicts one
	before := heapInUse()
	m := New(WithClock(clk.Now), WithMaxKeys(maxKeys))
	ctx := context.Background()
	keys := []string{""}
	start := time.Now()
	var fillTook time.Duration
	for i := 0; i < total; i++ {
		keys[0] = floodKey(i)
		d, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v; want a fresh identity admitted", i, d, err)
		}
		// Counted identities: one more per new identity until the
		// bound, then exactly the bound: each new one evicted one.
		if got, want := m.count.Load(), int64(min(i+1, maxKeys)); got != want {
			t.Fatalf("after %d distinct identities: %d counted, want %d", i+1, got, want)
		}
		if i%(maxKeys/4) == 0 || i == total-1 {
			if got, want := m.Len(), min(i+1, maxKeys); got != want {
				t.Fatalf("after %d distinct identities: Len %d, want %d", i+1, got, want)
			}
		}
		if i+1 == maxKeys {
			fillTook = time.Since(start)
		}
	}
	restTook := time.Since(start) - fillTook
	n := m.Len()
	after := heapInUse()
	runtime.KeepAlive(m)
	grown := int64(after) - int64(before)
	t.Logf("bounded store (WithMaxKeys(%d), %d shards): %d distinct identities sent, %d held; heap in use +%.1f MiB, %.0f bytes per identity held",
		maxKeys, len(m.shards), total, n, float64(grown)/(1<<20), float64(grown)/float64(max(n, 1)))
	t.Logf("time per new identity (logged, not checked: see BenchmarkFloodNewIdentity): %.2fµs while filling (first %d), %.2fµs once full (next %d, each evicting one)",
		perKeyMicros(fillTook, maxKeys), maxKeys, perKeyMicros(restTook, total-maxKeys), total-maxKeys)
	// Generous: the state of one identity is 61 int64s (a 512-byte
	// block) plus its key and map slot, under 1KiB, and evictions at
	// random leave the blocks' spans partly used (up to about as much
	// again, twice). Evicted entries still referenced would show as
	// many KiB per identity held.
	if grown > int64(maxKeys)*4096 {
		t.Errorf("heap grew by %d bytes for %d identities held: more than 4KiB each", grown, n)
	}
	newIdentityAllocs(t, p, m, clk, maxKeys, total)
}

// newIdentityAllocs checks that a new identity allocates as much in m, full
// at maxKeys, as in a full store of 100: nothing it does (finding a victim,
// evicting it) makes or copies anything that grows with the number held.
// Identities from next on are new to both.
func newIdentityAllocs(t *testing.T, p *ratelimit.Policy, m *Store, clk *floodClock, maxKeys, next int) {
	ctx := context.Background()
	keys := []string{""}
	small := New(WithClock(clk.Now), WithMaxKeys(100))
	newIdentity := func(s *Store) func() {
		return func() {
			keys[0] = floodKey(next)
			next++
			if _, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 200 { // fill it, and evict a while
		newIdentity(small)()
	}
	inSmall := testing.AllocsPerRun(2000, newIdentity(small))
	inLarge := testing.AllocsPerRun(2000, newIdentity(m))
	t.Logf("allocations per new identity: %.0f in a full store of 100, %.0f in one of %d", inSmall, inLarge, maxKeys)
	if inLarge > inSmall {
		t.Errorf("a new identity allocates %.0f times in a full store of %d, %.0f in one of 100: its cost grows with the number held",
			inLarge, maxKeys, inSmall)
	}
	if got := m.Len(); got != maxKeys {
		t.Errorf("Len %d after the allocation runs, want %d", got, maxKeys)
	}
}

// floodUnboundedExpiring floods a store of no bound under a policy whose
// longest period is a minute: idle identities expire after its TTL and are
// swept as the store is used.
func floodUnboundedExpiring(t *testing.T, total int) {
	// A policy whose longest period is a minute: idle identities expire
	// after its TTL and are swept as the store is used.
	p := ratelimit.MustParsePolicy("5/s, 50/10s, 300/m", ratelimit.Named("flood-short"))
	clk := newFloodClock()
	t0 := clk.Now()
	before := heapInUse()
	m := New(WithClock(clk.Now))
	// Entries live for the TTL after their last charge; a shard drops
	// expired ones every sweepEvery (µs) as it is used. So at most the
	// identities of the last TTL+sweepEvery are held, plus one step per
	// shard for a shard that was not touched right at its sweep time.
	// The clock moves by at least 1ms per new identity, more for a
	// small flood, so that it spans four such windows.
	ttl := time.Duration(plan.Layout(p).TTLMS) * time.Millisecond
	window := ttl + time.Duration(sweepEvery)*time.Microsecond
	step := max(time.Millisecond, (4 * window / time.Duration(total)).Round(time.Microsecond))
	bound := int(window/step) + 2*len(m.shards)
	ctx := context.Background()
	keys := []string{""}
	start := time.Now()
	peak := 0
	for i := 0; i < total; i++ {
		keys[0] = floodKey(i)
		if _, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		clk.Advance(step)
		if i%1000 == 999 {
			peak = max(peak, m.Len())
		}
	}
	took := time.Since(start)
	n := m.Len()
	after := heapInUse()
	runtime.KeepAlive(m)
	grown := int64(after) - int64(before)
	t.Logf("unbounded store, TTL %v, one new identity per %v of clock (%v simulated): %d sent, %d held at the end, peak %d (bound %d); heap in use +%.1f MiB; %.2fµs per identity",
		ttl, step, time.Duration(clk.Since0(t0)), total, n, peak, bound, float64(grown)/(1<<20), perKeyMicros(took, total))
	if peak > bound || n > bound {
		t.Errorf("held %d at the peak, %d at the end, want at most %d: idle identities are not let go", peak, n, bound)
	}
	if peak < bound/2 {
		t.Errorf("peak %d, under half the bound %d: the flood did not fill a TTL's worth of identities, so it checked nothing", peak, bound)
	}
	// Once the clock has run past every key's TTL, a single call sweeps its shard.
	clk.Advance(window)
	keys[0] = "ip:last"
	if _, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	t.Logf("after the clock ran past every TTL and one more call: %d held (expired ones in untouched shards wait for their next use)", m.Len())
}

// floodLongestKeys floods a bounded store with hostile identifiers of the
// longest length a Request accepts.
func floodLongestKeys(t *testing.T, p *ratelimit.Policy) {
	// Hostile identifiers of the longest length a Request accepts: the
	// memory store holds each key as is, so bytes per identity grow
	// with the key (both stores hold keys beyond 128 bytes as a hash).
	n, bound := 20_000, 10_000
	if raceDetector {
		n = 12_000
	}
	clk := newFloodClock()
	before := heapInUse()
	m := New(WithClock(clk.Now), WithMaxKeys(bound))
	ctx := context.Background()
	pad := make([]byte, 4096-16) // 4 KB identifiers: held as a 128-bit hash
	for i := range pad {
		pad[i] = 'x'
	}
	keys := []string{""}
	for i := 0; i < n; i++ {
		keys[0] = strconv.Itoa(i) + ":" + string(pad)
		if _, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	held := m.Len()
	after := heapInUse()
	runtime.KeepAlive(m)
	grown := int64(after) - int64(before)
	t.Logf("keys of ~%d bytes: %d sent, %d held (WithMaxKeys(%d)); heap in use +%.1f MiB, %.0f bytes per identity held",
		4096, n, held, bound, float64(grown)/(1<<20), float64(grown)/float64(max(held, 1)))
	if held > bound {
		t.Errorf("Len %d, want at most %d", held, bound)
	}
	// Held as a hash, an identity costs less than its 4 KB key: 3 KiB
	// each is generous for its state, and catches raw keys kept alive.
	if grown > int64(held)*3072 {
		t.Errorf("heap grew by %d bytes for %d identities: more than 3KiB each", grown, held)
	}
}

// BenchmarkFloodNewIdentity compares, in one run, what a new identity
// costs a full bounded store (WithMaxKeys, each new identity evicting
// one) holding 1,000 identities and one holding 100,000: it must not
// grow with the number held, or a flood of distinct identities is a
// denial of service. The two stores take turns, 256 identities at a time,
// so that outside load falls on both alike; it reports each one's
// ns/identity and their ratio (large/small, about 1 when the cost does
// not grow).
func BenchmarkFloodNewIdentity(b *testing.B) {
	p := ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("flood"))
	ctx := context.Background()
	clk := newFloodClock() // frozen: nothing expires
	stores := []*Store{New(WithClock(clk.Now), WithMaxKeys(1_000)), New(WithClock(clk.Now), WithMaxKeys(100_000))}
	keys := []string{""}
	next := 0
	take := func(s *Store) {
		keys[0] = floodKey(next)
		next++
		if d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil || !d.Allowed {
			b.Fatalf("Take: %+v, %v", d, err)
		}
	}
	for _, s := range stores {
		for range s.maxKeys + 1000 { // full, and evicting for a while
			take(s)
		}
	}
	const turn = 256
	var took [2]time.Duration
	var done [2]int
	b.ResetTimer()
	for n := 0; n < b.N; n += turn {
		for i, s := range stores {
			k := min(turn, b.N-n)
			start := time.Now()
			for range k {
				take(s)
			}
			took[i] += time.Since(start)
			done[i] += k
		}
	}
	b.StopTimer()
	small := float64(took[0].Nanoseconds()) / float64(max(done[0], 1))
	large := float64(took[1].Nanoseconds()) / float64(max(done[1], 1))
	b.ReportMetric(small, "ns/new-of-1k")
	b.ReportMetric(large, "ns/new-of-100k")
	b.ReportMetric(large/small, "large/small")
}

func perKeyMicros(d time.Duration, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}

// TestMemoryMaxKeysHoldsN: a bound of n identities holds n, whatever their
// hashes (two identities must not evict each other while the store has
// room), and a request never evicts its own keys, so its charge is never
// lost.
func TestMemoryMaxKeysHoldsN(t *testing.T) {
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("1/h", ratelimit.Named("bound"))
	for _, n := range []int{1, 2, 50, 100, 1000} {
		m := New(WithMaxKeys(n))
		for i := 0; i < n; i++ {
			if d, _ := m.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"id:" + strconv.Itoa(i)}, Cost: 1}); !d.Allowed {
				t.Fatalf("n=%d: identity %d denied on its first request", n, i)
			}
		}
		for i := 0; i < n; i++ {
			if d, _ := m.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"id:" + strconv.Itoa(i)}, Cost: 1}); d.Allowed {
				t.Fatalf("WithMaxKeys(%d): identity %d admitted twice under 1/h: its counters were evicted while %d identities were held", n, i, m.Len())
			}
		}
		if m.Len() != n {
			t.Fatalf("WithMaxKeys(%d): %d held", n, m.Len())
		}
	}
	// A full store, then a request with three new keys: they evict others,
	// never one another, and all three are charged.
	m := New(WithMaxKeys(3))
	for i := 0; i < 3; i++ {
		m.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"old:" + strconv.Itoa(i)}, Cost: 1})
	}
	keys := []string{"new:a", "new:b", "new:c"}
	if d, _ := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); !d.Allowed {
		t.Fatal("the three new keys were denied")
	}
	for _, k := range keys {
		if d, _ := m.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{k}, Cost: 1}); d.Allowed {
			t.Fatalf("%s admitted again: the request's charge was lost to its own eviction", k)
		}
	}
	if m.Len() != 3 {
		t.Fatalf("%d held, want 3", m.Len())
	}
}
