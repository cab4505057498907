package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
)

// TestSplitRunsApart pins how a batch's commands share pipelines: its
// first run on one of its own, everything else on another; a batch with
// no run (a Cluster master's) or of one command stays one pipeline.
func TestSplitRunsApart(t *testing.T) {
	run := func(name string) *wire { return &wire{args: []any{name}, run: true} }
	single := func(name string) *wire { return &wire{args: []any{name}} }
	cases := []struct {
		wires       []*wire
		first, rest []string
	}{
		{[]*wire{run("r1")}, []string{"r1"}, nil},
		{[]*wire{single("s1")}, []string{"s1"}, nil},
		{[]*wire{single("s1"), single("s2"), single("s3")}, []string{"s1", "s2", "s3"}, nil},
		{[]*wire{run("r1"), run("r2")}, []string{"r1"}, []string{"r2"}},
		{[]*wire{single("s1"), run("r1"), single("s2"), run("r2")}, []string{"r1"}, []string{"s1", "s2", "r2"}},
		{[]*wire{run("r1"), run("r2"), run("r3"), single("s1")}, []string{"r1"}, []string{"r2", "r3", "s1"}},
	}
	names := func(ws []*wire) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.args[0].(string))
		}
		return out
	}
	for step, c := range cases {
		first, rest := split(c.wires)
		if fmt.Sprint(names(first)) != fmt.Sprint(c.first) || fmt.Sprint(names(rest)) != fmt.Sprint(c.rest) || (rest == nil) != (c.rest == nil) {
			t.Errorf("step %d: pipelines %v and %v, want %v and %v", step, names(first), names(rest), c.first, c.rest)
		}
	}
}

// holdHook holds every pipeline that carries a run without the key held
// (a run's keys are its calls'), until release closes.
type holdHook struct {
	key     string
	release chan struct{}
	held    chan struct{} // closed when a pipeline is first held
	once    sync.Once
}

func (h *holdHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *holdHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (h *holdHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if _, op, _ := callIDs(c); (op == opAlike || op == opMulti) && !slices.Contains(c.Args(), any(h.key)) {
				h.once.Do(func() { close(h.held) })
				<-h.release
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestBatchAnswersEachRunApart: a batch of more calls than a run holds
// goes as runs of even size (runSize), its first run on a pipeline of its
// own, so the callers of the first run have their answers while the
// second run is held on its way (here, until they do). One pipeline for
// both would hold them all.
func TestBatchAnswersEachRunApart(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(1))
	p := ratelimit.MustParsePolicy("100/h", ratelimit.Named("apart"))
	mustTake(t, s, p, 0, "warm") // loads the script before the hook holds anything
	const calls = maxMulti + 8
	first := runSize(calls) // the first run's calls, in the order they queued
	h := &holdHook{key: redisKey(s.prefix, p.ID(), "ip:0"), release: make(chan struct{}), held: make(chan struct{})}
	client.AddHook(h)

	answered := make([]chan ratelimit.Decision, calls)
	for i := range answered {
		answered[i] = make(chan ratelimit.Decision, 1)
	}
	errs := make(chan error, calls)
	batch := enqueue(t, s, calls, func(i int) {
		d, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"ip:" + strconv.Itoa(i)}, Cost: 1})
		if err != nil {
			errs <- err
		}
		answered[i] <- d
	})
	sent := make(chan struct{})
	go func() {
		s.batch.send(batch)
		close(sent)
	}()
	got := make([]ratelimit.Decision, calls)
	// fail lets the held run go and waits for the batch before failing
	// (the callers only write to buffered channels).
	fail := func(format string, args ...any) {
		close(h.release)
		<-sent
		t.Fatalf(format, args...)
	}
	deadline := time.After(10 * time.Second)
	select {
	case <-h.held:
	case <-deadline:
		fail("no pipeline carried a run without the first call: the batch's runs went on one")
	}
	for i := range first {
		select {
		case got[i] = <-answered[i]:
		case <-deadline:
			fail("step %d: a call of the first run had no answer while the second run was held", i)
		}
	}
	close(h.release)
	<-sent
	for i := first; i < calls; i++ {
		got[i] = <-answered[i]
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, d := range got {
		if !d.Allowed {
			t.Errorf("step %d: call denied: %+v", i, d)
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
