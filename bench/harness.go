package main

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// opFunc makes one rate-limited decision for identity id (an index into
// the scenario's identities): one call for our store, the whole sequence
// of per-limit calls for a peer. denied reports a refusal.
type opFunc func(ctx context.Context, id int) (denied bool, err error)

// hist is a log-linear latency histogram in nanoseconds: 32 sub-buckets
// per power of two, so every quantile is within about 3%.
type hist struct{ n [64 * 32]uint64 }

const subBits = 5

func histIndex(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1
	return (e+1)<<subBits + int(v>>e) - 1<<subBits
}

// histValue is the midpoint of bucket i.
func histValue(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	e := i>>subBits - 1
	m := uint64(i&(1<<subBits-1) + 1<<subBits)
	return m<<e + (uint64(1)<<e)/2
}

func (h *hist) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := histIndex(uint64(d))
	if i >= len(h.n) {
		i = len(h.n) - 1
	}
	h.n[i]++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.n {
		h.n[i] += c
	}
}

// quantile returns the q-quantile (0 < q ≤ 1).
func (h *hist) quantile(q float64) time.Duration {
	var total uint64
	for _, c := range h.n {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.n {
		seen += c
		if seen >= rank {
			return time.Duration(histValue(i))
		}
	}
	return time.Duration(histValue(len(h.n) - 1))
}

type workerResult struct {
	ops, denied, errs uint64
	firstErr          error
	hist              hist
	_                 [64]byte
}

type phase struct {
	ops, denied, errs uint64
	firstErr          error
	elapsed           time.Duration
	hist              hist
}

// runPhase runs op from conc goroutines for d, each picking identities
// uniformly at random from nIDs (always 0 when nIDs is 1).
func runPhase(ctx context.Context, conc int, d time.Duration, nIDs int, op opFunc) *phase {
	var stop atomic.Bool
	var wg sync.WaitGroup
	res := make([]workerResult, conc)
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func(r *workerResult, seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
			for !stop.Load() {
				id := 0
				if nIDs > 1 {
					id = rng.IntN(nIDs)
				}
				t0 := time.Now()
				denied, err := op(ctx, id)
				lat := time.Since(t0)
				r.ops++
				switch {
				case err != nil:
					r.errs++
					if r.firstErr == nil {
						r.firstErr = err
					}
				case denied:
					r.denied++
				}
				r.hist.add(lat)
			}
		}(&res[w], uint64(w)+1)
	}
	wg.Wait()
	p := &phase{elapsed: time.Since(start)}
	for i := range res {
		r := &res[i]
		p.ops += r.ops
		p.denied += r.denied
		p.errs += r.errs
		if p.firstErr == nil {
			p.firstErr = r.firstErr
		}
		p.hist.merge(&r.hist)
	}
	return p
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  int64
}

// redisSnap is what INFO says at one instant.
type redisSnap struct {
	cmds map[string]cmdStat
	cpu  float64 // used_cpu_user + used_cpu_sys, seconds
	err  error
}

// Commands the harness or the clients' connection setup send, left out of
// the per-op counts: INFO is ours, HELLO and CLIENT SETINFO/SETNAME come
// with each new connection.
func ignoredCmd(name string) bool {
	return name == "info" || name == "hello" || strings.HasPrefix(name, "client|")
}

func snapRedis(ctx context.Context, c *redis.Client) redisSnap {
	s := redisSnap{cmds: map[string]cmdStat{}}
	txt, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		s.err = err
		return s
	}
	var user, sys float64
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(k, "cmdstat_"):
			var st cmdStat
			for _, kv := range strings.Split(v, ",") {
				f, val, _ := strings.Cut(kv, "=")
				switch f {
				case "calls":
					st.calls, _ = strconv.ParseInt(val, 10, 64)
				case "usec":
					st.usec, _ = strconv.ParseInt(val, 10, 64)
				}
			}
			s.cmds[strings.TrimPrefix(k, "cmdstat_")] = st
		case k == "used_cpu_user":
			user, _ = strconv.ParseFloat(v, 64)
		case k == "used_cpu_sys":
			sys, _ = strconv.ParseFloat(v, 64)
		}
	}
	s.cpu = user + sys
	return s
}

// cmdDelta is one command's share of a measured phase.
type cmdDelta struct {
	name  string
	calls int64
	usec  int64
}

// diffRedis returns the per-command deltas (most calls first, ignored
// ones dropped), their total calls (commands run inside scripts included),
// and the CPU seconds Redis used.
func diffRedis(a, b redisSnap) (cmds []cmdDelta, calls int64, cpu float64) {
	for name, sb := range b.cmds {
		if ignoredCmd(name) {
			continue
		}
		sa := a.cmds[name]
		if d := sb.calls - sa.calls; d > 0 {
			cmds = append(cmds, cmdDelta{name, d, sb.usec - sa.usec})
			calls += d
		}
	}
	sort.Slice(cmds, func(i, j int) bool {
		if cmds[i].calls != cmds[j].calls {
			return cmds[i].calls > cmds[j].calls
		}
		return cmds[i].name < cmds[j].name
	})
	return cmds, calls, b.cpu - a.cpu
}

// cellResult is one row of a table: the sum of its samples (one per
// round).
type cellResult struct {
	name, family, note string
	base               string // the row this one is compared with (subject.base)
	skipped            string // why the row has no numbers
	scripted           bool

	samples, retried  int
	ops, denied, errs uint64
	firstErr          string
	elapsed           time.Duration
	hist              hist

	redisCalls int64
	roundTrips int64 // client-side: commands plus pipelines sent; -1: not seen
	// roundTripsINFO is the round trips inferred from INFO when the
	// client could not be hooked.
	roundTripsINFO int64
	redisCPU       float64 // seconds
	cmds           []cmdDelta
	redisErr       string

	clientCPU     time.Duration
	allocs, bytes uint64

	// storeCalls: calls that reached the Redis store behind a deny
	// cache; -1 when the row has no deny cache.
	storeCalls int64
}

// sample is one measured phase of one cell.
type sample struct {
	p             *phase
	clientCPU     time.Duration
	roundTrips    int64
	storeCalls    int64
	allocs, bytes uint64
	cmds          []cmdDelta
	redisCalls    int64
	redisCPU      float64
	redisErr      bool
}

// errorRate is the share of the sample's requests that failed.
func (s *sample) errorRate() float64 {
	if s.p.ops == 0 {
		return 1
	}
	return float64(s.p.errs) / float64(s.p.ops)
}

func (r *cellResult) add(s *sample) {
	r.samples++
	p := s.p
	r.ops += p.ops
	r.denied += p.denied
	r.errs += p.errs
	if r.firstErr == "" && p.firstErr != nil {
		r.firstErr = p.firstErr.Error()
	}
	r.elapsed += p.elapsed
	r.hist.merge(&p.hist)
	r.clientCPU += s.clientCPU
	r.roundTrips += s.roundTrips
	if r.storeCalls >= 0 {
		r.storeCalls += s.storeCalls
	}
	r.allocs += s.allocs
	r.bytes += s.bytes
	r.redisCalls += s.redisCalls
	r.redisCPU += s.redisCPU
	if s.redisErr {
		r.redisErr = "INFO failed"
	}
	for _, c := range s.cmds {
		found := false
		for i := range r.cmds {
			if r.cmds[i].name == c.name {
				r.cmds[i].calls += c.calls
				r.cmds[i].usec += c.usec
				found = true
			}
		}
		if !found {
			r.cmds = append(r.cmds, c)
		}
	}
	sort.Slice(r.cmds, func(i, j int) bool {
		if r.cmds[i].calls != r.cmds[j].calls {
			return r.cmds[i].calls > r.cmds[j].calls
		}
		return r.cmds[i].name < r.cmds[j].name
	})
}

func (r *cellResult) opsPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

func (r *cellResult) perOp(v float64) float64 {
	if r.ops == 0 {
		return 0
	}
	return v / float64(r.ops)
}

// invalid reports a row whose numbers do not describe the limiter: more
// than 0.1% of its requests failed (a failing limiter is fast for the
// wrong reasons).
func (r *cellResult) invalid() bool { return r.errs*1000 > r.ops }

// measure runs a warm-up phase (if warm > 0), then the measured phase
// between snapshots of the Go heap, this process's CPU time, the round
// trips counted by trips, the store calls counted by calls (if not nil),
// and Redis's INFO (if stats is not nil: the memory section has no Redis).
func measure(ctx context.Context, stats *redis.Client, trips *atomic.Int64, conc int, warm, d time.Duration, nIDs int, inst *instance) *sample {
	op := inst.op
	if warm > 0 {
		runPhase(ctx, conc, warm, nIDs, op)
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	var r0, r1 redisSnap
	var c0, c1 int64
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	if stats != nil {
		r0 = snapRedis(ctx, stats)
	}
	t0 := trips.Load()
	if inst.storeCalls != nil {
		c0 = inst.storeCalls.Load()
	}

	p := runPhase(ctx, conc, d, nIDs, op)

	if inst.storeCalls != nil {
		c1 = inst.storeCalls.Load()
	}
	t1 := trips.Load()
	if stats != nil {
		r1 = snapRedis(ctx, stats)
	}
	cpu1 := processCPU()
	runtime.ReadMemStats(&m1)

	s := &sample{
		p:          p,
		clientCPU:  cpu1 - cpu0,
		roundTrips: t1 - t0,
		storeCalls: c1 - c0,
		allocs:     m1.Mallocs - m0.Mallocs,
		bytes:      m1.TotalAlloc - m0.TotalAlloc,
	}
	switch {
	case stats == nil:
	case r0.err != nil || r1.err != nil:
		s.redisErr = true
	default:
		s.cmds, s.redisCalls, s.redisCPU = diffRedis(r0, r1)
	}
	return s
}
