package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// BlockFor keeps a key denied for a while once it went over a limit.
func ExampleBlockFor() {
	p := ratelimit.MustParsePolicy("2/m", ratelimit.BlockFor(10*time.Minute))
	lim, _ := ratelimit.New(store.NewMemory(), p)
	for i := 0; i < 3; i++ {
		d, _ := lim.Allow(context.Background(), "k")
		fmt.Println(d.Allowed, d.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 0s
	// true 0s
	// false 10m0s
}

// With copies a policy built with NewPolicy under another name, with a
// penalty: limits named by default take the new name, and the copy's
// counters are its own.
func ExamplePolicy_With() {
	api, _ := ratelimit.NewPolicy("api", ratelimit.SlidingWindow, ratelimit.Limit{Rate: 5, Period: time.Minute})
	login, err := api.With(ratelimit.Named("login"), ratelimit.BlockFor(15*time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(login.Name(), login.Limits()[0].Name, login.BlockFor(), login.ID() != api.ID())
	_, err = api.With(ratelimit.WithAlgorithm(ratelimit.TokenBucket))
	fmt.Println(err)
	// Output:
	// login login-1m 15m0s true
	// ratelimit: Policy.With: WithAlgorithm changes how the limits are counted: build another policy with NewPolicy or ParsePolicy
}
