// Command metered is the README's WithCostAfter: an endpoint metered by
// what its responses turn out to cost, here the bytes each one writes,
// 4,000 bytes a minute per client. Each request is charged an estimate up
// front (1,000); the Handler settles it to the bytes written once the
// handler returns. A response larger than the quota leaves the client in
// debt: denied, with a Retry-After, until its window has room again.
//
//	go run -C _example ./metered
package main

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("4000/m", ratelimit.Named("bytes")),
		ratelimit.WithCost(1000), // the estimate, charged up front
		ratelimit.WithCostAfter(func(r *http.Request, status int, written int64) int64 {
			return written // the actual cost: the difference is charged, or given back
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("bytes"))
		w.Write([]byte(strings.Repeat("x", n)))
	}))
	for _, size := range []int{500, 800, 3000, 100} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/report?bytes="+strconv.Itoa(size), nil))
		fmt.Printf("%d bytes asked: %d, RateLimit %s", size, rec.Code, rec.Header().Get("RateLimit"))
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			fmt.Printf(", Retry-After %s", ra)
		}
		fmt.Println()
	}
}
