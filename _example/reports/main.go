// Command reports is the README's "Requests in flight": a slow report
// endpoint that runs at most 2 reports at once per API key, fleet-wide
// with a Redis store ("2 concurrent"), beside a rate of 30 a minute. A
// third report of the same key while two run gets 429 (no Retry-After: a
// slot frees when a report ends); another key runs; once a report ends,
// its slot is free again.
//
//	go run -C _example ./reports
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("30/m, 2 concurrent", ratelimit.Named("reports")),
		ratelimit.WithIdentifiers(ratelimit.ByHeader("X-API-Key")))
	if err != nil {
		log.Fatal(err)
	}
	started := make(chan struct{}, 8)
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done() // the report runs until its request ends (here: cancelled)
	}))
	get := func(ctx context.Context, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(ctx, "GET", "/reports", nil)
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	var wg sync.WaitGroup
	var ends []context.CancelFunc
	for range 2 { // two reports of key-a, running
		ctx, end := context.WithCancel(context.Background())
		ends = append(ends, end)
		wg.Add(1)
		go func() { defer wg.Done(); get(ctx, "key-a") }()
		<-started
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()                                    // a report that ends at once
	third := get(context.Background(), "key-a") // denied at once
	fmt.Printf("third report of key-a: %d, Retry-After %q, RateLimit %s\n", third.Code, third.Header().Get("Retry-After"), third.Header().Get("RateLimit"))
	fmt.Printf("a report of key-b: %d\n", get(ended, "key-b").Code)
	ends[0]()                                       // one report of key-a ends
	for get(ended, "key-a").Code != http.StatusOK { // its slot is free once its handler returned
	}
	fmt.Println("key-a again after one report ended: 200")
	ends[1]()
	wg.Wait()
	fmt.Println("RateLimit-Policy:", third.Header().Get("RateLimit-Policy"))
}
