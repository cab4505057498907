package ratelimit_test

import (
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
	ip := ratelimit.ByIP()
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

func TestLimiterFailureModeString(t *testing.T) {
	for m, want := range map[ratelimit.FailureMode]string{ratelimit.FailOpen: "fail-open", ratelimit.FailClosed: "fail-closed", 7: "failure-mode(7)"} {
		if got := m.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(m), got, want)
		}
	}
}
