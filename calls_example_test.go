package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// Outside HTTP, AllowN limits any work by keys you choose: here exports
// of rows, per tenant, 100 rows an hour.
func ExampleLimiter_AllowN() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("100/h", ratelimit.Named("exports")))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, rows := range []int64{40, 50, 30, 10} {
		d, err := lim.AllowN(ctx, rows, "tenant:acme")
		if err != nil {
			// No store could decide; d is the failure mode's answer.
			log.Print(err)
		}
		if !d.Allowed {
			fmt.Printf("%d rows: denied, %d left\n", rows, d.Remaining)
			continue
		}
		fmt.Printf("%d rows: allowed, %d left\n", rows, d.Remaining)
	}
	// Output:
	// 40 rows: allowed, 60 left
	// 50 rows: allowed, 10 left
	// 30 rows: denied, 10 left
	// 10 rows: allowed, 0 left
}

// Wait until a job may run, rather than dropping it: Wait returns once the
// event is charged, in order of arrival under a policy that can reserve
// (here, the exact log of "2 per 100ms").
func ExampleLimiter_Wait() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/100ms"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	for i, turn := range []time.Duration{0, 0, 100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		if _, err := lim.Wait(ctx, "job:reindex"); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("job %d started after its turn (%s): %v\n", i, turn, time.Since(start) >= turn)
	}
	// Output:
	// job 0 started after its turn (0s): true
	// job 1 started after its turn (0s): true
	// job 2 started after its turn (100ms): true
	// job 3 started after its turn (100ms): true
	// job 4 started after its turn (200ms): true
}

// WaitN refuses at once, charging nothing, a wait that would pass the
// context's deadline.
func ExampleLimiter_WaitN() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("10/m"))
	if err != nil {
		log.Fatal(err)
	}
	lim.AllowN(context.Background(), 10, "tenant:acme")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = lim.WaitN(ctx, 5, "tenant:acme")
	fmt.Println(err != nil, strings.Contains(fmt.Sprint(err), "deadline"))
	// Output: true true
}

// Hand out quota in chunks: AllowUpTo grants what is left, up to the ask,
// and charges exactly that.
func ExampleLimiter_AllowUpTo() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1000/m", ratelimit.Named("tokens")))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, ask := range []int64{600, 600, 600} {
		granted, _, err := lim.AllowUpTo(ctx, ask, "llm:team-a")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("asked %d, granted %d\n", ask, granted)
	}
	// Output:
	// asked 600, granted 600
	// asked 600, granted 400
	// asked 600, granted 0
}

// Refund gives a charge back, exactly and once, for work that turned out
// not to count.
func ExampleLimiter_Refund() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("3/h"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	d, _ := lim.Allow(ctx, "export:acme")
	if err := lim.Refund(ctx, d); err != nil { // the export failed: it does not count
		log.Fatal(err)
	}
	lim.Refund(ctx, d) // a second refund of the same charge does nothing
	left, _ := lim.AllowN(ctx, 0, "export:acme")
	fmt.Println(left.Remaining)
	// Output: 3
}

// Reset forgets a key's counters, and its penalty: after a successful
// login, say.
func ExampleLimiter_Reset() {
	p := ratelimit.MustParsePolicy("3/15m", ratelimit.BlockFor(time.Hour))
	lim, err := ratelimit.New(store.NewMemory(), p)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		lim.Allow(ctx, "login:alice")
	}
	d, _ := lim.Allow(ctx, "login:alice")
	fmt.Println(d.Allowed, d.RetryAfter.Round(time.Minute))
	lim.Reset(ctx, "login:alice")
	d, _ = lim.Allow(ctx, "login:alice")
	fmt.Println(d.Allowed)
	// Output:
	// false 1h0m0s
	// true
}

// ResetPolicy resets keys under a policy chosen per request.
func ExampleLimiter_ResetPolicy() {
	free := ratelimit.MustParsePolicy("1/h", ratelimit.Named("free"))
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("100/h", ratelimit.Named("paid")),
		ratelimit.WithPolicyFunc(func(*http.Request) *ratelimit.Policy { return free }))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func() int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	fmt.Print(send(), " ", send())
	lim.ResetPolicy(context.Background(), free, "ip:203.0.113.7")
	fmt.Println(" ", send())
	// Output: 200 429  200
}
