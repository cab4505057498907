// Command allow is the README's "Outside HTTP": a Limiter decides for any
// work, by keys you choose. Here exports of rows, 100 rows an hour per
// tenant.
//
//	go run -C _example ./allow
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("100/h", ratelimit.Named("export")))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, rows := range []int64{40, 50, 20, 10} {
		d, err := lim.AllowN(ctx, rows, "tenant:acme") // cost = rows; Allow(ctx, keys...) costs 1
		if err != nil {
			// Bad arguments, or no store could decide: then d is the
			// failure mode's answer (FailClosed, the default, denies).
			log.Printf("limiter: %v", err)
		}
		if !d.Allowed { // a denial charges nothing
			fmt.Printf("%d rows: denied, %d left; retry in about %v\n", rows, d.Remaining, d.RetryAfter.Round(time.Hour))
			continue
		}
		fmt.Printf("%d rows: allowed, %d left this hour\n", rows, d.Remaining)
	}
}
