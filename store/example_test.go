package store_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// One process: the in-memory store keeps the counters. It decides as the
// Redis store does, and a denied request charges nothing.
func ExampleNewMemory() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("3/m"))
	if err != nil {
		log.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		d, err := lim.Allow(context.Background(), "user:42")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("request %d: allowed %v, %d left\n", i, d.Allowed, d.Remaining)
	}
	// Output:
	// request 1: allowed true, 2 left
	// request 2: allowed true, 1 left
	// request 3: allowed true, 0 left
	// request 4: allowed false, 0 left
}

// A fleet: each server builds its store on its own client of the same
// Redis, so they share one budget. Here the Redis is a miniredis and the
// two servers are two stores in one process.
func ExampleNewRedis() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()

	policy := ratelimit.MustParsePolicy("3/m", ratelimit.Named("api"))
	var servers []*ratelimit.Limiter
	for range 2 {
		client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		defer client.Close()
		st, err := store.NewRedis(client, store.WithPrefix("myapp:"))
		if err != nil {
			log.Fatal(err)
		}
		lim, err := ratelimit.New(st, policy, ratelimit.WithTimeout(time.Second))
		if err != nil {
			log.Fatal(err)
		}
		servers = append(servers, lim)
	}
	for i, server := range []int{0, 1, 0, 1} {
		d, err := servers[server].Allow(context.Background(), "ip:203.0.113.7")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("request %d on server %d: allowed %v, %d left\n", i+1, server, d.Allowed, d.Remaining)
	}
	// Output:
	// request 1 on server 0: allowed true, 2 left
	// request 2 on server 1: allowed true, 1 left
	// request 3 on server 0: allowed true, 0 left
	// request 4 on server 1: allowed false, 0 left
}

// At startup, Ping says where the counters live, or why Redis does not
// answer. (miniredis reports no version.)
func ExampleRedis_Ping() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := store.NewRedis(client)
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	info, err := st.Ping(ctx)
	if err != nil {
		log.Fatalf("redis does not answer: %v", err) // names the server and the cause
	}
	// A real Redis prints as "redis 7.2.4 at 127.0.0.1:6379".
	fmt.Println("servers:", len(info.Nodes))
	fmt.Println("at the miniredis's address:", info.Nodes[0].Addr == mr.Addr())
	fmt.Println("version reported:", info.Nodes[0].Version != "")
	// Output:
	// servers: 1
	// at the miniredis's address: true
	// version reported: false
}

// TakeUpTo grants what fits, up to the request's cost, and charges that.
func ExampleMemory_TakeUpTo() {
	s := store.NewMemory()
	p := ratelimit.MustParsePolicy("10/m")
	for i := 0; i < 2; i++ {
		d, err := s.TakeUpTo(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"batch:a"}, Cost: 7})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Granted, d.Remaining)
	}
	// Output:
	// 7 3
	// 3 0
}

// Reserve admits a request that fits within the maximum delay, as of the
// time it fits: Decision.Delay says how long to wait.
func ExampleMemory_Reserve() {
	s := store.NewMemory()
	p := ratelimit.MustParsePolicy("1/m")
	for i := 0; i < 3; i++ {
		d, err := s.Reserve(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"job:a"}, Cost: 1}, 90*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Delay.Round(time.Second))
	}
	// Output:
	// true 0s
	// true 1m0s
	// false 0s
}

// Refund takes back exactly what a charge still counts; Reset forgets a
// key.
func ExampleMemory_Refund() {
	s := store.NewMemory()
	p := ratelimit.MustParsePolicy("3/h")
	req := ratelimit.Request{Policy: p, Keys: []string{"user:42"}, Cost: 2}
	d, _ := s.Take(context.Background(), req)
	s.Refund(context.Background(), d.Receipt)
	peek, _ := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"user:42"}})
	fmt.Println(peek.Remaining)
	s.Take(context.Background(), req)
	s.Reset(context.Background(), p, "user:42")
	peek, _ = s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"user:42"}})
	fmt.Println(peek.Remaining)
	// Output:
	// 3
	// 3
}

// newExampleRedis returns a Redis store on a fresh miniredis (the examples'
// stand-in for a real Redis) and a function that closes both.
func newExampleRedis() (*store.Redis, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	s, err := store.NewRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	return s, func() { client.Close(); mr.Close() }
}

// TakeUpTo on Redis: the largest cost every limit admits now, charged in
// the same script call.
func ExampleRedis_TakeUpTo() {
	s, done := newExampleRedis()
	defer done()
	p := ratelimit.MustParsePolicy("10/m, 12/h")
	for i := 0; i < 3; i++ {
		d, err := s.TakeUpTo(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"batch:a"}, Cost: 7})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Granted, d.Remaining)
	}
	// Output:
	// 7 3
	// 3 0
	// 0 0
}

// Reserve on Redis: a place in line, recorded in the same call; the
// second request is admitted as of a minute later.
func ExampleRedis_Reserve() {
	s, done := newExampleRedis()
	defer done()
	p := ratelimit.MustParsePolicy("1/m", ratelimit.WithAlgorithm(ratelimit.TokenBucket))
	for i := 0; i < 3; i++ {
		d, err := s.Reserve(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"job:a"}, Cost: 1}, 90*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Delay.Round(time.Second))
	}
	// Output:
	// true 0s
	// true 1m0s
	// false 0s
}

// Refund on Redis gives back what a charge still counts.
func ExampleRedis_Refund() {
	s, done := newExampleRedis()
	defer done()
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("3/h")
	d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:42"}, Cost: 2})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the charge:", d.Remaining)
	if err := s.Refund(ctx, d.Receipt); err != nil {
		log.Fatal(err)
	}
	peek, _ := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:42"}})
	fmt.Println("after the refund:", peek.Remaining)
	// Output:
	// after the charge: 1
	// after the refund: 3
}

// Reset on Redis forgets the keys' counters (and penalties) in one round
// trip; a refund of a charge made before it then gives nothing back.
func ExampleRedis_Reset() {
	s, done := newExampleRedis()
	defer done()
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("2/h")
	take := func() ratelimit.Decision {
		d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:42"}, Cost: 1})
		if err != nil {
			log.Fatal(err)
		}
		return d
	}
	before := take()
	if err := s.Reset(ctx, p, "user:42"); err != nil {
		log.Fatal(err)
	}
	take()
	take()
	s.Refund(ctx, before.Receipt) // charged before the Reset: nothing to give back
	fmt.Println("third request in the hour allowed:", take().Allowed)
	// Output:
	// third request in the hour allowed: false
}
