package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
)

// TestBatchingSameDecisions: with batching on, concurrent Takes share
// pipelines and still admit exactly the limit; a script flush is
// recovered from; sequential Takes give the decisions of the memory store.
func TestBatchingSameDecisions(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(2))
	p := ratelimit.MustParsePolicy("100/24h, 1000/48h", ratelimit.Named("batch"))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:1", "user:" + strconv.Itoa(i%3)}, Cost: 1})
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 100 {
		t.Fatalf("admitted %d of 320, want 100", admitted.Load())
	}
	if err := client.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, s, p, 1, "ip:2"); !d.Allowed || d.Remaining != 99 {
		t.Fatalf("after SCRIPT FLUSH: %+v", d)
	}
	// A caller whose context ends does not wait for the batch.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:3"}, Cost: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Take: %v", err)
	}
}

// TestBatchingZeroTurnsOff: a later WithBatching(0) (or a negative value)
// undoes an earlier WithBatching(n).
func TestBatchingZeroTurnsOff(t *testing.T) {
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { plain.Close() })
	for _, off := range []int{0, -1} {
		s, err := New(plain, WithBatching(4), WithBatching(off))
		if err != nil {
			t.Fatal(err)
		}
		if s.batch != nil {
			t.Fatalf("WithBatching(4), WithBatching(%d): still batching", off)
		}
	}
}

// TestBatchedErrorWrappedOnce: a batched call's error names the store once
// and carries the cause (here, the refused connection).
func TestBatchedErrorWrappedOnce(t *testing.T) {
	mr := miniredis.RunT(t)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	s, err := New(client, WithBatching(2))
	if err != nil {
		t.Fatal(err)
	}
	mr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = s.Take(ctx, ratelimit.Request{Policy: ratelimit.MustParsePolicy("1/s"), Keys: []string{"ip:1"}, Cost: 1})
	if err == nil {
		t.Fatal("Take on a closed server succeeded")
	}
	if n := strings.Count(err.Error(), "ratelimit/store"); n != 1 {
		t.Fatalf("error %q names the store %d times, want once", err, n)
	}
	if !strings.Contains(err.Error(), "connect") {
		t.Fatalf("error %q does not say the connection failed", err)
	}
}

// TestBatchingOnByDefault: a store on a single Redis batches unless told
// not to, with DefaultBatching calls on the wire.
func TestBatchingOnByDefault(t *testing.T) {
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { plain.Close() })
	s, err := New(plain)
	if err != nil {
		t.Fatal(err)
	}
	if s.batch == nil || s.batch.max != DefaultBatching || s.batch.client != plain {
		t.Fatalf("default store: batcher %+v, want %d in flight on the client", s.batch, DefaultBatching)
	}
}

// gateHook holds every single command until gate is closed, and records the
// size of every pipeline of script calls.
type gateHook struct {
	gate  chan struct{}
	sent  atomic.Int64 // single commands that reached the hook
	mu    sync.Mutex
	pipes []int
}

func (h *gateHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *gateHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() == "fcall" || cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.sent.Add(1)
			<-h.gate
		}
		return next(ctx, cmd)
	}
}

func (h *gateHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if cmds[0].Name() == "fcall" || cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval" { // not a connection's setup
			h.mu.Lock()
			h.pipes = append(h.pipes, len(cmds))
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// TestBatchingInlineThenShared: calls finding a free slot go out at once as
// plain commands on their callers' goroutines (no pipeline); calls arriving
// while every slot is busy queue and share one pipeline, sent as soon as a
// slot frees, as one script run; every decision is exact.
func TestBatchingInlineThenShared(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(2))
	p := ratelimit.MustParsePolicy("5/h", ratelimit.Named("inline"))
	mustTake(t, s, p, 0, "warm") // loads the script before the gate shuts
	h := &gateHook{gate: make(chan struct{})}
	client.AddHook(h)

	const callers = 8
	results := make(chan bool, callers)
	take := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:1"}, Cost: 1})
		if err != nil {
			t.Error(err)
		}
		results <- d.Allowed
	}
	for i := 0; i < 2; i++ {
		go take()
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.sent.Load() < 2 { // both slots are on the wire, held at the gate
		if time.Now().After(deadline) {
			t.Fatal("the first two calls were not sent at once")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 2; i < callers; i++ {
		go take()
	}
	for {
		s.batch.mu.Lock()
		n := len(s.batch.queue)
		s.batch.mu.Unlock()
		if n == callers-2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", n, callers-2)
		}
		time.Sleep(time.Millisecond)
	}
	close(h.gate)
	admitted := 0
	for i := 0; i < callers; i++ {
		if <-results {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d of %d under 5/h", admitted, callers)
	}
	// The queued calls went out as one command (one script run); those it
	// denied went again alone (a pipeline of them, or one command), which
	// are at least the 1 that 5/h leaves out of 6 and at most 3.
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pipes) == 0 || h.pipes[0] != 1 || len(h.pipes) > 2 {
		t.Fatalf("pipelines %v, want one of one command (the %d queued calls' run), then at most one of its denials", h.pipes, callers-2)
	}
	again := h.sent.Load() - 2
	for _, n := range h.pipes[1:] {
		again += int64(n)
	}
	if again < 1 || again > 3 {
		t.Fatalf("%d calls went again alone (single commands %d, pipelines %v), want the run's denials, 1 to 3", again, h.sent.Load(), h.pipes)
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if s.batch.busy != 0 || len(s.batch.queue) != 0 {
		t.Fatalf("after every call returned: %d slots busy, %d queued", s.batch.busy, len(s.batch.queue))
	}
}
