package redis

import (
	"context"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// DefaultBatching is the number of calls a store keeps on the wire at once
// before later calls start sharing pipelines (see WithBatching).
const DefaultBatching = 4

// DefaultNodeBatching is DefaultBatching for each node of a Cluster or a
// Ring: with several nodes on the wire at once, fewer calls each share
// pipelines sooner (bench: docs/benchmarks.md, "A Cluster").
const DefaultNodeBatching = 2

// WithBatching sets how concurrent Takes share round trips. A call that
// finds fewer than inFlight calls on the wire is sent at once, on its own
// goroutine, exactly as without batching: an idle or lightly loaded store
// pays nothing for it. A call that finds inFlight calls on the wire queues,
// and the next batch sent carries every call queued so far (at most 256),
// a policy's plain Takes in it as script runs of up to 32 calls (multi.go),
// on two pipelines at most (its first run, and the rest), so that the
// first run's callers are answered while Redis decides the rest: under
// high concurrency this cuts system calls and Redis CPU per request and
// raises throughput (see the README's benchmarks). A store uses at most
// 2 × inFlight connections of its client's pool for batches. A call the
// run cannot answer, such as a denial, goes again alone right after. Every
// Take still returns by its own context's deadline.
//
// Batching is on by default, with inFlight DefaultBatching (4); 0 or less
// turns it off (one command per Take, each on its own pooled connection).
// With a *goredis.ClusterClient or a *goredis.Ring, each node (a Cluster's
// master, a Ring's shard) batches on its own, with inFlight
// DefaultNodeBatching (2) unless WithBatching says otherwise, on its own connections, so
// that requests on live nodes never wait for a slow or dead one; on a
// Cluster each call stays its own command (a run's keys would span slots),
// and a call that finds its slot moved goes again through the Cluster
// client (nodebatch.go).
func WithBatching(inFlight int) Option {
	return func(r *Store) {
		r.batchSet = true
		if inFlight > 0 {
			r.batch = &batcher{max: inFlight}
		} else {
			r.batch = nil
		}
	}
}

const maxBatch = 256

// batcher lets at most max calls or batches be on the wire at once (a
// batch on up to two pipelines: split); the calls that find them all busy
// queue and go out together.
type batcher struct {
	client goredis.UniversalClient
	max    int
	mu     sync.Mutex
	queue  []*pending
	busy   int             // calls and batches on the wire, or about to be
	skip   map[*script]int // batches a policy's calls go unmerged (multi.go)
	single bool            // every call its own command: a Cluster master's batcher (nodebatch.go)
}

// pending is one queued script call and, once done is closed, its answer.
type pending struct {
	ctx    context.Context
	script *script
	keys   []string
	args   []any
	reply  []int64
	err    error
	done   chan struct{}
}

// do runs one call: at once on the caller's goroutine when fewer than max
// are on the wire, else queued for the next batch. It returns the
// answer, or ctx's error once ctx ends.
func (b *batcher) do(ctx context.Context, s *script, keys []string, args []any) ([]int64, error) {
	b.mu.Lock()
	if b.busy < b.max {
		b.busy++
		b.mu.Unlock()
		reply, err := runScript(ctx, b.client, s, keys, args).Int64Slice()
		b.release()
		return reply, err
	}
	p := &pending{ctx: ctx, script: s, keys: keys, args: args, done: make(chan struct{})}
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.reply, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// release gives back a slot on the wire; if calls have queued meanwhile,
// the slot goes to a goroutine that sends them, so that neither the caller
// that releases it nor those queued wait for one another.
func (b *batcher) release() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy--
		b.mu.Unlock()
		return
	}
	batch := b.take()
	b.mu.Unlock()
	go b.drain(batch)
}

// take removes up to maxBatch calls from the queue; b.mu is held.
func (b *batcher) take() []*pending {
	n := min(len(b.queue), maxBatch)
	batch := make([]*pending, n)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// drain sends batch, then whatever queued meanwhile, until the queue is
// empty; it holds one slot on the wire throughout.
func (b *batcher) drain(batch []*pending) {
	for {
		b.send(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.busy--
			b.mu.Unlock()
			return
		}
		batch = b.take()
		b.mu.Unlock()
	}
}

// send runs one batch, on up to two pipelines at once (split), bounded by
// the latest deadline of its callers (those that gave up earlier no longer
// wait for it).
func (b *batcher) send(batch []*pending) {
	live := batch[:0:0]
	for _, p := range batch {
		if p.ctx.Err() != nil {
			close(p.done) // its caller has returned already
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		// Alone: a plain call, with its caller's own context.
		p := live[0]
		p.reply, p.err = runScript(p.ctx, b.client, p.script, p.keys, p.args).Int64Slice()
		close(p.done)
		return
	}
	var deadline time.Time // zero: some caller has no deadline
	for i, p := range live {
		d, ok := p.ctx.Deadline()
		if !ok {
			deadline = time.Time{}
			break
		}
		if i == 0 || d.After(deadline) {
			deadline = d
		}
	}
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	b.mu.Lock()
	if b.skip == nil {
		b.skip = map[*script]int{}
	}
	wires := merge(live, b.skip, !b.single)
	b.mu.Unlock()
	first, rest := split(wires)
	var wg sync.WaitGroup
	if rest != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.finish(ctx, rest)
		}()
	}
	b.finish(ctx, first)
	wg.Wait()
}

// split parts a batch's commands between two pipelines: its first run
// alone, and the rest (nil when there is nothing else). Redis answers a
// pipeline once it has run all of it; with the first run apart, its callers
// are answered, and go on to their next requests, while Redis decides the
// rest. Under load nearly every caller ends up in one batch (the queue
// fills while a batch is on the wire), and one pipeline then kept Redis
// and its callers taking turns, each idle while the other worked
// (docs/internals.md, "Batching"). Two pipelines are enough for that, and
// keep a batch to two of the pool's connections. A batch with no run (a
// Cluster master's) stays one pipeline.
func split(wires []*wire) (first, rest []*wire) {
	for i, w := range wires {
		if w.run {
			if len(wires) == 1 {
				return wires, nil
			}
			rest = append(append(rest, wires[:i]...), wires[i+1:]...)
			return []*wire{w}, rest
		}
	}
	return wires, nil
}

// finish sends wires in one pipeline and answers their calls; a call a run
// could not answer goes again alone.
func (b *batcher) finish(ctx context.Context, wires []*wire) {
	cmds := pipeline(ctx, b.client, len(wires), func(i int) (*script, []string, []any) {
		return wires[i].script, wires[i].keys, wires[i].args
	})
	var again []*pending
	for i, w := range wires {
		later := w.answer(cmds[i])
		if w.run && 2*len(later) > len(w.calls) {
			b.mu.Lock()
			b.skip[w.script] = runBackoff
			b.mu.Unlock()
		}
		again = append(again, later...)
		for _, p := range w.calls {
			if !slices.Contains(later, p) {
				close(p.done)
			}
		}
	}
	if len(again) > 0 {
		alone(ctx, b.client, again)
		for _, p := range again {
			close(p.done)
		}
	}
}
