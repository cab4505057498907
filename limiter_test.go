package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func TestLimiterNewRejects(t *testing.T) {
	p := ratelimit.MustParsePolicy("10/s, 100/m")
	mem := store.NewMemory()
	var nilMemory *store.Memory
	var nilFunc ratelimit.IdentifierFunc
	var nilHandler http.HandlerFunc
	tests := []struct {
		name  string
		store ratelimit.Store
		p     *ratelimit.Policy
		opts  []ratelimit.Option
		want  string
	}{
		{"nil store", nil, p, nil, "nil store"},
		{"typed nil store", nilMemory, p, nil, "nil store"},
		{"nil policy", mem, nil, nil, "nil policy"},
		{"nil option", mem, p, []ratelimit.Option{nil}, "option 0 is nil"},
		{"no identifiers", mem, p, []ratelimit.Option{ratelimit.WithIdentifiers()}, "no identifiers"},
		{"nil identifier", mem, p, []ratelimit.Option{ratelimit.WithIdentifiers(nil)}, "identifier 0 is nil"},
		{"nil identifier func", mem, p, []ratelimit.Option{ratelimit.WithIdentifiers(ratelimit.IdentifierFunc(func(*http.Request) (string, bool) { return "", false }), nilFunc)}, "identifier 1 is nil"},
		{"nil policy func", mem, p, []ratelimit.Option{ratelimit.WithPolicyFunc(nil)}, "WithPolicyFunc: nil"},
		{"negative cost", mem, p, []ratelimit.Option{ratelimit.WithCost(-1)}, "WithCost(-1)"},
		{"cost above capacity", mem, p, []ratelimit.Option{ratelimit.WithCost(11)}, "above the capacity 10"},
		{"nil cost func", mem, p, []ratelimit.Option{ratelimit.WithCostFunc(nil)}, "WithCostFunc: nil"},
		{"cost and cost func", mem, p, []ratelimit.Option{ratelimit.WithCost(2), ratelimit.WithCostFunc(func(*http.Request) int64 { return 1 })}, "exclusive"},
		{"unknown failure mode", mem, p, []ratelimit.Option{ratelimit.WithFailureMode(9)}, "unknown failure mode 9"},
		{"nil fallback", mem, p, []ratelimit.Option{ratelimit.WithFallback(nil)}, "WithFallback: nil store"},
		{"typed nil fallback", mem, p, []ratelimit.Option{ratelimit.WithFallback(nilMemory)}, "WithFallback: nil store"},
		{"fallback is the store", mem, p, []ratelimit.Option{ratelimit.WithFallback(mem)}, "the store itself"},
		{"zero timeout", mem, p, []ratelimit.Option{ratelimit.WithTimeout(0)}, "WithTimeout(0s)"},
		{"negative timeout", mem, p, []ratelimit.Option{ratelimit.WithTimeout(-time.Second)}, "must be positive"},
		{"nil error hook", mem, p, []ratelimit.Option{ratelimit.WithErrorHook(nil)}, "WithErrorHook: nil"},
		{"nil logger", mem, p, []ratelimit.Option{ratelimit.WithLogger(nil)}, "WithLogger: nil"},
		{"nil denied handler", mem, p, []ratelimit.Option{ratelimit.WithDeniedHandler(nil)}, "WithDeniedHandler: nil"},
		{"typed nil denied handler", mem, p, []ratelimit.Option{ratelimit.WithDeniedHandler(nilHandler)}, "WithDeniedHandler: nil"},
		{"nil decision hook", mem, p, []ratelimit.Option{ratelimit.WithDecisionHook(nil)}, "WithDecisionHook: nil"},
		{"unknown header style", mem, p, []ratelimit.Option{ratelimit.WithHeaders(ratelimit.HeadersIETF | 64)}, "WithHeaders(65): unknown header style"},
		{"first error wins", mem, p, []ratelimit.Option{ratelimit.WithTimeout(0), ratelimit.WithCost(-1)}, "WithTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := ratelimit.New(tt.store, tt.p, tt.opts...)
			if err == nil || l != nil {
				t.Fatalf("New = %v, %v; want an error", l, err)
			}
			if !strings.HasPrefix(err.Error(), "ratelimit: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want the prefix \"ratelimit: \" and %q", err, tt.want)
			}
		})
	}
}

func TestLimiterNewAccepts(t *testing.T) {
	p := ratelimit.MustParsePolicy("10/s")
	ip, err := ratelimit.ByIP()
	if err != nil {
		t.Fatal(err)
	}
	opts := []ratelimit.Option{
		ratelimit.WithIdentifiers(ip),
		ratelimit.WithPolicyFunc(func(*http.Request) *ratelimit.Policy { return nil }),
		ratelimit.WithCost(0),
		ratelimit.WithCost(10),
		ratelimit.WithFailureMode(ratelimit.FailClosed),
		ratelimit.WithFallback(store.NewMemory()),
		ratelimit.WithTimeout(time.Nanosecond),
		ratelimit.WithErrorHook(func(*http.Request, error) {}),
		ratelimit.WithLogger(discardLogger),
		ratelimit.WithDeniedHandler(ratelimit.DefaultDeniedHandler()),
		ratelimit.WithDecisionHook(func(*http.Request, ratelimit.Result) {}),
		ratelimit.WithDryRun(true),
		ratelimit.WithHeaders(ratelimit.HeadersNone),
	}
	if _, err := ratelimit.New(store.NewMemory(), p, opts...); err != nil {
		t.Fatalf("New: %v", err)
	}
	// A nil *IPIdentifier means ByIP(), so it is not rejected as nil.
	var nilIP *ratelimit.IPIdentifier
	lim, err := ratelimit.New(store.NewMemory(), p, ratelimit.WithIdentifiers(nilIP))
	if err != nil {
		t.Fatalf("New with a nil *IPIdentifier: %v", err)
	}
	var res ratelimit.Result
	lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ = ratelimit.FromContext(r.Context())
	})).ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	if len(res.Keys) != 1 || res.Keys[0] != "ip:203.0.113.7" {
		t.Errorf("keys %q, want the client IP's", res.Keys)
	}
}

func TestHandlerPanicsOnNilNext(t *testing.T) {
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/s"))
	defer func() {
		if recover() == nil {
			t.Error("Handler(nil) did not panic")
		}
	}()
	lim.Handler(nil)
}

func TestAllowN(t *testing.T) {
	clk := newTestClock()
	st := store.NewMemory(store.WithClock(clk.Now))
	var h hookRecorder
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("5/m"), ratelimit.WithDecisionHook(h.onDecision))
	ctx := context.Background()
	steps := []struct {
		advance       time.Duration
		cost          int64
		keys          []string
		wantAllowed   bool
		wantRemaining int64
	}{
		{0, 2, []string{"job:a"}, true, 3},
		{0, 3, []string{"job:a"}, true, 0},
		{0, 1, []string{"job:a"}, false, 0},
		{0, 0, []string{"job:a"}, false, 0}, // peek: a cost of 1 would be denied
		{0, 1, []string{"job:b"}, true, 4},
		{0, 1, []string{"job:b", "job:a"}, false, 0}, // a is spent, so b is not charged
		{0, 1, []string{"job:b", "job:b"}, true, 3},  // a repeated key counts once
		{0, 6, []string{"job:c"}, false, 5},          // above capacity: never
		{2 * time.Minute, 1, []string{"job:a"}, true, 4},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		d, err := lim.AllowN(ctx, s.cost, s.keys...)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != s.wantAllowed || d.Remaining != s.wantRemaining {
			t.Errorf("step %d: allowed %v, remaining %d; want %v, %d", i, d.Allowed, d.Remaining, s.wantAllowed, s.wantRemaining)
		}
		if s.cost > 5 && d.RetryAfter != ratelimit.Never {
			t.Errorf("step %d: RetryAfter %v, want Never", i, d.RetryAfter)
		}
		if res := h.last(); res.Cost != s.cost || res.Decision.Allowed != d.Allowed || res.DryRun {
			t.Errorf("step %d: decision hook saw %+v", i, res)
		}
	}
	if d, err := lim.Allow(ctx, "job:a"); err != nil || !d.Allowed || d.Remaining != 3 {
		t.Errorf("Allow = %+v, %v; want allowed with 3 remaining", d, err)
	}
}

func TestAllowNRejectsArguments(t *testing.T) {
	rec := &recStore{}
	var h hookRecorder
	lim := newLimiter(t, rec, ratelimit.MustParsePolicy("5/m"), h.options()...)
	tests := []struct {
		name string
		cost int64
		keys []string
		want string
	}{
		{"negative cost", -1, []string{"a"}, "negative cost"},
		{"no keys", 1, nil, "no keys"},
		{"empty key", 1, []string{"a", ""}, "key 1 is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := lim.AllowN(context.Background(), tt.cost, tt.keys...)
			if err == nil || !strings.Contains(err.Error(), tt.want) || d.Allowed {
				t.Errorf("AllowN = %+v, %v; want an error with %q", d, err, tt.want)
			}
		})
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("store asked %d times", n)
	}
	if len(h.errors()) != 0 || len(h.results) != 0 {
		t.Errorf("hooks called for invalid arguments")
	}
}

func TestAllowNStoreFailure(t *testing.T) {
	tests := []struct {
		name        string
		store       ratelimit.Store
		opts        []ratelimit.Option
		ctx         func() context.Context
		wantAllowed bool
		wantRetry   time.Duration
		wantErr     error
		wantHooks   int
	}{
		{name: "fail open", store: &failStore{err: errBoom},
			wantAllowed: true, wantErr: errBoom, wantHooks: 1},
		{name: "fail closed", store: &failStore{err: errBoom}, opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)},
			wantRetry: time.Second, wantErr: errBoom, wantHooks: 1},
		{name: "fallback decides", store: &failStore{err: errBoom}, opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithFallback(&recStore{})},
			wantAllowed: true, wantErr: nil, wantHooks: 1},
		{name: "fallback fails too", store: &failStore{err: errBoom}, opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithFallback(&failStore{err: io.ErrUnexpectedEOF})},
			wantRetry: time.Second, wantErr: io.ErrUnexpectedEOF, wantHooks: 2},
		{name: "timeout", store: &blockStore{}, opts: []ratelimit.Option{ratelimit.WithTimeout(time.Millisecond), ratelimit.WithFailureMode(ratelimit.FailClosed)},
			wantRetry: time.Second, wantErr: context.DeadlineExceeded, wantHooks: 1},
		// A canceled ctx does not decide: the store gets its own timeout
		// (it times out here), then the fallback decides.
		{name: "caller gone", store: &blockStore{}, opts: []ratelimit.Option{ratelimit.WithFallback(&recStore{}), ratelimit.WithTimeout(20 * time.Millisecond)},
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			wantAllowed: true, wantErr: nil, wantHooks: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h hookRecorder
			lim := newLimiter(t, tt.store, ratelimit.MustParsePolicy("5/m"), append(append(h.options(), ratelimit.WithLogger(discardLogger)), tt.opts...)...)
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			var d ratelimit.Decision
			var err error
			returnsWithin(t, func() { d, err = lim.Allow(ctx, "job:a") })
			if (err == nil) != (tt.wantErr == nil) || !errors.Is(err, tt.wantErr) || d.Allowed != tt.wantAllowed || d.RetryAfter != tt.wantRetry {
				t.Errorf("Allow = %+v, %v; want allowed %v, RetryAfter %v, error %v", d, err, tt.wantAllowed, tt.wantRetry, tt.wantErr)
			}
			errs := h.errors()
			if len(errs) != tt.wantHooks {
				t.Fatalf("error hook calls %d, want %d", len(errs), tt.wantHooks)
			}
			for _, r := range h.errReqs {
				if r != nil {
					t.Error("error hook got a request from AllowN")
				}
			}
			if res := h.last(); !errors.Is(res.Err, tt.wantErr) {
				t.Errorf("decision hook Result.Err %v, want %v", res.Err, tt.wantErr)
			}
		})
	}
}

func TestAllowNilContext(t *testing.T) {
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/s"))
	var nilCtx context.Context // a nil context must not panic
	if d, err := lim.Allow(nilCtx, "a"); err != nil || !d.Allowed {
		t.Errorf("Allow(nil ctx) = %+v, %v", d, err)
	}
}
