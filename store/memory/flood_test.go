package memory

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
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

// floodBudget bounds the wall time of each flood loop: a hang guard, far
// above what a store whose cost per new identity does not grow with the
// number it holds needs (about 4µs per key here, 10µs under -race, so
// 1,000,000 keys in ~4s and 300,000 under -race in ~3s). A flood that
// cannot get through in this time is a denial of service of the store.
const floodBudget = 12 * time.Second

// TestFloodDistinctIdentities sends a flood of distinct identities, each
// once, through a memory store on a three-limit policy: the bounded store
// (WithMaxKeys) must hold at most its bound, whatever the flood's size,
// and its cost per new identity must not grow with the number it holds;
// the unbounded store must let idle identities go as its clock advances.
// Heap in use is measured after a GC before and after, with the store
// alive, and logged per identity held.
func TestFloodDistinctIdentities(t *testing.T) {
	total := 1_000_000
	if raceDetector {
		total = 300_000
	}
	const maxKeys = 100_000
	p := ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("flood"))

	t.Run("bounded", func(t *testing.T) {
		clk := newFloodClock() // frozen: nothing expires, every key over the bound evicts one
		before := heapInUse()
		m := New(WithClock(clk.Now), WithMaxKeys(maxKeys))
		bound := maxKeys // store-wide and exact
		ctx := context.Background()
		keys := []string{""}
		start := time.Now()
		var fillTook, restTook time.Duration
		done := 0
		for i := 0; i < total; i++ {
			if i&1023 == 0 && time.Since(start) > floodBudget {
				break
			}
			keys[0] = floodKey(i)
			d, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1})
			if err != nil || !d.Allowed {
				t.Fatalf("key %d: %+v, %v; want a fresh identity admitted", i, d, err)
			}
			done++
			if done == maxKeys {
				fillTook = time.Since(start)
			}
		}
		restTook = time.Since(start) - fillTook
		n := m.Len()
		after := heapInUse()
		runtime.KeepAlive(m)
		grown := int64(after) - int64(before)
		t.Logf("bounded store (WithMaxKeys(%d), %d shards): %d distinct identities sent, %d held (bound %d); heap in use +%.1f MiB, %.0f bytes per identity held",
			maxKeys, len(m.shards), done, n, bound, float64(grown)/(1<<20), float64(grown)/float64(max(n, 1)))
		if done >= maxKeys {
			t.Logf("cost per new identity: %.2fµs while filling (first %d), %.2fµs once full (next %d, each evicting one)",
				perKeyMicros(fillTook, maxKeys), maxKeys, perKeyMicros(restTook, done-maxKeys), done-maxKeys)
		}
		if n > bound || n > maxKeys {
			t.Errorf("Len %d after a flood of %d, want at most %d", n, done, bound)
		}
		// Generous: the state of one identity is 61 int64s (a 512-byte
		// block) plus its key and map slot, under 1KiB, and evictions at
		// random leave the blocks' spans partly used (up to about as much
		// again, twice). Evicted entries still referenced would show as
		// many KiB per identity held.
		if grown > int64(bound)*4096 {
			t.Errorf("heap grew by %d bytes for %d identities held: more than 4KiB each", grown, n)
		}
		if done < total {
			t.Errorf("only %d of %d distinct identities got through in %v (%.0fµs each once the store was full, %.1fµs while filling): "+
				"the cost of a new identity grows with the number held, so a flood of distinct identities is a denial of service",
				done, total, floodBudget, perKeyMicros(restTook, done-maxKeys), perKeyMicros(fillTook, maxKeys))
		}
	})

	t.Run("unbounded expiring", func(t *testing.T) {
		// A policy whose longest period is a minute: idle identities expire
		// after its TTL and are swept as the store is used.
		p := ratelimit.MustParsePolicy("5/s, 50/10s, 300/m", ratelimit.Named("flood-short"))
		const step = time.Millisecond // simulated time between two new identities
		clk := newFloodClock()
		t0 := clk.Now()
		before := heapInUse()
		m := New(WithClock(clk.Now))
		// Entries live for the TTL after their last charge; a shard drops
		// expired ones every sweepEvery (µs) as it is used. So at most the
		// identities of the last TTL+sweepEvery are held, plus one step per
		// shard for a shard that was not touched right at its sweep time.
		window := p.TTL() + time.Duration(sweepEvery)*time.Microsecond
		bound := int(window/step) + 2*len(m.shards)
		ctx := context.Background()
		keys := []string{""}
		start := time.Now()
		peak, done := 0, 0
		for i := 0; i < total; i++ {
			if i&1023 == 0 && time.Since(start) > floodBudget {
				break
			}
			keys[0] = floodKey(i)
			if _, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil {
				t.Fatalf("key %d: %v", i, err)
			}
			clk.Advance(step)
			done++
			if i%10_000 == 9_999 {
				peak = max(peak, m.Len())
			}
		}
		took := time.Since(start)
		n := m.Len()
		after := heapInUse()
		runtime.KeepAlive(m)
		grown := int64(after) - int64(before)
		t.Logf("unbounded store, TTL %v, one new identity per %v of clock (%v simulated): %d sent, %d held at the end, peak %d (bound %d); heap in use +%.1f MiB; %.2fµs per identity",
			p.TTL(), step, time.Duration(clk.Since0(t0)), done, n, peak, bound, float64(grown)/(1<<20), perKeyMicros(took, done))
		if peak > bound || n > bound {
			t.Errorf("held %d at the peak, %d at the end, want at most %d: idle identities are not let go", peak, n, bound)
		}
		if done < total {
			t.Errorf("only %d of %d identities got through in %v", done, total, floodBudget)
		}
		// Once the clock has run past every key's TTL, a single call sweeps its shard.
		clk.Advance(window)
		keys[0] = "ip:last"
		if _, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		t.Logf("after the clock ran past every TTL and one more call: %d held (expired ones in untouched shards wait for their next use)", m.Len())
	})

	t.Run("longest keys", func(t *testing.T) {
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
		start := time.Now()
		done := 0
		for i := 0; i < n; i++ {
			if i&255 == 0 && time.Since(start) > floodBudget {
				break
			}
			keys[0] = strconv.Itoa(i) + ":" + string(pad)
			if _, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil {
				t.Fatalf("key %d: %v", i, err)
			}
			done++
		}
		held := m.Len()
		after := heapInUse()
		runtime.KeepAlive(m)
		grown := int64(after) - int64(before)
		t.Logf("keys of ~%d bytes: %d sent, %d held (WithMaxKeys(%d)); heap in use +%.1f MiB, %.0f bytes per identity held",
			4096, done, held, bound, float64(grown)/(1<<20), float64(grown)/float64(max(held, 1)))
		if held > bound {
			t.Errorf("Len %d, want at most %d", held, bound)
		}
		// Held as a hash, an identity costs less than its 4 KB key: 3 KiB
		// each is generous for its state, and catches raw keys kept alive.
		if grown > int64(held)*3072 {
			t.Errorf("heap grew by %d bytes for %d identities: more than 3KiB each", grown, held)
		}
	})
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
