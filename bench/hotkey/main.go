// Command hotkey measures one hot key, a global limit every request of a
// fleet shares, with and without WithLease, side by side in one run:
// decisions a second, Redis commands per decision, and the most admitted
// in any second (a brute force over every admission's time).
//
//	cd bench && go run ./hotkey
//	cd bench && go run ./hotkey -duration 5s -chunk 2000 -hold 20ms -out hotkey.md
//	cd bench && go run ./hotkey -check   # exit 1 if a second ever admits more than the limit
//
// By default it starts its own redis-server on a free 127.0.0.1 port, so
// the server's command count is this run's alone; -redis host:port uses
// another.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/bench/internal/redisproc"
	"github.com/ratelimitkit/ratelimit/store"
)

type config struct {
	duration    time.Duration
	rounds      int
	concurrency int
	rate        int64
	chunk       int64
	hold        time.Duration
	redisAddr   string
	redisBin    string
	out         string
	check       bool
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured time per row, split over -rounds")
	flag.IntVar(&cfg.rounds, "rounds", 2, "rounds; the rows take turns within each, so outside load lands on both")
	flag.IntVar(&cfg.concurrency, "concurrency", 64, "goroutines calling Allow on the hot key, each with one call in flight")
	flag.Int64Var(&cfg.rate, "rate", 50000, "the hot key's limit, per second")
	flag.Int64Var(&cfg.chunk, "chunk", 1000, "WithLease's chunk")
	flag.DurationVar(&cfg.hold, "hold", 20*time.Millisecond, "WithLease's hold")
	flag.StringVar(&cfg.redisAddr, "redis", "", "Redis to use (host:port); empty starts a private redis-server")
	flag.StringVar(&cfg.redisBin, "redis-server", "redis-server", "redis-server binary used when -redis is empty")
	flag.StringVar(&cfg.out, "out", "", "also write the report (markdown) to this file")
	flag.BoolVar(&cfg.check, "check", false, "exit 1 when the leased row admits more than -rate in some second (the speed targets are reported, never checked: timings are noisy)")
	flag.Parse()
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "hotkey:", err)
		os.Exit(1)
	}
}

// row is one Limiter under test and what its rounds measured.
type row struct {
	name      string
	lim       *ratelimit.Limiter
	decisions int64
	admitted  []time.Duration // every admission, from the row's first round's start
	commands  int64
	elapsed   time.Duration
}

func run(cfg config) error {
	addr := cfg.redisAddr
	if addr == "" {
		p, err := redisproc.Start(cfg.redisBin)
		if err != nil {
			return err
		}
		defer p.Stop()
		addr = p.Addr
	}
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4 * cfg.concurrency})
	defer client.Close()
	ctx := context.Background()
	prefix := fmt.Sprintf("rlbench:%d:hot:", os.Getpid())
	s, err := store.NewRedis(client, store.WithPrefix(prefix))
	if err != nil {
		return err
	}
	limit := fmt.Sprintf("%d/s", cfg.rate)
	plain, err := ratelimit.ParsePolicy(limit, ratelimit.Named("hot"))
	if err != nil {
		return err
	}
	leased, err := plain.With(ratelimit.WithLease(cfg.chunk, cfg.hold))
	if err != nil {
		return err
	}
	rows := []*row{{name: "not leased"}, {name: fmt.Sprintf("WithLease(%d, %s)", cfg.chunk, cfg.hold)}}
	for i, p := range []*ratelimit.Policy{plain, leased} {
		if rows[i].lim, err = ratelimit.New(s, p); err != nil {
			return err
		}
	}
	per := cfg.duration / time.Duration(cfg.rounds)
	for r := range cfg.rounds {
		for k := range rows {
			rw := rows[(r+k)%len(rows)]
			before, err := commands(ctx, client)
			if err != nil {
				return err
			}
			n, times := load(rw.lim, cfg.concurrency, per, rw.elapsed)
			after, err := commands(ctx, client)
			if err != nil {
				return err
			}
			rw.decisions += n
			rw.admitted = append(rw.admitted, times...)
			rw.commands += after - before - 1 // the INFO call itself
			// A gap longer than the period between rounds: each row's
			// admissions are on its own time line, rounds one after another.
			rw.elapsed += per + 2*time.Second
			time.Sleep(2 * time.Second) // the other row's window empties
		}
	}
	var b strings.Builder
	report(&b, cfg, rows, per)
	fmt.Print(b.String())
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if cfg.check {
		if m := maxInSecond(rows[1].admitted); int64(m) > cfg.rate {
			return fmt.Errorf("%s admitted %d in one second, more than %d", rows[1].name, m, cfg.rate)
		}
	}
	return nil
}

// load calls lim.Allow on the hot key from n goroutines for d, and
// returns the decisions and every admission's time, offset by base.
func load(lim *ratelimit.Limiter, n int, d time.Duration, base time.Duration) (int64, []time.Duration) {
	var decisions atomic.Int64
	times := make([][]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	ctx := context.Background()
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := int64(0)
			for time.Since(start) < d {
				dec, err := lim.Allow(ctx, "global")
				local++
				if err == nil && dec.Allowed {
					times[g] = append(times[g], base+time.Since(start))
				}
			}
			decisions.Add(local)
		}()
	}
	wg.Wait()
	var all []time.Duration
	for _, t := range times {
		all = append(all, t...)
	}
	return decisions.Load(), all
}

// commands is the server's count of commands processed so far.
func commands(ctx context.Context, c *redis.Client) (int64, error) {
	txt, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(txt, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO stats has no total_commands_processed")
}

// maxInSecond is the most admissions in any window of one second.
func maxInSecond(times []time.Duration) int {
	slices.Sort(times)
	best, i := 0, 0
	for j := range times {
		for times[j]-times[i] >= time.Second {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

func report(w io.Writer, cfg config, rows []*row, per time.Duration) {
	secs := (per * time.Duration(cfg.rounds)).Seconds()
	fmt.Fprintf(w, "## One hot key: %d/s from %d callers, leased and not\n\n", cfg.rate, cfg.concurrency)
	fmt.Fprintf(w, "Each row: %s in %d rounds, taking turns; one Redis, go-redis defaults, the store with no options.\n\n", per*time.Duration(cfg.rounds), cfg.rounds)
	fmt.Fprintln(w, "| row | decisions/s | admitted/s | Redis commands per decision | most admitted in any second |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.5f | %d |\n", r.name, float64(r.decisions)/secs, float64(len(r.admitted))/secs,
			float64(r.commands)/float64(r.decisions), maxInSecond(r.admitted))
	}
	plain, leased := rows[0], rows[1]
	speed := float64(leased.decisions) / float64(plain.decisions)
	cmds := (float64(leased.commands) / float64(leased.decisions)) / (float64(plain.commands) / float64(plain.decisions))
	fmt.Fprintf(w, "\n| target | measured | met |\n|---|--:|:-:|\n")
	fmt.Fprintf(w, "| leased ÷ not leased, decisions a second ≥ 5 | %.1f× | %s |\n", speed, yes(speed >= 5))
	fmt.Fprintf(w, "| leased ÷ not leased, commands per decision ≤ 1/20 | 1/%.0f | %s |\n", 1/cmds, yes(cmds <= 1.0/20))
	m := maxInSecond(leased.admitted)
	fmt.Fprintf(w, "| leased: most admitted in any second ≤ %d | %d | %s |\n", cfg.rate, m, yes(int64(m) <= cfg.rate))
	fmt.Fprintf(w, "\nAn admission's time is when the caller got it. Redis decides a call that is not leased\n"+
		"when the script runs, and the reply's latency, which varies, is not in its window: measured\n"+
		"at the caller, such a window can hold a few more than the limit. A grant's hold is counted\n"+
		"from before the call, latency included. Under load every round starts with a full window:\n"+
		"admitted/s counts its bursts.\n")
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
