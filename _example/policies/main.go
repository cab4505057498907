// Command policies builds the README's example policies and prints them,
// and the error of a policy that does not parse.
//
//	go run -C _example ./policies
package main

import (
	"fmt"
	"log"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func main() {
	p, err := ratelimit.ParsePolicy("100/m, 1000/h",
		ratelimit.Named("paid"),                        // appears in headers and Redis keys
		ratelimit.WithAlgorithm(ratelimit.TokenBucket), // default SlidingWindow
		ratelimit.WithBurst(20),                        // token bucket only; default = rate
	)
	if err != nil {
		log.Fatal(err)
	}
	show(p)
	p, err = ratelimit.NewPolicy("free", ratelimit.SlidingWindow,
		ratelimit.Limit{Rate: 20, Period: time.Minute}, ratelimit.Limit{Rate: 200, Period: time.Hour, Precision: 12})
	if err != nil {
		log.Fatal(err)
	}
	show(p)

	_, err = ratelimit.ParsePolicy("10/s, 5/fortnight")
	fmt.Println("error:", err)
}

func show(p *ratelimit.Policy) {
	fmt.Printf("policy %q (%s): %s\n", p.Name(), p.Algorithm(), p)
	for _, l := range p.Limits() {
		fmt.Printf("  %s: %d per %s", l.Name, l.Rate, ratelimit.FormatPeriod(l.Period))
		switch p.Algorithm() {
		case ratelimit.TokenBucket:
			fmt.Printf(", burst %d", l.Burst)
		case ratelimit.SlidingWindow:
			fmt.Printf(", counted in %d sub-buckets", l.Precision)
		}
		fmt.Println()
	}
}
