package redis

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
)

// scriptOp picks the operation of a script call (callHook).
func scriptOp(cmd goredis.Cmder) string {
	a := cmd.Args()
	if n := cmd.Name(); len(a) > 3 && (n == "fcall" || n == "evalsha" || n == "eval") {
		if nk, ok := a[2].(int); ok && len(a) > 3+nk {
			return fmt.Sprint(a[3+nk])
		}
	}
	return ""
}

// TestDeniedKeyGoesByGeneralPath pins the route of a plain Take on a key
// the store has just seen deny one (denied_keys.go): by the general path
// at once ('g') until that denial's wait has passed, or until the general
// path admits a call on it; by the lean path ('f') otherwise. Every
// decision must be the one a store that never reroutes gives, on a
// second miniredis driven alike.
func TestDeniedKeyGoesByGeneralPath(t *testing.T) {
	c := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	_, client, a := miniStore(t, WithClock(c.Now), WithBatching(0))
	_, _, b := miniStore(t, WithClock(c.Now), WithBatching(0))
	b.denied = nil // never reroutes
	h := &callHook{pick: scriptOp}
	client.AddHook(h)
	p := ratelimit.MustParsePolicy("3/m", ratelimit.Named("dk"))
	ctx := context.Background()
	type step struct {
		do      string // "take" (keys), "advance" (by wait), "reset" (keys)
		keys    []string
		wait    time.Duration
		allowed bool
		op      string // the route of the take
	}
	steps := []step{
		{do: "take", keys: []string{"ip:a"}, allowed: true, op: opFast},
		{do: "take", keys: []string{"ip:a"}, allowed: true, op: opFast},
		{do: "take", keys: []string{"ip:a"}, allowed: true, op: opFast},
		{do: "take", keys: []string{"ip:a"}, allowed: false, op: opFast},     // denied: held for its wait
		{do: "take", keys: []string{"ip:a"}, allowed: false, op: opDeclined}, // held
		{do: "take", keys: []string{"ip:b"}, allowed: true, op: opFast},      // another key is not
		{do: "take", keys: []string{"ip:b", "ip:a"}, allowed: false, op: opDeclined},
		{do: "advance", wait: 61 * time.Second}, // the wait has passed
		{do: "take", keys: []string{"ip:a"}, allowed: true, op: opFast},
		{do: "take", keys: []string{"ip:a"}, allowed: true, op: opFast},
		{do: "take", keys: []string{"ip:a"}, allowed: true, op: opFast},
		{do: "take", keys: []string{"ip:a"}, allowed: false, op: opFast}, // held again
		{do: "reset", keys: []string{"ip:a"}},
		{do: "take", keys: []string{"ip:a"}, allowed: true, op: opDeclined}, // admitted by the general path: let go
		{do: "take", keys: []string{"ip:a"}, allowed: true, op: opFast},
	}
	for i, s := range steps {
		switch s.do {
		case "advance":
			c.Set(c.Now().Add(s.wait))
			continue
		case "reset":
			for _, st := range []*Store{a, b} {
				if err := st.Reset(ctx, p, s.keys...); err != nil {
					t.Fatalf("step %d: reset: %v", i, err)
				}
			}
			continue
		}
		req := ratelimit.Request{Policy: p, Keys: s.keys, Cost: 1}
		got, err := a.Take(ctx, req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		op := h.last()
		want, err := b.Take(ctx, req)
		if err != nil {
			t.Fatalf("step %d: the store that never reroutes: %v", i, err)
		}
		if got.Allowed != s.allowed || op != s.op {
			t.Fatalf("step %d: %v: allowed %v by %q, want %v by %q", i, s.keys, got.Allowed, op, s.allowed, s.op)
		}
		got.Receipt, want.Receipt = ratelimit.Receipt{}, ratelimit.Receipt{}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: %v by %q: %+v, the store that never reroutes %+v", i, s.keys, op, got, want)
		}
	}
}

// TestDeniedKeysBounded: the set holds at most maxDeniedKeys keys; once
// full, a new key is not held, and lapsed keys are swept to make room.
func TestDeniedKeysBounded(t *testing.T) {
	c := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	d := newDeniedKeys(c.Now)
	now := d.clock()
	for i := range maxDeniedKeys + 10 {
		d.hold("k"+strconv.Itoa(i), now+1_000_000, now)
	}
	if n := d.n.Load(); n != maxDeniedKeys {
		t.Fatalf("step 0: %d keys held, want %d", n, maxDeniedKeys)
	}
	if !d.held([]string{"k0"}) || d.held([]string{"k" + strconv.Itoa(maxDeniedKeys+5)}) {
		t.Fatal("step 1: the first keys must be held, those past the bound not")
	}
	c.Set(c.Now().Add(2 * time.Second)) // every key lapsed
	now = d.clock()
	if d.held([]string{"k0"}) || d.n.Load() != maxDeniedKeys-1 {
		t.Fatalf("step 2: a lapsed key is still held, or not let go when looked up (%d held)", d.n.Load())
	}
	d.hold("new1", now+1_000_000, now) // fills the room k0 left
	d.hold("new2", now+1_000_000, now) // full: sweeps the lapsed ones to make room
	if n := d.n.Load(); n != 2 || !d.held([]string{"new1"}) || !d.held([]string{"new2"}) {
		t.Fatalf("step 3: %d keys held after a sweep of lapsed ones, want the 2 new ones", n)
	}
}

// TestDeniedKeyStaysOutOfRuns: a batch's plain Takes on a key it has just
// seen denied go by the general path at once, each alone, instead of in a
// run whose lean path would decline them all; another key's still run.
func TestDeniedKeyStaysOutOfRuns(t *testing.T) {
	c := &clock{t: t0}
	_, client, a := miniStore(t, WithClock(c.Now), WithBatching(1))
	h := &roundHook{}
	client.AddHook(h)
	p := ratelimit.MustParsePolicy("2/h", ratelimit.Named("flood"))
	calls := func(key string) []ratelimit.Request {
		reqs := make([]ratelimit.Request, 4)
		for i := range reqs {
			reqs[i] = ratelimit.Request{Policy: p, Keys: []string{key}, Cost: 1}
		}
		return reqs
	}
	for step, s := range []struct {
		key     string
		run     bool // the batch went as a run
		allowed int
	}{
		{"ip:1", true, 2}, // two admitted; the others denied, and ip:1 held
		{"ip:1", false, 0},
		{"ip:2", true, 2},
	} {
		before := h.runCount()
		batch, answers := queue(t, a, calls(s.key))
		a.batch.send(batch)
		allowed := 0
		for _, ch := range answers {
			if d := <-ch; d.Allowed {
				allowed++
			}
		}
		if run := h.runCount() > before; run != s.run || allowed != s.allowed {
			t.Fatalf("step %d: %s: run %v, %d admitted; want run %v, %d admitted", step, s.key, run, allowed, s.run, s.allowed)
		}
	}
}
