package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// defaultFleetPolicy is the fleet mode's policy unless -policy is given.
const defaultFleetPolicy = "10/s"

// csvHeader names the columns of the fleet CSV; docs/fleet.md describes them.
const csvHeader = "second,offered,sent,admitted,denied,failed_open,errors,policy_rate,redis_down_ms"

// bucket counts the requests of one second of a fleet run.
type bucket struct {
	offered, sent atomic.Int64
	n             [numOutcomes]atomic.Int64
}

// runFleet runs cfg.servers Limiters, each with its own go-redis client and
// Handler behind its own HTTP server, sharing one private Redis; kills the
// Redis at half time and starts it again, empty, cfg.outage later; and
// writes per-second counts as CSV.
func runFleet(cfg config, stop <-chan struct{}) error {
	if cfg.policy == "" {
		cfg.policy = defaultFleetPolicy
	}
	policy, err := ratelimit.ParsePolicy(cfg.policy, ratelimit.Named("fleet"))
	if err != nil {
		return err
	}
	longRun := 0.0
	for i, l := range policy.Limits() {
		if r := float64(l.Rate) / l.Period.Seconds(); i == 0 || r < longRun {
			longRun = r
		}
	}
	rp, err := startRedis(cfg.redisBin)
	if err != nil {
		return err
	}
	defer rp.stop()

	var urls []string
	for range cfg.servers {
		h, closeStore, err := newLimiterHandler(rp.addr, "fleet:", policy, cfg.timeout, false)
		if err != nil {
			return err
		}
		defer closeStore()
		srv := newServer(h, cfg.workers)
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	client := newClient(cfg.workers)
	defer client.CloseIdleConnections()
	for _, u := range urls {
		if err := warm(client, u+"/warm", cfg.workers); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	seconds := int((cfg.duration + time.Second - 1) / time.Second)
	buckets := make([]bucket, seconds+1)
	at := func(d time.Duration) *bucket { return &buckets[min(int(d/time.Second), seconds)] }
	fmt.Fprintf(os.Stderr, "soak -fleet: %d servers, %d identities, %g requests/s offered, policy %q (%.3g/s per identity in the long run), %v; Redis %s killed at %v, restarted %v later\n",
		cfg.servers, cfg.fleetIDs, cfg.rps, cfg.policy, longRun, cfg.duration, rp.addr, cfg.duration/2, cfg.outage)

	var (
		wg       sync.WaitGroup
		jobs     = make(chan time.Duration, cfg.workers)
		loadStop = make(chan struct{})
		start    = time.Now()
		next     atomic.Int64
		ctx      = context.Background()
	)
	for w := range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range jobs {
				s := time.Since(start)
				id := int32(next.Add(1) % int64(cfg.fleetIDs)) // each identity gets an equal share
				u := urls[rng.IntN(len(urls))]                 // the balancer picks any server
				o, _ := send(ctx, client, u+"/api", apiKey(id))
				b := at(s)
				b.sent.Add(1)
				b.n[o].Add(1)
			}
		}()
	}
	var dropped atomic.Int64
	go pacer(start, cfg.rps, jobs, loadStop, func(t time.Duration, queued bool) {
		at(t).offered.Add(1)
		if !queued {
			dropped.Add(1)
		}
	})

	// The outage: kill at half time, start again (empty) cfg.outage later.
	var killedAt, upAt time.Duration
	var outageErr error
	select {
	case <-stop:
	case <-time.After(time.Until(start.Add(cfg.duration / 2))):
		killedAt = time.Since(start)
		rp.kill()
		select {
		case <-stop:
		case <-time.After(cfg.outage):
		}
		outageErr = rp.restart()
		upAt = time.Since(start)
		fmt.Fprintf(os.Stderr, "soak -fleet: Redis killed at %v, answering again at %v\n", killedAt.Round(time.Millisecond), upAt.Round(time.Millisecond))
	}
	if outageErr != nil {
		close(loadStop)
		wg.Wait()
		return fmt.Errorf("restart Redis: %w", outageErr)
	}
	select {
	case <-stop:
	case <-time.After(time.Until(start.Add(cfg.duration))):
	}
	close(loadStop)
	wg.Wait()
	elapsed := time.Since(start)

	var w io.Writer = os.Stdout
	if cfg.csv != "" {
		f, err := os.Create(cfg.csv)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, csvHeader)
	policyRate := longRun * float64(cfg.fleetIDs)
	var total [numOutcomes]int64
	last := min(seconds, int(elapsed/time.Second))
	for i := 0; i < last; i++ {
		b := &buckets[i]
		down := overlapMillis(killedAt, upAt, time.Duration(i)*time.Second)
		fmt.Fprintf(bw, "%d,%d,%d,%d,%d,%d,%d,%s,%d\n", i, b.offered.Load(), b.sent.Load(),
			b.n[admitted].Load(), b.n[denied].Load(), b.n[failedOpen].Load(), b.n[failed].Load(),
			strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", policyRate), "0"), "."), down)
		for o := range total {
			total[o] += b.n[o].Load()
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "soak -fleet: %d seconds written; totals: %d admitted, %d denied, %d failed open, %d errors; %d dropped (no free worker)\n",
		last, total[admitted], total[denied], total[failedOpen], total[failed], dropped.Load())
	return nil
}

// overlapMillis returns how many milliseconds of the second starting at sec
// fall in [from, to); 0 when to is 0 (no outage).
func overlapMillis(from, to, sec time.Duration) int64 {
	if to <= from {
		return 0
	}
	lo, hi := max(from, sec), min(to, sec+time.Second)
	if hi <= lo {
		return 0
	}
	return int64((hi - lo) / time.Millisecond)
}
