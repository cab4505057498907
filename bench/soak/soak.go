package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
)

// leakTolerance is how far above its level at a quarter of the run a
// resource may end before the run fails: 10%.
const leakTolerance = 1.10

// minDecided is the share of sent requests the store must decide (the rest
// failed open or failed): below it the other checks would be vacuous.
const minDecided = 0.95

// autoPolicy returns the default policy for a run of duration d: three
// limits whose longest period is at most a quarter of the run, so that a
// key idle since the arrivals ended has expired well before the end; about
// 2 requests per second per identity in the long run.
func autoPolicy(d time.Duration) string {
	if d >= 20*time.Minute {
		return "5/s, 150/m, 600/5m"
	}
	p3 := max(3, int(d/4/time.Second))
	p2 := max(2, p3/2)
	return fmt.Sprintf("5/s, %d/%ds, %d/%ds", (5*p2+1)/2, p2, 2*p3, p3)
}

// sample is one row of the report.
type sample struct {
	at         time.Duration
	secs       float64 // length of the interval it covers
	n          [numClasses][numOutcomes]int64
	p50, p99   time.Duration
	keys       int64
	usedMemory int64
	heap       uint64
	goroutines int
	tracked    int
	violations int
	base       bool // the sample at a quarter of the run
}

func (s sample) sent() int64 {
	var t int64
	for c := range s.n {
		for o := range s.n[c] {
			t += s.n[c][o]
		}
	}
	return t
}

func (s sample) outcome(o outcome) int64 {
	var t int64
	for c := range s.n {
		t += s.n[c][o]
	}
	return t
}

func runSoak(cfg config, stop <-chan struct{}) error {
	if cfg.residents <= cfg.workers {
		return fmt.Errorf("-residents %d must be more than -workers %d (each worker holds one resident in flight at most)", cfg.residents, cfg.workers)
	}
	if cfg.policy == "" {
		cfg.policy = autoPolicy(cfg.duration)
	}
	policy, err := ratelimit.ParsePolicy(cfg.policy, ratelimit.Named("soak"))
	if err != nil {
		return err
	}
	var limits []limitSpec
	longRun := 0.0
	for i, l := range policy.Limits() {
		limits = append(limits, limitSpec{rate: int(l.Rate), period: l.Period})
		r := float64(l.Rate) / l.Period.Seconds()
		if i == 0 || r < longRun {
			longRun = r
		}
	}
	arrivalEnd := cfg.duration / 5
	baseAt := cfg.duration / 4
	pop := newPopulation(cfg, limits, arrivalEnd)
	if pop.maxPeriod > baseAt {
		fmt.Fprintf(os.Stderr, "soak: warning: the policy's longest period %v is longer than a quarter of the run (%v): keys may not have expired by the end\n", pop.maxPeriod, baseAt)
	}

	addr := cfg.redisAddr
	private := addr == ""
	if private {
		rp, err := startRedis(cfg.redisBin)
		if err != nil {
			return err
		}
		defer rp.stop()
		addr = rp.addr
	}
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer admin.Close()
	srv, err := startServerProc(cfg, addr, fmt.Sprintf("soak:%d:", os.Getpid()))
	if err != nil {
		return err
	}
	defer srv.stop()
	client := newClient(cfg.workers)
	defer client.CloseIdleConnections()
	statsClient := &http.Client{Timeout: 30 * time.Second}
	defer statsClient.CloseIdleConnections()
	if err := warm(client, srv.url+"/warm", cfg.workers); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	var report strings.Builder
	out := io.MultiWriter(os.Stdout, &report)
	redisNote := "a private redis-server started by this program"
	if !private {
		redisNote = addr + " (DBSIZE and used_memory count every client's data)"
	}
	fmt.Fprintf(out, "soak: %v at %g requests/s offered (%d workers), policy %q (long-run rate %.3g/s per identity), Redis %s\n",
		cfg.duration, cfg.rps, cfg.workers, cfg.policy, longRun, redisNote)
	fmt.Fprintf(os.Stderr, "soak: the server process listens on %s (heap profile: %s/debug/pprof/heap)\n", srv.url, srv.url)
	fmt.Fprintf(out, "identities: %d normal residents, %d greedy (ignore Retry-After), %d polite (wait Retry-After); visitors (%d requests each, about 1/s) arrive until %v; leak baseline at %v\n\n",
		cfg.residents, cfg.greedy, cfg.polite, visitorRequests, arrivalEnd, baseAt)

	var (
		n                counts
		lat              latencies
		offered, dropped atomic.Int64
		wg               sync.WaitGroup
		jobs             = make(chan time.Duration, cfg.workers)
		loadStop         = make(chan struct{})
		start            = time.Now()
	)
	ctx := context.Background()
	for range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				s := time.Since(start)
				id, cls := pop.pick(s)
				o, ra := send(ctx, client, srv.url+"/api", apiKey(id))
				r := time.Since(start)
				pop.done(id, cls, span{send: s, recv: r}, o == admitted, ra)
				n[cls][o].Add(1)
				lat.add(r - s)
			}
		}()
	}
	go pacer(start, cfg.rps, jobs, loadStop, func(_ time.Duration, queued bool) {
		offered.Add(1)
		if !queued {
			dropped.Add(1)
		}
	})

	// Sample every interval, and at a quarter of the run.
	var times []time.Duration
	for t := cfg.interval; t <= cfg.duration; t += cfg.interval {
		times = append(times, t)
	}
	if !slices.Contains(times, baseAt) {
		times = append(times, baseAt)
		slices.Sort(times)
	}
	if times[len(times)-1] != cfg.duration {
		times = append(times, cfg.duration)
	}
	var samples []sample
	fmt.Fprintln(out, tableHeader)
	last := time.Duration(0)
	interrupted := false
	for _, at := range times {
		select {
		case <-stop:
			interrupted = true
		case <-time.After(time.Until(start.Add(at))):
		}
		if interrupted {
			break
		}
		s := takeSample(ctx, admin, srv, statsClient, pop, &n, &lat, time.Since(start), at-last)
		s.at, s.base = at, at == baseAt
		last = at
		samples = append(samples, s)
		fmt.Fprintln(out, s.row(cfg, longRun))
	}
	close(loadStop)
	wg.Wait()

	violations, first, visitors := pop.result()
	fmt.Fprintf(out, "\n%d visitors arrived; %d requests offered, %d dropped (no free worker)\n", visitors, offered.Load(), dropped.Load())
	fails := checkSoak(samples, violations, first, private, interrupted)
	for _, line := range fails.lines {
		fmt.Fprintln(out, line)
	}
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report.String()), 0o644); err != nil {
			return err
		}
	}
	if fails.n > 0 {
		return fmt.Errorf("%d check(s) failed", fails.n)
	}
	if interrupted {
		return errors.New("interrupted before the end: the leak checks were not made")
	}
	return nil
}

// takeSample reads and resets the counters and latencies, and measures
// Redis and this process.
func takeSample(ctx context.Context, admin *redis.Client, srv *serverProc, statsClient *http.Client, pop *population, n *counts, lat *latencies, now, secs time.Duration) sample {
	var s sample
	s.secs = secs.Seconds()
	s.n = n.snapshot()
	s.p50, s.p99 = lat.take()
	s.tracked = pop.sweep(now)
	s.violations, _, _ = pop.result()
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s.keys, _ = admin.DBSize(c).Result()
	if info, err := admin.Info(c, "memory").Result(); err == nil {
		s.usedMemory = infoInt(info, "used_memory")
	}
	if st, err := srv.stats(statsClient); err == nil {
		s.heap, s.goroutines = st.HeapAlloc, st.Goroutines
	} else {
		fmt.Fprintf(os.Stderr, "soak: server stats: %v\n", err)
	}
	return s
}

func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

const tableHeader = "| time | sent/s | admitted/s | denied/s | failed open + errors | greedy admitted/s per id | polite admitted/s per id | p50 ms | p99 ms | Redis keys | Redis used_memory MB | server heap MB | server goroutines | tracked ids | over-admissions |\n" +
	"|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"

func (s sample) row(cfg config, longRun float64) string {
	per := func(c class, count int) string {
		if count == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(s.n[c][admitted])/float64(count)/s.secs)
	}
	mark := ""
	if s.base {
		mark = " (baseline)"
	}
	return fmt.Sprintf("| %s%s | %.0f | %.0f | %.0f | %d | %s | %s | %.2f | %.2f | %d | %.2f | %.2f | %d | %d | %d |",
		clock(s.at), mark, float64(s.sent())/s.secs, float64(s.outcome(admitted))/s.secs, float64(s.outcome(denied))/s.secs,
		s.outcome(failedOpen)+s.outcome(failed), per(greedy, cfg.greedy), per(polite, cfg.polite),
		ms(s.p50), ms(s.p99), s.keys, float64(s.usedMemory)/(1<<20), float64(s.heap)/(1<<20), s.goroutines, s.tracked, s.violations)
}

// clock writes d as m:ss, with tenths when d is not a whole second.
func clock(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(100 * time.Millisecond)
	return fmt.Sprintf("%d:%04.1f", int(d.Minutes()), d.Seconds()-60*float64(int(d.Minutes())))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type failures struct {
	n     int
	lines []string
}

func (f *failures) check(ok bool, format string, args ...any) {
	status := "PASS"
	if !ok {
		status = "FAIL"
		f.n++
	}
	f.lines = append(f.lines, status+" "+fmt.Sprintf(format, args...))
}

// checkSoak applies the run's rules to its samples.
func checkSoak(samples []sample, violations int, first []string, private, interrupted bool) failures {
	var f failures
	f.check(violations == 0, "over-admission: %d times an identity had Rate+1 admissions sent and answered within less than Period", violations)
	for _, v := range first {
		f.lines = append(f.lines, "  "+v)
	}
	var sent, decided int64
	for _, s := range samples {
		sent += s.sent()
		decided += s.outcome(admitted) + s.outcome(denied)
	}
	f.check(sent > 0 && float64(decided) >= minDecided*float64(sent),
		"decided by Redis: %d of %d requests sent (at least %.0f%% needed for the other checks to mean anything)", decided, sent, 100*minDecided)
	if interrupted || len(samples) == 0 {
		return f
	}
	var base *sample
	for i := range samples {
		if samples[i].base {
			base = &samples[i]
		}
	}
	baseIdx := 0
	for i := range samples {
		if samples[i].base {
			baseIdx = i
		}
	}
	if base == nil || baseIdx == len(samples)-1 {
		f.check(false, "no baseline sample at a quarter of the run")
		return f
	}
	end := endLevel(samples[baseIdx+1:])
	f.check(float64(end.heap) <= leakTolerance*float64(base.heap),
		"server heap (HeapAlloc right after runtime.GC, least of 4 readings over 200ms) at the end (least of the last 3 samples) %.2f MB, at a quarter of the run %.2f MB: at most +10%%", mb(end.heap), mb(base.heap))
	f.check(float64(end.goroutines) <= leakTolerance*float64(base.goroutines),
		"server goroutines (fewest over 200ms) at the end (least of the last 3 samples) %d, at a quarter of the run %d: at most +10%%", end.goroutines, base.goroutines)
	if private {
		f.check(float64(end.keys) <= leakTolerance*float64(base.keys),
			"Redis keys (DBSIZE) at the end (least of the last 3 samples) %d, at a quarter of the run %d: flat or lower (at most +10%%)", end.keys, base.keys)
		f.check(float64(end.usedMemory) <= leakTolerance*float64(base.usedMemory),
			"Redis used_memory at the end (least of the last 3 samples) %.2f MB, at a quarter of the run %.2f MB: flat or lower (at most +10%%)", mb(uint64(end.usedMemory)), mb(uint64(base.usedMemory)))
	} else {
		f.lines = append(f.lines, "(Redis keys and memory not checked: -redis is shared with other clients)")
	}
	return f
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// endSamples is how many of the last samples make the level at the end.
const endSamples = 3

// endLevel returns, for each measure the leak checks compare, its lowest
// value over the last endSamples samples (fewer if the run has fewer after
// the baseline): what stayed, rather than what a stall at the last instant
// held up (requests in flight hold goroutines and buffers). A leak, which
// only grows, shows in all of them.
func endLevel(after []sample) sample {
	last := after[max(0, len(after)-endSamples):]
	end := last[0]
	for _, s := range last[1:] {
		end.heap = min(end.heap, s.heap)
		end.goroutines = min(end.goroutines, s.goroutines)
		end.keys = min(end.keys, s.keys)
		end.usedMemory = min(end.usedMemory, s.usedMemory)
	}
	return end
}
