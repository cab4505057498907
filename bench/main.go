// Command bench drives this library and other Go Redis rate limiters side
// by side, under the same load, in the same run, against the same Redis,
// and writes the results as markdown tables. See README.md.
//
//	cd bench && go run .
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/bench/internal/redisproc"
)

type config struct {
	conc      int
	nIDs      int
	dur       time.Duration
	warm      time.Duration
	sections  string
	batches   []int
	redisAddr string
	redisBin  string
	out       string
	scale     int64
	rounds    int
	only      *regexp.Regexp
	cpuprof   string
	pin       bool
}

// Defaults sized so that the whole default run (a–c 18 rows each, d 22,
// e 6, w 7, and 12 rows in the memory section: 101 cells, plus retries)
// takes about four minutes on a 2-core machine.
const (
	defaultDuration = 2 * time.Second
	defaultWarmup   = 250 * time.Millisecond
	defaultRounds   = 5
	// defaultBatch is the store.WithBatching value of the extra rows of
	// a–c: 0, our store with batching off, next to the default (on).
	defaultBatch = "0"
)

func main() {
	var cfg config
	var only, batches string
	flag.IntVar(&cfg.conc, "concurrency", 64, "concurrent callers (goroutines), each with one request in flight")
	flag.IntVar(&cfg.nIDs, "identities", 1000, "distinct identities (client IPs, and users in scenario c) picked uniformly at random; scenario d always uses one, e 10000")
	flag.DurationVar(&cfg.dur, "duration", defaultDuration, "measured time per cell (one limiter in one scenario), split over -rounds")
	flag.IntVar(&cfg.rounds, "rounds", defaultRounds, "rounds per scenario: each round measures every row for duration/rounds, so that a burst of outside load is shared by all rows instead of hitting one")
	flag.DurationVar(&cfg.warm, "warmup", defaultWarmup, "unmeasured time per cell before measuring (fills connection pools, loads scripts)")
	const sectionsUsage = "sections to run, comma-separated: a (one limit), b (three limits), c (three limits × two identities), d (flood, denied), e (three limits as they are, unscaled), memory (in-process stores, no Redis)"
	flag.StringVar(&cfg.sections, "sections", strings.Join(sectionIDs, ","), sectionsUsage)
	flag.StringVar(&cfg.sections, "scenarios", strings.Join(sectionIDs, ","), "the same as -sections (older name)")
	flag.StringVar(&batches, "batch", defaultBatch, "store.WithBatching value(s) of the extra rows in scenarios a-c, next to the default store, comma-separated (0: batching off; several values: one row each, for a sweep)")
	flag.StringVar(&cfg.redisAddr, "redis", "", "address of a Redis to use (host:port); empty starts a private redis-server on a free 127.0.0.1 port, so INFO counts only this run")
	flag.StringVar(&cfg.redisBin, "redis-server", "redis-server", "redis-server binary used when -redis is empty")
	flag.StringVar(&cfg.out, "out", "", "also write the markdown report to this file")
	flag.Int64Var(&cfg.scale, "scale", 1_000_000, "multiplier of the rates in scenarios a-c, so that every request is allowed")
	flag.StringVar(&only, "only", "", "run only the rows whose name matches this regular expression (redis_rate is always run, for the ratios)")
	flag.StringVar(&cfg.cpuprof, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.BoolVar(&cfg.pin, "pin", false, "pinned mode: the private redis-server on core 0 alone, this program on the other cores (taskset; Linux, 2 CPUs or more): Redis's CPU per decision as where Redis has a machine of its own")
	flag.Parse()
	if cfg.pin && cfg.redisAddr != "" {
		fatalf("-pin pins the private redis-server this program starts: leave -redis empty")
	}
	if cfg.pin {
		if err := pin(); err != nil {
			fatalf("%v", err)
		}
	}
	if flag.NArg() > 0 {
		fatalf("unexpected arguments %q", flag.Args())
	}
	if cfg.conc < 1 || cfg.nIDs < 1 || cfg.dur <= 0 || cfg.warm < 0 || cfg.scale < 1 || cfg.rounds < 1 {
		fatalf("-concurrency, -identities, -duration, -rounds and -scale must be positive, -warmup not negative")
	}
	if cfg.scale > 4_000_000 {
		fatalf("-scale %d: rates above %d are rejected by ratelimit.NewPolicy (240/h × scale)", cfg.scale, 1_000_000_000)
	}
	for _, f := range strings.Split(batches, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			fatalf("-batch %q: want integers ≥ 0, comma-separated", batches)
		}
		cfg.batches = append(cfg.batches, n)
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			fatalf("-only: %v", err)
		}
		cfg.only = re
	}
	if err := run(cfg, os.Args[1:]); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}

func run(cfg config, args []string) error {
	want := map[string]bool{}
	for _, id := range strings.Split(cfg.sections, ",") {
		id = strings.TrimSpace(id)
		if id == "m" || id == "mem" {
			id = "memory"
		}
		if !slices.Contains(sectionIDs, id) {
			return fmt.Errorf("-sections: unknown section %q (want some of %s)", id, strings.Join(sectionIDs, ","))
		}
		want[id] = true
	}
	var scs []*scenario
	needRedis := false
	for _, sc := range allScenarios(cfg.scale) {
		if want[sc.id] {
			scs = append(scs, sc)
			needRedis = needRedis || !sc.memory
		}
	}

	var proc *redisproc.Proc
	addr := cfg.redisAddr
	var host string
	var port uint64
	if needRedis {
		if addr == "" {
			var err error
			core := -1
			if cfg.pin {
				core = redisCore
			}
			if proc, err = redisproc.StartOnCore(cfg.redisBin, core); err != nil {
				return err
			}
			defer proc.Stop()
			addr = proc.Addr
		}
		var portStr string
		var err error
		if host, portStr, err = net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("-redis %q: %w", addr, err)
		}
		if port, err = strconv.ParseUint(portStr, 10, 16); err != nil {
			return fmt.Errorf("-redis %q: port: %w", addr, err)
		}
	}

	// Leave nothing behind on ^C, and never run unbounded.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		proc.Stop()
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		os.Exit(130)
	}()
	cells := 0
	for _, sc := range scs {
		for _, s := range subjects(sc, cfg.batches) {
			if cfg.want(s) {
				cells++
			}
		}
	}
	budget := time.Duration(cells)*(cfg.dur+cfg.warm)*2 + 2*time.Minute
	watchdog := time.AfterFunc(budget, func() {
		proc.Stop()
		fmt.Fprintf(os.Stderr, "bench: still running after %s, giving up\n", budget)
		os.Exit(3)
	})
	defer watchdog.Stop()

	if cfg.cpuprof != "" {
		f, err := os.Create(cfg.cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	ctx := context.Background()
	var stats *redis.Client
	if needRedis {
		stats = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		defer stats.Close()
		if err := stats.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis at %s: %w", addr, err)
		}
	}
	rep := &report{cfg: cfg, args: args, own: proc != nil, addr: addr, start: time.Now()}
	rep.collectEnv(ctx, stats)

	var trips atomic.Int64
	newClient := func() *redis.Client {
		// go-redis's defaults for every client, ours and the peers'
		// (a pool of 10 connections per CPU).
		c := redis.NewClient(&redis.Options{Addr: addr})
		c.AddHook(tripCounter{&trips})
		return c
	}
	hr := &httprateCounters{host: host, port: uint16(port), conc: cfg.conc}
	runID := strconv.Itoa(os.Getpid())

	if needRedis {
		fmt.Fprintf(os.Stderr, "bench: Redis %s at %s (%s); ", rep.redisVersion, addr,
			map[bool]string{true: "private", false: "shared: INFO counts other clients too"}[proc != nil])
	} else {
		fmt.Fprintf(os.Stderr, "bench: no Redis needed; ")
	}
	fmt.Fprintf(os.Stderr, "%d cells of %s (in %d rounds) + %s warm-up, about %s\n",
		cells, cfg.dur, cfg.rounds, cfg.warm, (time.Duration(cells) * (cfg.dur + cfg.warm)).Round(time.Second))
	for _, sc := range scs {
		n := cfg.nIDs
		if sc.flood {
			n = 1
		}
		if sc.asIs {
			n = asIsIdentities
		}
		tab := &table{sc: sc, nIDs: n}
		var live []*liveCell
		for i, s := range subjects(sc, cfg.batches) {
			if !cfg.want(s) {
				continue
			}
			prefix := fmt.Sprintf("rlbench:%s:%s%02d:", runID, sc.id, i)
			e := &env{sc: sc, ids: newIdentities(n, sc, prefix), prefix: prefix, addr: addr, conc: cfg.conc, newClient: newClient, httprate: hr}
			c := prepareCell(ctx, e, s)
			tab.rows = append(tab.rows, c.res)
			if c.inst != nil {
				live = append(live, c)
			} else {
				fmt.Fprintf(os.Stderr, "  (%s) %-44s %s\n", sc.id, s.name, c.res.summary())
			}
		}
		slice := cfg.dur / time.Duration(cfg.rounds)
		for r := 0; r < cfg.rounds; r++ {
			for k := range live {
				c := live[(k+r)%len(live)] // rotate, so no row always follows the same one
				warm := time.Duration(0)
				if r == 0 {
					warm = cfg.warm
				}
				smp := measure(ctx, stats, &trips, cfg.conc, warm, slice, n, c.inst)
				if smp.errorRate() > 0.01 && c.res.retried < cfg.rounds {
					// A hiccup (on a shared machine, a descheduled Redis)
					// made requests fail: measure this slice once more.
					c.res.retried++
					fmt.Fprintf(os.Stderr, "  (%s) %-44s round %d: %d of %d requests failed (%v), measuring again\n",
						sc.id, c.subj.name, r+1, smp.p.errs, smp.p.ops, smp.p.firstErr)
					smp = measure(ctx, stats, &trips, cfg.conc, 0, slice, n, c.inst)
				}
				c.res.add(smp)
			}
		}
		for _, c := range live {
			c.finish()
			fmt.Fprintf(os.Stderr, "  (%s) %-44s %s\n", sc.id, c.subj.name, c.res.summary())
		}
		rep.tables = append(rep.tables, tab)
	}
	rep.end = time.Now()
	md := rep.markdown()
	fmt.Print(md)
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(md), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (cfg config) want(s subject) bool {
	return cfg.only == nil || cfg.only.MatchString(s.name) || s.baseline
}

const (
	redisRateName     = "go-redis/redis_rate v10"
	redisRateAutoName = "go-redis/redis_rate v10, AutoPipeliner"
	floorName         = "floor: EVALSHA return 1"
	batchedFloorName  = "floor: EVALSHA return 1, AutoPipeliner"
	stateFloorName    = "floor: TIME, HMGET, HSET script, AutoPipeliner"
)

// liveCell is one subject built for one scenario, measured round after
// round.
type liveCell struct {
	subj subject
	inst *instance
	res  *cellResult
}

// prepareCell builds one subject for one scenario and brings it to the
// scenario's starting state. On failure the cell has no instance and its
// result says why it was skipped.
func prepareCell(ctx context.Context, e *env, s subject) *liveCell {
	c := &liveCell{subj: s, res: &cellResult{name: s.name, family: s.family, note: s.note, base: s.base, scripted: s.scripted, storeCalls: -1}}
	inst, err := s.build(e)
	if err != nil {
		c.res.skipped = "could not build: " + err.Error()
		return c
	}
	if inst.storeCalls != nil {
		c.res.storeCalls = 0
	}
	fail := func(why string) *liveCell {
		inst.close()
		c.res.skipped = why
		return c
	}
	if e.sc.flood && s.family != "floor" {
		// Spend the identity's allowance first: the flood is measured
		// on the deny path. (The floors never deny.)
		denied := false
		for i := 0; i < 5000 && !denied; i++ {
			if denied, err = inst.op(ctx, 0); err != nil {
				return fail("could not exhaust the limit: " + err.Error())
			}
		}
		if !denied {
			return fail("5000 requests were not denied")
		}
	} else if _, err := inst.op(ctx, 0); err != nil {
		// A subject that cannot work at all says why instead of
		// filling a row with errors.
		return fail("first request failed: " + err.Error())
	} else if e.sc.asIs {
		// Every identity's key exists before measuring, so the
		// measurement is of calls that find their counters.
		if err := touchAll(ctx, inst, len(e.ids.keys), e.conc); err != nil {
			return fail("could not touch every identity: " + err.Error())
		}
	}
	c.inst = inst
	return c
}

// touchAll sends one request for each of n identities, conc at a time,
// and returns the first error or denial.
func touchAll(ctx context.Context, inst *instance, n, conc int) error {
	var next atomic.Int64
	errs := make(chan error, conc)
	for w := 0; w < conc; w++ {
		go func() {
			for {
				id := int(next.Add(1)) - 1
				if id >= n {
					errs <- nil
					return
				}
				denied, err := inst.op(ctx, id)
				if err == nil && denied {
					err = fmt.Errorf("identity %d denied", id)
				}
				if err != nil {
					next.Store(int64(n)) // stop the others
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for w := 0; w < conc; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// finish releases the instance and completes the row.
func (c *liveCell) finish() {
	c.inst.close()
	res := c.res
	if c.inst.hookErrs != nil {
		if n, first := c.inst.hookErrs(); n > 0 {
			// The Limiter's error hook saw store failures (it fails
			// open, so the op could not report them).
			res.errs += uint64(n)
			if res.firstErr == "" {
				res.firstErr = first
			}
		}
	}
	if c.subj.ownClient {
		// Not seen by the hook: one MGET, then one MULTI…EXEC, per limit.
		res.roundTrips = -1
		for _, cmd := range res.cmds {
			if cmd.name == "mget" || cmd.name == "exec" {
				res.roundTripsINFO += cmd.calls
			}
		}
	}
}

func (r *cellResult) summary() string {
	if r.skipped != "" {
		return "skipped: " + r.skipped
	}
	s := fmt.Sprintf("%9.0f ops/s  p50 %6.0fµs  p99 %7.0fµs  redis %5.1fµs/op  client %5.1fµs/op  %5.1f allocs/op",
		r.opsPerSec(), us(r.hist.quantile(0.5)), us(r.hist.quantile(0.99)), r.perOp(r.redisCPU*1e6), r.perOp(float64(r.clientCPU.Microseconds())), r.perOp(float64(r.allocs)))
	if r.errs > 0 {
		s += fmt.Sprintf("  %d errors (%s)", r.errs, r.firstErr)
	}
	return s
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func init() { runtime.MemProfileRate = 0 } // keep allocation counting cheap
