package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
)

// TestSplitRunsApart pins how a batch's commands share pipelines: each run
// on one of its own, the calls alone together on one (a Cluster master's
// batch, which has no runs, stays one pipeline), in the order of the runs.
func TestSplitRunsApart(t *testing.T) {
	run := func(name string) *wire { return &wire{args: []any{name}, run: true} }
	single := func(name string) *wire { return &wire{args: []any{name}} }
	cases := []struct {
		wires []*wire
		want  [][]string
	}{
		{[]*wire{run("r1")}, [][]string{{"r1"}}},
		{[]*wire{single("s1")}, [][]string{{"s1"}}},
		{[]*wire{single("s1"), single("s2"), single("s3")}, [][]string{{"s1", "s2", "s3"}}},
		{[]*wire{run("r1"), single("s1"), run("r2"), single("s2")}, [][]string{{"r1"}, {"r2"}, {"s1", "s2"}}},
		{[]*wire{run("r1"), run("r2"), run("r3")}, [][]string{{"r1"}, {"r2"}, {"r3"}}},
	}
	for step, c := range cases {
		var got [][]string
		for _, part := range split(c.wires) {
			var names []string
			for _, w := range part {
				names = append(names, w.args[0].(string))
			}
			got = append(got, names)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("step %d: pipelines %v, want %v", step, got, c.want)
		}
	}
}

// holdHook lets the first pipeline that carries a run go, and holds every
// later one until release closes.
type holdHook struct {
	release chan struct{}
	held    chan struct{} // closed when a pipeline is first held
	mu      sync.Mutex
	runs    int // pipelines with a run seen
}

func (h *holdHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *holdHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (h *holdHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if _, op, _ := callIDs(c); op == opAlike || op == opMulti {
				h.mu.Lock()
				h.runs++
				later := h.runs > 1
				if h.runs == 2 {
					close(h.held)
				}
				h.mu.Unlock()
				if later {
					<-h.release
				}
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestBatchAnswersEachRunApart: a batch of more calls than a run holds
// goes as runs on pipelines of their own, so the callers of the first run
// have their answers while the second run is still on the wire (here, held
// there until they do). The runs are of even size (runSize). One pipeline for both would hold them all: the
// test would then fail at its deadline.
func TestBatchAnswersEachRunApart(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(1))
	p := ratelimit.MustParsePolicy("100/h", ratelimit.Named("apart"))
	mustTake(t, s, p, 0, "warm") // loads the script before the hook holds anything
	const calls = maxMulti + 8
	h := &holdHook{release: make(chan struct{}), held: make(chan struct{})}
	first := runSize(calls) // the first run's calls, in the order they queued
	client.AddHook(h)

	answered := make([]chan ratelimit.Decision, calls)
	for i := range answered {
		answered[i] = make(chan ratelimit.Decision, 1)
	}
	batch := enqueue(t, s, calls, func(i int) {
		d, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"ip:" + strconv.Itoa(i)}, Cost: 1})
		if err != nil {
			t.Error(err)
		}
		answered[i] <- d
	})
	sent := make(chan struct{})
	go func() {
		s.batch.send(batch)
		close(sent)
	}()
	deadline := time.After(10 * time.Second)
	select {
	case <-h.held:
	case <-deadline:
		close(h.release)
		t.Fatal("no second pipeline carried a run: the batch's runs went on one")
	}
	for i := range first {
		select {
		case d := <-answered[i]:
			if !d.Allowed {
				t.Errorf("step %d: call of the first run denied: %+v", i, d)
			}
		case <-deadline:
			close(h.release)
			t.Fatalf("step %d: a call of the first run had no answer while the second run was on the wire", i)
		}
	}
	close(h.release)
	<-sent
	for i := first; i < calls; i++ {
		if d := <-answered[i]; !d.Allowed {
			t.Errorf("step %d: call of the second run denied: %+v", i, d)
		}
	}
}

// TestRunSizeEven pins how a script's calls of one batch are cut into
// runs: as few as maxMulti allows, of even size.
func TestRunSizeEven(t *testing.T) {
	cases := []struct{ calls, size int }{
		{1, 1}, {2, 2}, {maxMulti, maxMulti}, {maxMulti + 1, maxMulti/2 + 1},
		{maxMulti + 8, maxMulti/2 + 4}, {2 * maxMulti, maxMulti}, {2*maxMulti + 1, (2*maxMulti + 3) / 3}, {maxBatch, maxMulti},
	}
	for step, c := range cases {
		size := runSize(c.calls)
		if size != c.size || size > maxMulti {
			t.Errorf("step %d: %d calls go in runs of %d, want %d (at most %d)", step, c.calls, size, c.size, maxMulti)
		}
	}
}
