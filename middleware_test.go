package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func TestHandlerDefaults(t *testing.T) {
	st, clk := memoryStore()
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("2/m"))
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "first", req: getFrom(ipA), want: isAllowed},
		{name: "second", req: getFrom(ipA), want: isAllowed},
		{name: "third is denied", req: getFrom(ipA), want: isDenied},
		{name: "other IP has its own budget", req: getFrom(ipB), want: isAllowed},
		{name: "same IP, other port", req: getFrom("203.0.113.7:1"), want: isDenied},
		{name: "forwarded header not trusted", req: getFrom(ipA, "X-Forwarded-For", "192.0.2.1"), want: isDenied},
		{name: "much later", advance: 2 * time.Minute, req: getFrom(ipA), want: isAllowed},
	})
}

func TestHandlerRouters(t *testing.T) {
	routers := []struct {
		name  string
		build func(lim *ratelimit.Limiter) http.Handler
	}{
		{"chi With", func(lim *ratelimit.Limiter) http.Handler {
			r := chi.NewRouter()
			r.With(lim.Handler).Get("/limited", okHandler)
			r.Get("/free", okHandler)
			return r
		}},
		{"chi Use in Group", func(lim *ratelimit.Limiter) http.Handler {
			r := chi.NewRouter()
			r.Group(func(r chi.Router) {
				r.Use(lim.Handler)
				r.Get("/limited", okHandler)
			})
			r.Get("/free", okHandler)
			return r
		}},
		{"ServeMux", func(lim *ratelimit.Limiter) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /limited", lim.Handler(okHandler))
			mux.Handle("GET /free", okHandler)
			return mux
		}},
		{"whole ServeMux wrapped", func(lim *ratelimit.Limiter) http.Handler {
			limited := http.NewServeMux()
			limited.Handle("GET /limited", okHandler)
			mux := http.NewServeMux()
			mux.Handle("/limited", lim.Handler(limited))
			mux.Handle("GET /free", okHandler)
			return mux
		}},
	}
	for _, rt := range routers {
		t.Run(rt.name, func(t *testing.T) {
			st, clk := memoryStore()
			h := rt.build(newLimiter(t, st, ratelimit.MustParsePolicy("1/s")))
			at := func(path string) *http.Request {
				r := getFrom(ipA)
				r.URL.Path = path
				return r
			}
			runSteps(t, h, clk, []step{
				{name: "limited", req: at("/limited"), want: isAllowed},
				{name: "limited again", req: at("/limited"), want: isDenied},
				{name: "free route", req: at("/free"), want: isUnlimited},
				{name: "much later", advance: 2 * time.Second, req: at("/limited"), want: isAllowed},
			})
		})
	}
}

func TestHandlerIdentifiers(t *testing.T) {
	user := ratelimit.ByUser(func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-Test-User")
		return u, u != ""
	})
	same := ratelimit.IdentifierFunc(func(*http.Request) (string, bool) { return "same", true })
	empty := ratelimit.IdentifierFunc(func(*http.Request) (string, bool) { return "", true })
	tests := []struct {
		name     string
		ids      []ratelimit.Identifier
		req      *http.Request
		wantKeys []int // number of keys of each store call
		want     []check
	}{
		{"IP and API key in one call", []ratelimit.Identifier{ratelimit.ByIP(), ratelimit.ByHeader("X-API-Key")},
			getFrom(ipA, "X-API-Key", "secret"), []int{2}, isAllowed},
		{"no API key: IP only", []ratelimit.Identifier{ratelimit.ByIP(), ratelimit.ByHeader("X-API-Key")},
			getFrom(ipA), []int{1}, isAllowed},
		{"anonymous user skipped", []ratelimit.Identifier{user, ratelimit.ByIP()},
			getFrom(ipA), []int{1}, isAllowed},
		{"user and IP", []ratelimit.Identifier{user, ratelimit.ByIP()},
			getFrom(ipA, "X-Test-User", "42"), []int{2}, isAllowed},
		{"none applies: unlimited", []ratelimit.Identifier{user},
			getFrom(ipA), nil, isUnlimited},
		{"empty key skipped", []ratelimit.Identifier{empty},
			getFrom(ipA), nil, isUnlimited},
		{"duplicate keys merged", []ratelimit.Identifier{same, same},
			getFrom(ipA), []int{1}, isAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recStore{}
			var h hookRecorder
			var inNext bool
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, inNext = ratelimit.FromContext(r.Context())
				okHandler(w, r)
			})
			lim := newLimiter(t, rec, ratelimit.MustParsePolicy("10/s"),
				append(h.options(), ratelimit.WithIdentifiers(tt.ids...))...)
			w := httptest.NewRecorder()
			lim.Handler(next).ServeHTTP(w, tt.req)
			for _, c := range tt.want {
				c(t, w)
			}
			reqs := rec.requests()
			var got []int
			for _, r := range reqs {
				got = append(got, len(r.Keys))
			}
			if !slices.Equal(got, tt.wantKeys) {
				t.Fatalf("store calls with %v keys, want %v (requests %+v)", got, tt.wantKeys, reqs)
			}
			if len(reqs) == 0 {
				if inNext || len(h.results) != 0 {
					t.Errorf("unlimited request: Result in context %v, decision hook calls %d; want none", inNext, len(h.results))
				}
				return
			}
			if !inNext {
				t.Error("next handler: no Result in context")
			}
			if res := h.last(); !slices.Equal(res.Keys, reqs[0].Keys) {
				t.Errorf("Result.Keys %q, store saw %q", res.Keys, reqs[0].Keys)
			}
		})
	}
}

// TestHandlerIdentifiersShareOneCall pins that every key is limited: the
// API key's budget is spent from two IPs, and then neither gets through.
func TestHandlerIdentifiersShareOneCall(t *testing.T) {
	st, clk := memoryStore()
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("2/m"),
		ratelimit.WithIdentifiers(ratelimit.ByIP(), ratelimit.ByHeader("X-API-Key")))
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "key k from A", req: getFrom(ipA, "X-API-Key", "k"), want: isAllowed},
		{name: "key k from B", req: getFrom(ipB, "X-API-Key", "k"), want: isAllowed},
		{name: "key k spent", req: getFrom(ipA, "X-API-Key", "k"), want: isDenied},
		{name: "A without key still has 1", req: getFrom(ipA), want: isAllowed},
		{name: "A spent", req: getFrom(ipA), want: isDenied},
		{name: "other key from A: A spent", req: getFrom(ipA, "X-API-Key", "other"), want: isDenied},
	})
}

func TestHandlerPolicyFunc(t *testing.T) {
	free := ratelimit.MustParsePolicy("1/m", ratelimit.Named("free"))
	pro := ratelimit.MustParsePolicy("3/m", ratelimit.Named("pro"))
	byPlan := ratelimit.WithPolicyFunc(func(r *http.Request) *ratelimit.Policy {
		if r.Header.Get("X-Plan") == "pro" {
			return pro
		}
		return nil // the default: free
	})
	st, clk := memoryStore()
	var h hookRecorder
	lim := newLimiter(t, st, free, byPlan, ratelimit.WithDecisionHook(h.onDecision))
	policyIs := func(want *ratelimit.Policy) check {
		return func(t *testing.T, _ *httptest.ResponseRecorder) {
			t.Helper()
			if got := h.last().Policy; got != want {
				t.Errorf("policy %v, want %v", got.Name(), want.Name())
			}
		}
	}
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "free", req: getFrom(ipA), want: append(isAllowed, policyIs(free))},
		{name: "free spent", req: getFrom(ipA), want: append(isDenied, policyIs(free))},
		{name: "pro 1", req: getFrom(ipB, "X-Plan", "pro"), want: append(isAllowed, policyIs(pro))},
		{name: "pro 2", req: getFrom(ipB, "X-Plan", "pro"), want: isAllowed},
		{name: "pro 3", req: getFrom(ipB, "X-Plan", "pro"), want: isAllowed},
		{name: "pro spent", req: getFrom(ipB, "X-Plan", "pro"), want: append(isDenied, policyIs(pro))},
		{name: "policies count apart", req: getFrom(ipA, "X-Plan", "pro"), want: isAllowed},
	})
}

func TestHandlerCost(t *testing.T) {
	weight := func(r *http.Request) int64 {
		n, _ := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
		return n
	}
	remainingIs := func(h *hookRecorder, want int64) check {
		return func(t *testing.T, _ *httptest.ResponseRecorder) {
			t.Helper()
			if got := h.last().Decision.Remaining; got != want {
				t.Errorf("remaining %d, want %d", got, want)
			}
		}
	}
	costIs := func(h *hookRecorder, want int64) check {
		return func(t *testing.T, _ *httptest.ResponseRecorder) {
			t.Helper()
			if got := h.last().Cost; got != want {
				t.Errorf("cost %d, want %d", got, want)
			}
		}
	}
	peek := []check{hasStatus(http.StatusOK), hasBody("ok"), hasHeaderSet("RateLimit"), hasNoHeader("Retry-After"), hasNoHeader("Cache-Control")}
	t.Run("fixed", func(t *testing.T) {
		st, clk := memoryStore()
		var h hookRecorder
		lim := newLimiter(t, st, ratelimit.MustParsePolicy("5/m"), ratelimit.WithCost(2), ratelimit.WithDecisionHook(h.onDecision))
		runSteps(t, lim.Handler(okHandler), clk, []step{
			{name: "2 of 5", req: getFrom(ipA), want: append(isAllowed, costIs(&h, 2))},
			{name: "4 of 5", req: getFrom(ipA), want: isAllowed},
			{name: "6 of 5", req: getFrom(ipA), want: isDenied},
		})
	})
	t.Run("zero", func(t *testing.T) {
		rec := &recStore{answer: func(ratelimit.Request) ratelimit.Decision {
			return ratelimit.Decision{RetryAfter: time.Second, Limits: []ratelimit.LimitStatus{{RetryAfter: time.Second, ResetAfter: time.Second}}}
		}}
		lim := newLimiter(t, rec, ratelimit.MustParsePolicy("5/m"), ratelimit.WithCost(0))
		runSteps(t, lim.Handler(okHandler), nil, []step{
			{name: "store says no, cost 0 passes with headers", req: getFrom(ipA), want: peek},
		})
		if reqs := rec.requests(); len(reqs) != 1 || reqs[0].Cost != 0 {
			t.Errorf("store requests %+v, want one of cost 0", reqs)
		}
	})
	t.Run("func", func(t *testing.T) {
		st, clk := memoryStore()
		var h hookRecorder
		lim := newLimiter(t, st, ratelimit.MustParsePolicy("5/m"), ratelimit.WithCostFunc(weight), ratelimit.WithDecisionHook(h.onDecision))
		runSteps(t, lim.Handler(okHandler), clk, []step{
			{name: "cost 3", req: getFrom(ipA, "X-Cost", "3"), want: append(isAllowed, costIs(&h, 3), remainingIs(&h, 2))},
			{name: "cost 3 does not fit", req: getFrom(ipA, "X-Cost", "3"), want: append(isDenied, costIs(&h, 3))},
			{name: "cost 2 fits", req: getFrom(ipA, "X-Cost", "2"), want: append(isAllowed, costIs(&h, 2))},
			{name: "negative counts as 0", req: getFrom(ipA, "X-Cost", "-7"), want: append(peek, costIs(&h, 0))},
			{name: "cost 0 when spent", req: getFrom(ipA, "X-Cost", "0"), want: append(peek, costIs(&h, 0))},
			{name: "cost 1 when spent", req: getFrom(ipA, "X-Cost", "1"), want: isDenied},
			{name: "above capacity: 429 without Retry-After", advance: time.Hour, req: getFrom(ipA, "X-Cost", "6"),
				want: []check{hasStatus(http.StatusTooManyRequests), hasNoHeader("Retry-After"), hasHeader("Cache-Control", "no-store"), hasHeaderSet("RateLimit")}},
			{name: "above capacity charged nothing", req: getFrom(ipA, "X-Cost", "5"), want: isAllowed},
		})
	})
}

func TestHandlerTwoLimitersShareStore(t *testing.T) {
	st, clk := memoryStore()
	p := ratelimit.MustParsePolicy("3/m")
	a := newLimiter(t, st, p).Handler(okHandler)
	b := newLimiter(t, st, ratelimit.MustParsePolicy("3/m")).Handler(okHandler) // same definition, same counters
	runSteps(t, a, clk, []step{{name: "a", req: getFrom(ipA), want: isAllowed}})
	runSteps(t, b, clk, []step{{name: "b", req: getFrom(ipA), want: isAllowed}})
	runSteps(t, a, clk, []step{{name: "a", req: getFrom(ipA), want: isAllowed}})
	runSteps(t, b, clk, []step{{name: "b spent", req: getFrom(ipA), want: isDenied}})
	runSteps(t, a, clk, []step{{name: "a spent", req: getFrom(ipA), want: isDenied}})
}

func TestHandlerDryRun(t *testing.T) {
	st, clk := memoryStore()
	var h hookRecorder
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("1/m"), ratelimit.WithDryRun(true), ratelimit.WithDecisionHook(h.onDecision))
	reported := func(allowed bool) check {
		return func(t *testing.T, _ *httptest.ResponseRecorder) {
			t.Helper()
			res := h.last()
			if !res.DryRun || res.Decision.Allowed != allowed {
				t.Errorf("Result DryRun %v, Allowed %v; want true, %v", res.DryRun, res.Decision.Allowed, allowed)
			}
		}
	}
	servedButDenied := []check{hasStatus(http.StatusOK), hasBody("ok"), hasHeaderSet("Retry-After"), hasNoHeader("Cache-Control"), headersMatch(&h, ratelimit.HeadersIETF), reported(false)}
	srv := lim.Handler(okHandler)
	runSteps(t, srv, clk, []step{
		{name: "allowed", req: getFrom(ipA), want: append(isAllowed, reported(true))},
		{name: "would be denied", req: getFrom(ipA), want: servedButDenied},
		{name: "still served", req: getFrom(ipA), want: servedButDenied},
	})
	// Had the served denials been charged, waiting their RetryAfter
	// would not be enough.
	runSteps(t, srv, clk, []step{
		{name: "after RetryAfter", advance: h.last().Decision.RetryAfter, req: getFrom(ipA), want: append(isAllowed, reported(true))},
	})
}

func TestHandlerHeaderStyles(t *testing.T) {
	styles := []struct {
		name  string
		style ratelimit.HeaderStyle
	}{
		{"IETF", ratelimit.HeadersIETF},
		{"draft 06", ratelimit.HeadersDraft06},
		{"X-RateLimit", ratelimit.HeadersXRateLimit},
		{"IETF and X-RateLimit", ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit},
		{"none", ratelimit.HeadersNone},
	}
	for _, tc := range styles {
		style := tc.style
		t.Run(tc.name, func(t *testing.T) {
			st, clk := memoryStore()
			var h hookRecorder
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("1/m"), ratelimit.WithHeaders(style), ratelimit.WithDecisionHook(h.onDecision))
			deniedWant := []check{hasStatus(http.StatusTooManyRequests), hasHeader("Cache-Control", "no-store"), headersMatch(&h, style)}
			if style == ratelimit.HeadersNone {
				deniedWant = append(deniedWant, hasNoHeader("Retry-After"))
			} else {
				deniedWant = append(deniedWant, hasHeaderSet("Retry-After"))
			}
			runSteps(t, lim.Handler(okHandler), clk, []step{
				{name: "allowed", req: getFrom(ipA), want: []check{hasStatus(http.StatusOK), headersMatch(&h, style)}},
				{name: "denied", req: getFrom(ipA), want: deniedWant},
			})
		})
	}
}

func TestHandlerResultInContext(t *testing.T) {
	rec := &recStore{}
	p := ratelimit.MustParsePolicy("10/s")
	var got ratelimit.Result
	var found bool
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, found = ratelimit.FromContext(r.Context()) })
	lim := newLimiter(t, rec, p, ratelimit.WithCost(3))
	lim.Handler(next).ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	if !found || got.Policy != p || got.Cost != 3 || len(got.Keys) != 1 || !strings.Contains(got.Keys[0], "203.0.113.7") ||
		!got.Decision.Allowed || got.Err != nil || got.DryRun {
		t.Errorf("FromContext = %+v, %v", got, found)
	}
	if reqs := rec.requests(); len(reqs) != 1 || reqs[0].Policy != p || reqs[0].Cost != 3 || !slices.Equal(reqs[0].Keys, got.Keys) {
		t.Errorf("store requests %+v", reqs)
	}
}

func TestHandlerDecisionHook(t *testing.T) {
	st, clk := memoryStore()
	var h hookRecorder
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("1/m"), ratelimit.WithDecisionHook(h.onDecision))
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "allowed", req: getFrom(ipA), want: isAllowed},
		{name: "denied", req: getFrom(ipA), want: isDenied},
	})
	if len(h.results) != 2 || !h.results[0].Decision.Allowed || h.results[1].Decision.Allowed {
		t.Errorf("hook saw %+v, want an allowed and a denied decision", h.results)
	}
}

// TestHandlerConcurrent pins that concurrent requests never get more than
// the limit through (run with -race).
func TestHandlerConcurrent(t *testing.T) {
	const limit, clients = 50, 200
	st := store.NewMemory()
	lim := newLimiter(t, st, ratelimit.MustParsePolicy(fmt.Sprintf("%d/h", limit)))
	srv := lim.Handler(okHandler)
	var admitted, rejected atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, getFrom(ipA))
			switch w.Code {
			case http.StatusOK:
				admitted.Add(1)
			case http.StatusTooManyRequests:
				rejected.Add(1)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != limit || rejected.Load() != clients-limit {
		t.Errorf("admitted %d, rejected %d; want %d, %d", admitted.Load(), rejected.Load(), limit, clients-limit)
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

// TestSkipAndFirstOf: WithSkip exempts health checkers (ClientIn);
// FirstOf limits by the API key when there is one, else by IP, and the 429
// body names which kind ran out.
func TestSkipAndFirstOf(t *testing.T) {
	internal, err := ratelimit.ClientIn(nil, "10.0.0.0/8", "::1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ratelimit.ClientIn(nil, "10.0.0.0/33"); err == nil {
		t.Fatal("ClientIn accepted a bad CIDR")
	}
	byKey := ratelimit.ByHeader("X-API-Key")
	byIP := ratelimit.ByIP()
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/h"),
		ratelimit.WithIdentifiers(ratelimit.FirstOf(byKey, byIP)), ratelimit.WithSkip(internal))
	h := lim.Handler(okHandler)
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := 0; i < 5; i++ {
		if w := serve(getFrom("10.1.2.3:5555")); w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("internal client %d: %d, RateLimit %q; want served unlimited", i, w.Code, w.Header().Get("RateLimit"))
		}
	}
	serve(getFrom(ipA))
	if w := serve(getFrom(ipA)); w.Code != 429 || !strings.Contains(w.Body.String(), `"identifier":"ip"`) {
		t.Fatalf("second anonymous request: %d %s; want 429 naming ip", w.Code, w.Body)
	}
	if w := serve(getFrom(ipA, "X-API-Key", "k1")); w.Code != 200 {
		t.Fatalf("a key holder on the same IP: %d, want its own budget", w.Code)
	}
	w := serve(getFrom(ipA, "X-API-Key", "k1"))
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"identifier":"key"`) || strings.Contains(w.Body.String(), "k1") {
		t.Fatalf("key holder's second request: %d %s; want 429 naming key, not its value", w.Code, w.Body)
	}
}
