package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// A global limit shared by a fleet, leased: each process takes grants of
// up to 100 units and admits from them for 20ms without asking the store.
func ExampleWithLease() {
	p := ratelimit.MustParsePolicy("1000/s", ratelimit.Named("search"), ratelimit.WithLease(100, 20*time.Millisecond))
	lim, err := ratelimit.New(store.NewMemory(), p)
	if err != nil {
		panic(err)
	}
	admitted := 0
	for range 1200 {
		if d, _ := lim.Allow(context.Background(), "search-backend"); d.Allowed {
			admitted++
		}
	}
	chunk, hold := p.Lease()
	fmt.Printf("%d of 1200 admitted, from grants of up to %d for %s\n", admitted, chunk, hold)
	// Output: 1000 of 1200 admitted, from grants of up to 100 for 20ms
}
