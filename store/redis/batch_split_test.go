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

// holdHook holds every pipeline that carries a run of at most small calls
// until release closes.
type holdHook struct {
	small   int
	release chan struct{}
	held    chan struct{} // closed when the first such pipeline is held
	once    sync.Once
}

func (h *holdHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *holdHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (h *holdHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if ids, op, _ := callIDs(c); (op == opAlike || op == opMulti) && len(ids) <= h.small {
				h.once.Do(func() { close(h.held) })
				<-h.release
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestBatchAnswersEachRunApart: a batch of more calls than a run holds
// goes as runs on pipelines of their own, so the callers of the first run
// have their answers while the second run is still on the wire (here, held
// there until they do). One pipeline for both would hold them all: the
// test would then fail at its deadline.
func TestBatchAnswersEachRunApart(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(1))
	p := ratelimit.MustParsePolicy("100/h", ratelimit.Named("apart"))
	mustTake(t, s, p, 0, "warm") // loads the script before the hook holds anything
	const calls = maxMulti + 8
	h := &holdHook{small: calls - maxMulti, release: make(chan struct{}), held: make(chan struct{})}
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
		t.Fatal("the second run was never sent")
	}
	for i := range maxMulti {
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
	for i := maxMulti; i < calls; i++ {
		if d := <-answered[i]; !d.Allowed {
			t.Errorf("step %d: call of the second run denied: %+v", i, d)
		}
	}
}
