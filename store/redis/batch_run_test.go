package redis

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// roundHook records, per round a batch sends (its pipeline, or one
// command), the resend IDs of the script calls it carried. With serialize
// it sends one round at a time: a batch's two pipelines go out together
// (batch.go's split), and Redis's order of decisions is then the order of
// the rounds.
type roundHook struct {
	serialize bool
	serial    sync.Mutex // held while a round is on the wire, with serialize
	mu        sync.Mutex
	rounds    [][]string
	runs      int // runs of several calls ('m' or 'u') sent
	alike     int // of those, runs of calls alike ('u')
	// leanAgain counts common calls ('f') sent in a later round than one
	// that carried them: a run that declines a call sends it again as
	// opDeclined.
	leanAgain int
}

func (h *roundHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *roundHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !h.record([]goredis.Cmder{cmd}) {
			return next(ctx, cmd)
		}
		defer h.serial.Unlock()
		return next(ctx, cmd)
	}
}

func (h *roundHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !h.record(cmds) {
			return next(ctx, cmds)
		}
		defer h.serial.Unlock()
		return next(ctx, cmds)
	}
}

func (h *roundHook) runCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs
}

// callIDs returns the resend IDs a script call carries, in the order its
// script decides them; ok is false for a command that is not a script call
// (a connection's setup, SCRIPT LOAD).
func callIDs(c goredis.Cmder) (ids []string, op any, ok bool) {
	a := c.Args()
	if len(a) < 3 || (c.Name() != "fcall" && c.Name() != "evalsha" && c.Name() != "eval") {
		return nil, nil, false
	}
	nk, _ := a[2].(int)
	if len(a) <= 3+nk {
		return nil, nil, true
	}
	argv := a[3+nk:]
	switch op := argv[0]; op {
	case opFast, opDeclined:
		return []string{fmt.Sprint(argv[3])}, op, true
	case opTake:
		return []string{fmt.Sprint(argv[5])}, op, true
	case opAlike:
		for _, id := range argv[4:] {
			ids = append(ids, fmt.Sprint(id))
		}
		return ids, op, true
	case opMulti:
		for i := 1 + multiArgs - 1; i < len(argv); i += multiArgs {
			ids = append(ids, fmt.Sprint(argv[i]))
		}
		return ids, op, true
	default:
		return nil, op, true
	}
}

// record notes a round of script calls and, with serialize, locks serial
// for the caller to unlock once the round is answered (it then returns
// true).
func (h *roundHook) record(cmds []goredis.Cmder) bool {
	var ids []string
	for _, c := range cmds {
		cids, op, ok := callIDs(c)
		if !ok {
			return false
		}
		h.mu.Lock()
		if op == opFast && c.Name() != "eval" { // (EVAL: the same command again, the script not found)
			for _, r := range h.rounds {
				if slices.Contains(r, cids[0]) {
					h.leanAgain++
				}
			}
		}
		if op == opMulti || op == opAlike {
			h.runs++
			if op == opAlike {
				h.alike++
			}
		}
		h.mu.Unlock()
		ids = append(ids, cids...)
	}
	if h.serialize {
		h.serial.Lock()
	}
	h.mu.Lock()
	h.rounds = append(h.rounds, ids)
	h.mu.Unlock()
	return h.serialize
}

// decidedOrder returns the resend IDs of the rounds since the last reset,
// each where it was decided: its last time on the wire (a call a run
// declined goes again alone, after it).
func (h *roundHook) decidedOrder() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var all []string
	for _, r := range h.rounds {
		all = append(all, r...)
	}
	var order []string
	for i, id := range all {
		if !slices.Contains(all[i+1:], id) {
			order = append(order, id)
		}
	}
	return order
}

// batchCall is one call of a random batch, and what it got.
type batchCall struct {
	req  ratelimit.Request
	op   int // 0 Take, 1 TakeUpTo, 2 Reserve
	rid  string
	d    ratelimit.Decision
	err  error
	done chan struct{}
}

func (c *batchCall) run(ctx context.Context, s *Store) (ratelimit.Decision, error) {
	switch c.op {
	case 1:
		return s.TakeUpTo(ctx, c.req)
	case 2:
		return s.Reserve(ctx, c.req, 3*time.Second)
	}
	return s.Take(ctx, c.req)
}

// TestBatchRunDecidesAsAlone: a batch sends the common calls of one policy
// as one script run. Each call must decide exactly as it would alone, in
// the run's order, and those the run cannot answer (denials, penalties,
// resends) go again alone after it. Random batches on miniredis, of
// policies of every algorithm (two limits, a penalty, places in line), one
// or two identities a call, costs up to above the rate, and calls that are
// not common (up to, reserving, with a request ID) among them: the store
// that batches must answer every call, and leave every key, as a store
// that sends each call alone in the order Redis decided them (a batch's
// runs go on pipelines of their own, together: split). Both layouts of a run must
// occur: calls that differ ('m') and calls alike ('u').
func TestBatchRunDecidesAsAlone(t *testing.T) {
	policies := []*ratelimit.Policy{
		ratelimit.MustParsePolicy("5/m, 12/h", ratelimit.Named("sw")),
		ratelimit.MustParsePolicy("3/s", ratelimit.Named("tb"), ratelimit.WithAlgorithm(ratelimit.TokenBucket)),
		ratelimit.MustParsePolicy("4/10s", ratelimit.Named("fw"), ratelimit.WithAlgorithm(ratelimit.FixedWindow)),
		ratelimit.MustParsePolicy("3/m", ratelimit.Named("log"), ratelimit.WithAlgorithm(ratelimit.SlidingLog)),
		ratelimit.MustParsePolicy("6/m", ratelimit.Named("approx"), ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)),
		ratelimit.MustParsePolicy("4/m", ratelimit.Named("blocks"), ratelimit.BlockFor(20*time.Second)),
	}
	const seeds, steps = 12, 50
	var runs, alike, apart int // over every seed; apart: batches sent as several pipelines
	for seed := range seeds {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			c := &clock{t: t0}
			mrA, clientA, a := miniStore(t, WithClock(c.Now), WithBatching(1))
			mrB, _, b := miniStore(t, WithClock(c.Now), WithBatching(0))
			h := &roundHook{serialize: true}
			clientA.AddHook(h)
			var ridMu sync.Mutex
			var rid string
			a.ridHook = func() *resendID { ridMu.Lock(); defer ridMu.Unlock(); return &resendID{id: rid} }
			seq := 0
			for step := 0; step < steps; step++ {
				c.Set(c.Now().Add(time.Duration(rng.IntN(4000)) * time.Millisecond))
				calls := make([]*batchCall, 2+rng.IntN(7))
				for i := range calls {
					seq++
					p := policies[rng.IntN(len(policies))]
					keys := []string{"ip:" + strconv.Itoa(rng.IntN(3))}
					if rng.IntN(4) == 0 {
						keys = append(keys, "user:"+strconv.Itoa(rng.IntN(2)))
					}
					bc := &batchCall{req: ratelimit.Request{Policy: p, Keys: keys, Cost: 1 + rng.Int64N(3)},
						rid: fmt.Sprintf("q%05d", seq), done: make(chan struct{})}
					if rng.IntN(6) == 0 {
						bc.op = 1 + rng.IntN(2)
					}
					if rng.IntN(8) == 0 {
						bc.req.ID = "id" + strconv.Itoa(rng.IntN(4))
					}
					calls[i] = bc
				}
				// The batch: every slot busy, the calls queue one by one in
				// order, then one pipeline sends them.
				batch := enqueue(t, a, len(calls), func(i int) {
					bc := calls[i]
					ridMu.Lock()
					rid = bc.rid // the ID of this call, taken before it queues
					ridMu.Unlock()
					bc.d, bc.err = bc.run(context.Background(), a)
					close(bc.done)
				})
				h.mu.Lock()
				h.rounds, h.leanAgain = nil, 0
				h.mu.Unlock()
				a.batch.mu.Lock()
				if _, rest := split(merge(batch, maps.Clone(a.batch.skip), true)); rest != nil { // as send will lay them out
					apart++
				}
				a.batch.mu.Unlock()
				a.batch.send(batch)
				for _, bc := range calls {
					<-bc.done
				}
				// The order the batch decided in: the rounds' calls, each
				// where it was last sent.
				var order []*batchCall
				for _, id := range h.decidedOrder() {
					for _, bc := range calls {
						if bc.rid == id {
							order = append(order, bc)
						}
					}
				}
				if h.leanAgain > 0 {
					t.Fatalf("step %d: %d calls a run declined were sent again to its lean path", step, h.leanAgain)
				}
				if len(order) != len(calls) {
					t.Fatalf("step %d: %d calls in the order found, want %d (rounds %v)", step, len(order), len(calls), h.rounds)
				}
				for i, bc := range order {
					b.ridHook = func() *resendID { return &resendID{id: bc.rid} }
					d, err := bc.run(context.Background(), b)
					if (err != nil) != (bc.err != nil) || !reflect.DeepEqual(d, bc.d) {
						t.Fatalf("step %d, call %d of %d (%+v, op %d): batched %+v, %v; alone %+v, %v",
							step, i, len(order), bc.req, bc.op, bc.d, bc.err, d, err)
					}
				}
				sameKeys(t, step, mrA, mrB)
			}
			if h.runCount() == 0 {
				t.Fatal("no batch went as a run")
			}
			runs, alike = runs+h.runCount(), alike+h.alike
		})
	}
	if alike == 0 || alike == runs {
		t.Fatalf("%d runs, %d of them of calls alike: the test must send both layouts", runs, alike)
	}
	if apart == 0 {
		t.Fatal("no batch went as several pipelines: the test must decide runs sent apart")
	}
}

// sameKeys fails unless a and b hold the same keys with the same fields,
// values and expiries.
func sameKeys(t *testing.T, step int, a, b *miniredis.Miniredis) {
	t.Helper()
	ka, kb := a.Keys(), b.Keys()
	if !reflect.DeepEqual(ka, kb) {
		t.Fatalf("step %d: keys batched %v, alone %v", step, ka, kb)
	}
	for _, k := range ka {
		if a.Type(k) != "hash" {
			continue
		}
		fa, _ := a.HKeys(k)
		fb, _ := b.HKeys(k)
		if !reflect.DeepEqual(fa, fb) {
			t.Fatalf("step %d: key %s: fields batched %v, alone %v", step, k, fa, fb)
		}
		for _, f := range fa {
			if va, vb := a.HGet(k, f), b.HGet(k, f); va != vb {
				t.Fatalf("step %d: key %s field %s: batched %q, alone %q", step, k, f, va, vb)
			}
		}
		if ta, tb := a.TTL(k), b.TTL(k); ta != tb {
			t.Fatalf("step %d: key %s: TTL batched %v, alone %v", step, k, ta, tb)
		}
	}
}

// enqueue queues n calls in a's batch, every slot held busy: start(i)
// runs call i on its own goroutine (a Take or the like on a), and call i+1
// starts only once call i waits in the queue, so the queue holds them in
// order. It returns them taken off the queue, as a pipeline would send
// them.
func enqueue(t *testing.T, a *Store, n int, start func(i int)) []*pending {
	t.Helper()
	a.batch.mu.Lock()
	a.batch.busy = a.batch.max
	a.batch.mu.Unlock()
	for i := range n {
		go start(i)
		for {
			a.batch.mu.Lock()
			queued := len(a.batch.queue)
			a.batch.mu.Unlock()
			if queued == i+1 {
				break
			}
			runtime.Gosched()
		}
	}
	a.batch.mu.Lock()
	defer a.batch.mu.Unlock()
	batch := a.batch.take()
	a.batch.busy = 0
	return batch
}

// queue enqueues a Take of each request; each caller's answer arrives on
// its channel.
func queue(t *testing.T, a *Store, calls []ratelimit.Request) ([]*pending, []chan ratelimit.Decision) {
	t.Helper()
	out := make([]chan ratelimit.Decision, len(calls))
	for i := range out {
		out[i] = make(chan ratelimit.Decision, 1)
	}
	batch := enqueue(t, a, len(calls), func(i int) {
		d, err := a.Take(context.Background(), calls[i])
		if err != nil {
			t.Error(err)
		}
		out[i] <- d
	})
	return batch, out
}

// TestBatchRunResentChargesOnce: go-redis sends a pipeline again when its
// connection breaks before the replies arrive, so a run can run twice. The
// second run finds every call's resend ID marked as a resend and answers
// none of them; each goes again alone as a resend, which the script finds
// among its key's charges: every call counts once.
func TestBatchRunResentChargesOnce(t *testing.T) {
	c := &clock{t: t0}
	_, _, a := miniStore(t, WithClock(c.Now), WithBatching(1))
	p := ratelimit.MustParsePolicy("5/h", ratelimit.Named("resent"))
	reqs := []ratelimit.Request{
		{Policy: p, Keys: []string{"ip:1"}, Cost: 1},
		{Policy: p, Keys: []string{"ip:2"}, Cost: 2},
		{Policy: p, Keys: []string{"ip:1", "user:1"}, Cost: 1},
	}
	batch, answers := queue(t, a, reqs)
	a.batch.send(batch)
	for step, ch := range answers {
		if d := <-ch; !d.Allowed {
			t.Fatalf("step %d: the first run denied %+v", step, d)
		}
	}
	for _, q := range batch { // the same calls, their IDs sent once already
		q.reply, q.err, q.done = nil, nil, make(chan struct{})
	}
	a.batch.send(batch)
	for step, q := range batch {
		if q.err != nil || len(q.reply) <= rHeader || q.reply[rHeader] != kindResent {
			t.Fatalf("step %d: the resent run answered %v, %v; want a resend of a charged call (key kind %d)", step, q.reply, q.err, kindResent)
		}
	}
	for step, want := range map[string]int64{"ip:1": 3, "ip:2": 3, "user:1": 4} {
		if d := mustTake(t, a, p, 0, step); d.Remaining != want {
			t.Fatalf("%s: %d left, want %d: every call counted once", step, d.Remaining, want)
		}
	}
}

// TestBatchRunBacksOff: a run most of whose calls go again alone (a flood
// of denials) makes that policy's next runBackoff batches go unmerged;
// then runs resume.
func TestBatchRunBacksOff(t *testing.T) {
	c := &clock{t: t0}
	_, client, a := miniStore(t, WithClock(c.Now), WithBatching(1))
	a.denied = nil // else the flood's key, held, goes by the general path outside runs (denied_keys.go)
	h := &roundHook{}
	client.AddHook(h)
	p := ratelimit.MustParsePolicy("2/h", ratelimit.Named("flood"))
	flood := make([]ratelimit.Request, 6)
	for i := range flood {
		flood[i] = ratelimit.Request{Policy: p, Keys: []string{"ip:1"}, Cost: 1}
	}
	for step := 0; step <= runBackoff+1; step++ {
		batch, answers := queue(t, a, flood)
		before := h.runCount()
		a.batch.send(batch)
		for _, ch := range answers {
			<-ch
		}
		merged := h.runCount() > before
		if want := step == 0 || step == runBackoff+1; merged != want {
			t.Fatalf("step %d: batch went as a run: %v, want %v (backoff of %d batches after a run of denials)", step, merged, want, runBackoff)
		}
	}
}

// TestRealBatchRunsExact: 64 callers on a real Redis, batched by default:
// the pipelines carry runs, and each identity of a 100/h policy is
// admitted exactly 100 of its 200 requests.
func TestRealBatchRunsExact(t *testing.T) {
	if !realRedis() {
		t.Skip("no redis-server on PATH (RATELIMIT_REQUIRE_REDIS=1 makes this a failure): the batch's runs are covered on miniredis")
	}
	client := redistest.StartServer(t).Client(t)
	h := &roundHook{}
	client.AddHook(h)
	s, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("100/h", ratelimit.Named("runs"))
	for id, n := range takeEach(t, s, p, 8, 200, 64) {
		if n != 100 {
			t.Errorf("identity %d: admitted %d of 200 under 100/h", id, n)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs == 0 {
		t.Fatal("no pipeline carried a run of several calls: the test did not reach what it checks")
	}
	t.Logf("%d runs of several calls among %d rounds", h.runs, len(h.rounds))
}
