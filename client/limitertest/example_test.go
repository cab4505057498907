package limitertest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/client"
	"github.com/ratelimitkit/ratelimit/store"
)

// A server limited to 5 requests a second: the transport sends five, then
// knows the quota is spent until about a second later. A request whose
// context ends before that fails at once, without being sent.
func Example() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("5/s", ratelimit.Named("hello")),
		ratelimit.WithMaxDelay(0)) // answer 429 rather than hold a request
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	defer srv.Close()

	hc := &http.Client{Transport: client.NewTransport(nil)}
	var codes []string
	for range 5 {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		codes = append(codes, fmt.Sprint(resp.StatusCode))
	}
	fmt.Println(strings.Join(codes, " "))

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	_, err = hc.Do(req)
	var we *client.WaitError
	if errors.As(err, &we) && errors.Is(err, context.DeadlineExceeded) {
		fmt.Printf("not sent: quota %q is spent beyond the deadline\n", we.Policy)
	}
	// Output:
	// 200 200 200 200 200
	// not sent: quota "hello-1s" is spent beyond the deadline
}

// The options: at most one retry of a refused request, never more than
// ten seconds of waiting for a quota, and the header an API deduplicates
// requests by.
func ExampleNewTransport() {
	hc := &http.Client{
		Transport: client.NewTransport(http.DefaultTransport,
			client.WithMaxRetries(1),
			client.WithMaxWait(10*time.Second),
			client.WithIdempotencyHeader("X-Request-Id"),
		),
		Timeout: time.Minute,
	}
	req, _ := http.NewRequest(http.MethodPost, "https://api.example.com/orders", strings.NewReader(`{"item":42}`))
	req.Header.Set("X-Request-Id", "order-7f3a") // retried after a 429, as the API deduplicates it
	_, _ = hc, req
}
