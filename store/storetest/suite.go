package storetest

import (
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// Harness describes the store under test.
type Harness struct {
	// New returns a store that reads now() for the time and holds no
	// counters yet: a new store, or a new namespace (key prefix) of one,
	// on each call. Required.
	New func(t *testing.T, now func() time.Time) ratelimit.Store
	// SetTime, when set, is called with every time the suite moves its
	// clock to, for stores that also need to be told (a Redis whose keys
	// expire on the test's clock, such as miniredis with FastForward).
	SetTime func(time.Time)
	// Marks reports that the store's receipts carry the memory store's
	// marks (the Redis store of this module), so Equivalence compares
	// them too.
	Marks bool
	// Cached reports a store that answers some denials from a cache of
	// earlier ones (store/denycache): Equivalence then requires the same
	// admissions, grants and delays, and the same RetryAfter for requests
	// of one key, rather than every field.
	Cached bool
	// OneKey replays requests of one key only: a store that charges
	// requests of several keys in parts by design (a Redis Cluster whose
	// keys live on several masters) is held to the reference one key at a
	// time.
	OneKey bool
	// Traces is how many random traces a check replays per algorithm; 0
	// means RATELIMIT_TRACES, else 100 with RATELIMIT_FULL=1 and 10
	// without.
	Traces int
	// Sequential keeps the suite's own goroutines to one: for stores that
	// are slow under contention (a scripted Redis under the race
	// detector), the concurrency scenarios use fewer goroutines.
	Sequential bool
}

// Run runs every check of the suite on h's store, each as a subtest.
func Run(t *testing.T, h Harness) {
	t.Run("Equivalence", func(t *testing.T) { Equivalence(t, h) })
	t.Run("Guarantees", func(t *testing.T) { Guarantees(t, h) })
	t.Run("Scenarios", func(t *testing.T) { Scenarios(t, h) })
	t.Run("Slots", func(t *testing.T) { Slots(t, h) })
}

// fullTraces and quickTraces are how many random traces a check replays
// per algorithm by default: with RATELIMIT_FULL=1 (as the module's CI
// runs), and without it (a plain go test ./..., the memory store's checks
// in about a second and the Redis stores' in several).
const (
	fullTraces  = 100
	quickTraces = 10
)

// traces returns how many random traces to replay per algorithm.
func (h Harness) traces(t *testing.T) int {
	if h.Traces > 0 {
		return h.Traces
	}
	if s := os.Getenv("RATELIMIT_TRACES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("RATELIMIT_TRACES=%q: want a positive number", s)
		}
		return n
	}
	return testmode.Scale(fullTraces, quickTraces)
}

// store returns a new store of h on clk, with the clock moves forwarded
// to SetTime.
func (h Harness) store(t *testing.T, clk *clock) ratelimit.Store {
	t.Helper()
	if h.New == nil {
		t.Fatal("storetest: Harness.New is nil")
	}
	clk.hook = h.SetTime
	return h.New(t, clk.Now)
}

// start returns a new store of h on a clock of its own, set to t0.
func (h Harness) start(t *testing.T) (ratelimit.Store, *clock) {
	t.Helper()
	clk := &clock{}
	clk.Set(t0)
	return h.store(t, clk), clk
}

// reference returns the memory store on clk: the executable reference.
func reference(clk *clock) ratelimit.Store { return memory.New(memory.WithClock(clk.Now)) }

// capabilities are the optional operations a store implements.
type capabilities struct {
	reserve, upTo, refund, reset, settle, slots, lease bool
}

func capsOf(s ratelimit.Store) capabilities {
	_, reserve := s.(storekit.Reserver)
	_, upTo := s.(storekit.Granter)
	_, refund := s.(storekit.Refunder)
	_, reset := s.(storekit.Resetter)
	_, settle := s.(storekit.Settler)
	_, slots := s.(storekit.Releaser)
	_, lease := s.(storekit.Leaser)
	return capabilities{reserve, upTo, refund, reset, settle, slots, lease}
}

// fit leaves out of a trace the operations the store lacks (they become
// plain takes, or are dropped) and, with oneKey, every key but the first.
func (c capabilities) fit(trace []step, oneKey bool) []step {
	out := trace[:0:0]
	for _, s := range trace {
		switch {
		case s.op == opReserve && !c.reserve, s.op == opUpTo && !c.upTo, s.op == opLease && !c.lease && !c.upTo:
			s.op = opTake
		case s.op == opLease && !c.lease:
			s.op = opUpTo
		case s.op == opRefund && !c.refund, s.op == opReset && !c.reset, s.op == opSettle && !c.settle,
			(s.op == opRelease || s.op == opRenew) && !c.slots:
			s.op = opTake
			if s.keys == nil {
				continue
			}
		}
		if oneKey && len(s.keys) > 1 {
			s.keys = s.keys[:1]
		}
		out = append(out, s)
	}
	return out
}

// prefixes numbers the namespaces a harness may give its stores.
var prefixes atomic.Int64

// Namespace returns a name no other call in this process returned, for a
// harness that gives each new store a key prefix of its own.
func Namespace() string { return "st" + strconv.FormatInt(prefixes.Add(1), 36) + ":" }
