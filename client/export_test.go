package client

import (
	"net/http"
	"sort"
	"sync"
	"time"
)

// Hooks for the tests of package client_test: a clock they drive, and a
// look at the budgets.

// WithClock makes the transport read the time from c and wait on its
// timers.
func WithClock(c *FakeClock) Option { return func(cfg *config) { cfg.clock = c } }

// FakeClock is a clock that moves only when told.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	added  chan struct{} // closed and replaced when a timer is added
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, added: make(chan struct{})}
}

func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *FakeClock) TimerAt(at time.Time) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: at, c: make(chan time.Time, 1)}
	if !at.After(c.now) {
		t.c <- c.now
		return t.c, func() bool { return false }
	}
	c.timers = append(c.timers, t)
	close(c.added)
	c.added = make(chan struct{})
	return t.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.timers {
			if x == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Advance moves the clock by d and fires the timers due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fire()
}

// AdvanceToNextTimer moves the clock to the earliest pending timer, if any,
// and fires the timers due; it reports whether there was one.
func (c *FakeClock) AdvanceToNextTimer() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return false
	}
	sort.Slice(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	if next := c.timers[0].at; next.After(c.now) {
		c.now = next
	}
	c.fire()
	return true
}

func (c *FakeClock) fire() {
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.c <- c.now
	}
	c.timers = kept
}

// Timers returns how many timers are pending.
func (c *FakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// AwaitTimers waits, up to a real-time bound, until at least n timers are
// pending (goroutines are blocked waiting for the clock); it reports
// whether they are.
func (c *FakeClock) AwaitTimers(n int, within time.Duration) bool {
	deadline := time.After(within)
	for {
		c.mu.Lock()
		pending, added := len(c.timers), c.added
		c.mu.Unlock()
		if pending >= n {
			return true
		}
		select {
		case <-added:
		case <-deadline:
			return false
		}
	}
}

// Budget is a look at one budget.
type Budget struct {
	Known    bool
	Rem      int64
	Resume   time.Time
	InFlight int
	Probing  bool
}

// BudgetOf returns the budget of policy key at host ("http://127.0.0.1:80").
func BudgetOf(rt http.RoundTripper, hostKey, key string) (Budget, bool) {
	t := rt.(*transport)
	t.mu.Lock()
	h := t.hosts[hostKey]
	t.mu.Unlock()
	if h == nil {
		return Budget{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.budgets[key]
	if b == nil {
		return Budget{}, false
	}
	return Budget{Known: b.known, Rem: b.rem, Resume: b.resume, InFlight: len(b.inflight), Probing: b.probe != 0}, true
}

// Hosts is how many hosts the transport rt (NewTransport's) keeps state
// for.
func Hosts(rt http.RoundTripper) int {
	t := rt.(*transport)
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.hosts)
}
