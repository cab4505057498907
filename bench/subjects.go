package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// limitSpec is one limit of a scenario: rate per period.
type limitSpec struct {
	rate   int64
	period time.Duration
}

func (l limitSpec) suffix() string { return ratelimit.FormatPeriod(l.period) }

// scenario is one table: the limits every request is checked against, and
// who sends the requests.
type scenario struct {
	id, title string
	limits    []limitSpec
	twoIDs    bool // each request is limited by client IP and by user
	flood     bool // one identity, already denied before measuring
	memory    bool // in-process stores only: no Redis involved
	// asIs: the unscaled policy, so that every algorithm counts it as it
	// would in production (the sliding window's 10/s by an exact log, and
	// the sliding log at all); asIsIdentities callers, each sent one
	// request before measuring, keep every request allowed.
	asIs bool
	// waits: Limiter.Wait on one contended key, and the cost of a
	// Request.ID (section w).
	waits bool
}

// sectionIDs are the values -sections accepts, in report order.
var sectionIDs = []string{"a", "b", "c", "d", "e", "w", "memory"}

// asIsIdentities is the number of callers of section e: enough that the
// unscaled 10/s, 120/m and 240/h admit every request at the ~30,000
// requests per second of this machine (about 3 per caller per second,
// under 10 in a 2s cell), few enough that most calls find their key.
const asIsIdentities = 10_000

func allScenarios(scale int64) []*scenario {
	sc := strconv.FormatInt(scale, 10)
	return []*scenario{
		{id: "a", title: "one limit, 10/s ×" + sc, limits: []limitSpec{{10 * scale, time.Second}}},
		{id: "b", title: "three limits, 10/s + 120/m + 240/h ×" + sc, limits: threeLimits(scale)},
		{id: "c", title: "three limits × two identities (client IP and user), ×" + sc, limits: threeLimits(scale), twoIDs: true},
		{id: "d", title: "flood from one identity that is already denied, 10/s + 120/m + 240/h (not scaled)", limits: threeLimits(1), flood: true},
		{id: "e", title: "three limits as they are, 10/s + 120/m + 240/h (not scaled; the sliding window counts 10/s exactly, by a log), " + strconv.Itoa(asIsIdentities) + " identities", limits: threeLimits(1), asIs: true},
		{id: "w", title: "waiting in line (Limiter.Wait: every caller on one key, " + thousands(waitRate) + "/s, not scaled) and the cost of a Request.ID (one limit 10/s ×" + sc + ")",
			limits: []limitSpec{{10 * scale, time.Second}}, waits: true},
		{id: "memory", title: "memory store, no Redis: one limit 10/s ×" + strconv.Itoa(memoryScale) + ", and the three-limit policy ×" + strconv.Itoa(memoryScale),
			limits: []limitSpec{{10 * memoryScale, time.Second}}, memory: true},
	}
}

// memoryScale multiplies the rates of the memory section instead of
// -scale: sethvargo/go-limiter's memory store refills interval÷tokens
// tokens per tick (nanoseconds per token, used as a count), so above about
// 31,623 tokens per second a bucket refills only in part and starts
// denying. 10/s ×2000 = 20,000/s per identity stays below that and above
// what 1000 identities receive here (a few thousand per second each).
const memoryScale = 2000

// threeLimits is the three-limit policy of scenario b, ×scale.
func threeLimits(scale int64) []limitSpec {
	return []limitSpec{{10 * scale, time.Second}, {120 * scale, time.Minute}, {240 * scale, time.Hour}}
}

// identities are the callers of a scenario, prepared before measuring so
// that no formatting is timed.
type identities struct {
	keys [][]string      // per identity: "ip:…" (and "user:…")
	reqs []*http.Request // per identity, read-only: RemoteAddr and X-User set
	perL [][]string      // per identity: one key per (key, limit), for the peers
}

func newIdentities(n int, sc *scenario, prefix string) *identities {
	ids := &identities{keys: make([][]string, n), reqs: make([]*http.Request, n), perL: make([][]string, n)}
	for i := 0; i < n; i++ {
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String()
		user := "u" + strconv.Itoa(i)
		keys := []string{"ip:" + ip}
		if sc.twoIDs {
			keys = append(keys, "user:"+user)
		}
		ids.keys[i] = keys
		r := httptest.NewRequest(http.MethodGet, "/api/items", nil)
		r.RemoteAddr = ip + ":40000"
		r.Header.Set("X-User", user)
		ids.reqs[i] = r
		for _, k := range keys {
			for _, l := range sc.limits {
				ids.perL[i] = append(ids.perL[i], prefix+k+":"+l.suffix())
			}
		}
	}
	return ids
}

// env is what a subject is built from for one cell.
type env struct {
	sc        *scenario
	ids       *identities
	prefix    string // unique per cell
	addr      string
	conc      int
	newClient func() *redis.Client
	httprate  *httprateCounters
}

// instance is a subject ready to run: its op, and what to release after.
type instance struct {
	op    opFunc
	close func()
	// hookErrs reports errors the op could not return itself (our
	// Limiter fails open; its error hook counts them).
	hookErrs func() (int64, string)
	// storeCalls, when set, counts the calls that reached the Redis store
	// behind a deny cache (cache misses).
	storeCalls *atomic.Int64
}

type subject struct {
	name   string
	family string // "ours", "peer" or "floor"
	note   string
	// scripted: every command but FCALL/EVAL/EVALSHA runs inside the script,
	// so the script's own time (Lua and call glue) can be told apart.
	scripted bool
	// ownClient: the peer builds its own go-redis client, so round trips
	// are counted from INFO commandstats instead of a client hook.
	ownClient bool
	// base is the name of our plain row (same API and algorithm) that a
	// batched or deny-cache row is compared with; "" for the others.
	base string
	// baseline: always run, whatever -only says (other rows' ratios
	// divide by it).
	baseline bool
	build    func(e *env) (*instance, error)
}

// algorithms get a plain "ours Take" row in every Redis section whose
// rates their policy accepts: the sliding log keeps one time per unit of
// rate, at most ratelimit.MaxLogRate, so it is measured in d and e only
// (a–c scale every rate up by -scale, which also makes the sliding
// window count every limit in sub-buckets: e measures its exact path).
var algorithms = []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.TokenBucket, ratelimit.FixedWindow,
	ratelimit.SlidingLog, ratelimit.SlidingWindowApprox}

// fullAlgorithms also get the Handler, batched, deny-cache and memory
// rows, on which the targets are judged. The Handler's own work, batching
// and the deny cache do not depend on the algorithm, so the two others get
// a Take row only, which keeps the default run within its time.
var fullAlgorithms = algorithms[:3]

// variant is how our Redis store is wrapped in a row. The zero variant is
// the store as NewRedis builds it with no options (batching on).
type variant struct {
	setBatch  bool // pass store.WithBatching(batch)
	batch     int  // its value; 0 turns batching off
	denyCache bool // store.NewDenyCache in front
}

func (v variant) suffix() string {
	switch {
	case v.denyCache:
		return ", deny cache"
	case v.setBatch && v.batch <= 0:
		return ", unbatched"
	case v.setBatch:
		return ", batched " + strconv.Itoa(v.batch)
	}
	return ""
}

func (v variant) note(api string) string {
	switch {
	case v.denyCache:
		return api + " on store.NewDenyCache(store.NewRedis(client)): denials answered in process while they hold"
	case v.setBatch && v.batch <= 0:
		return api + " on store.NewRedis(client, store.WithBatching(0)): batching off, one command per Take"
	case v.setBatch:
		return api + " on store.NewRedis(client, store.WithBatching(" + strconv.Itoa(v.batch) + "))"
	}
	return api + " on store.NewRedis(client): no options (batching on, " + strconv.Itoa(store.DefaultBatching) + " calls in flight)"
}

// waitRate is the rate of the Wait rows of section w: every caller waits in
// line on one key, so a row's ops/s should be this rate.
const waitRate = 10_000

// waitSubjects are the rows of section w.
func waitSubjects() []subject {
	var s []subject
	for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.TokenBucket} {
		plain := "ours Take, " + alg.String()
		s = append(s,
			subject{name: plain, family: "ours", scripted: true, note: "store.Redis.Take, no options",
				build: func(e *env) (*instance, error) { return buildOursTake(e, alg, variant{}) }},
			subject{name: plain + ", Request.ID", family: "ours", scripted: true, base: plain,
				note:  "store.Redis.Take with a new Request.ID on every request: its ID record (one small hash per identity, kept for the policy's longest period) is written with the charge",
				build: func(e *env) (*instance, error) { return buildOursIDs(e, alg) }})
	}
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.SlidingWindow} {
		how, name := "burst 1: reserves its place in line in the same script call, so waiters leave one every 100 µs", "ours Wait, token-bucket burst 1, one key"
		if alg == ratelimit.SlidingWindow {
			how, name = "sub-buckets cannot reserve: waits Retry-After and asks again; it admits up to the rate in any window, so each round (after the pause while other rows run) starts with a full window", "ours Wait, sliding-window, one key"
		}
		s = append(s, subject{name: name, family: "ours", scripted: true,
			note:  "Limiter.Wait(ctx, key) by every caller on one key under " + thousands(waitRate) + "/s: " + how,
			build: func(e *env) (*instance, error) { return buildOursWait(e, alg) }})
	}
	return append(s, subject{name: redisRateName, family: "peer", note: "GCRA, one EVALSHA per limit", scripted: true, baseline: true,
		build: func(e *env) (*instance, error) { return buildRedisRate(e, false) }})
}

// buildOursIDs is buildOursTake with a new Request.ID on every request.
func buildOursIDs(e *env, alg ratelimit.Algorithm) (*instance, error) {
	var seq atomic.Int64
	return buildOurs(e, alg, variant{}, func(e *env, st ratelimit.Store, pol *ratelimit.Policy) (*instance, error) {
		keys := e.ids.keys
		return &instance{op: func(ctx context.Context, id int) (bool, error) {
			req := ratelimit.Request{Policy: pol, Keys: keys[id], Cost: 1, ID: "r" + strconv.FormatInt(seq.Add(1), 36)}
			d, err := st.Take(ctx, req)
			return !d.Allowed, err
		}}, nil
	})
}

// buildOursWait has every caller wait in line on one key of a policy of
// waitRate per second (the token bucket with a burst of 1, so that it
// paces from the first request of each round).
func buildOursWait(e *env, alg ratelimit.Algorithm) (*instance, error) {
	st, c, _, err := ourStore(e, variant{})
	if err != nil {
		return nil, err
	}
	opts := []ratelimit.PolicyOption{ratelimit.Named("wait"), ratelimit.WithAlgorithm(alg)}
	if alg == ratelimit.TokenBucket {
		opts = append(opts, ratelimit.WithBurst(1))
	}
	pol, err := ratelimit.ParsePolicy(strconv.Itoa(waitRate)+"/s", opts...)
	if err == nil {
		var lim *ratelimit.Limiter
		if lim, err = ratelimit.New(st, pol, ratelimit.WithTimeout(handlerTimeout)); err == nil {
			return &instance{
				op: func(ctx context.Context, _ int) (bool, error) {
					_, err := lim.Wait(ctx, "job:1")
					return false, err
				},
				close: func() { c.Close() },
			}, nil
		}
	}
	c.Close()
	return nil, err
}

// subjects returns the rows of one section. batches are the
// store.WithBatching values of the extra rows of scenarios a–c (0: the
// store with batching off).
func subjects(sc *scenario, batches []int) []subject {
	if sc.memory {
		return memorySubjects()
	}
	if sc.waits {
		return waitSubjects()
	}
	var variants []variant
	if sc.flood {
		variants = []variant{{denyCache: true}}
	} else {
		for _, n := range batches {
			variants = append(variants, variant{setBatch: true, batch: n})
		}
	}
	if sc.asIs {
		variants = nil
	}
	s := []subject{}
	for _, api := range []string{"Take", "Handler"} {
		for _, v := range append([]variant{{}}, variants...) {
			algs := fullAlgorithms
			if api == "Take" && v == (variant{}) {
				algs = algorithms
			} else if sc.asIs {
				continue
			} else if api == "Handler" && v.setBatch && len(batches) == 1 {
				continue // batching is below the Handler: the Take rows show it
			}
			for _, alg := range algs {
				if _, err := policyOf(alg, sc.limits); err != nil {
					continue // the sliding log above its largest rate
				}
				plain := "ours " + api + ", " + alg.String()
				sub := subject{name: plain + v.suffix(), family: "ours", scripted: true}
				if v != (variant{}) {
					sub.base = plain
				}
				if api == "Take" {
					sub.note = v.note("store.Redis.Take: one FCALL (EVALSHA where Redis has no functions) per request for all limits and keys")
					sub.build = func(e *env) (*instance, error) { return buildOursTake(e, alg, v) }
				} else {
					sub.note = v.note("Limiter.Handler(next).ServeHTTP in process: identify, Take, headers")
					sub.build = func(e *env) (*instance, error) { return buildOursHandler(e, alg, v) }
				}
				s = append(s, sub)
			}
		}
	}
	redisRate := subject{name: redisRateName, family: "peer", note: "GCRA, one EVALSHA per limit", scripted: true, baseline: true,
		build: func(e *env) (*instance, error) { return buildRedisRate(e, false) }}
	if sc.asIs {
		return append(s, redisRate) // the peers are compared in a–d
	}
	s = append(s, redisRate,
		subject{name: redisRateAutoName, family: "peer", note: "redis_rate on go-redis's AutoPipeliner (`client.AutoPipeline()`): concurrent EVALSHAs share pipelines", scripted: true,
			build: func(e *env) (*instance, error) { return buildRedisRate(e, true) }},
		subject{name: "ulule/limiter v3", family: "peer", note: "fixed window, one EVALSHA per limit (charges denied requests too)", scripted: true, build: buildUlule},
		subject{name: "throttled v2", family: "peer", note: "GCRA, pipeline TIME+GET then EVAL (CAS) per limit", build: buildThrottled},
		subject{name: "go-chi/httprate-redis", family: "peer", note: "sliding-window counter, MGET then MULTI INCRBY EXPIRE EXEC per limit, under a per-limiter mutex", ownClient: true, build: buildHTTPRate},
		subject{name: "floor: PING", family: "floor", note: "one PING per request", build: buildPing},
		subject{name: floorName, family: "floor", note: "one EVALSHA of `return 1` per request", scripted: true,
			build: func(e *env) (*instance, error) { return buildEvalFloor(e, false) }},
		subject{name: batchedFloorName, family: "floor", note: "one EVALSHA of `return 1` per request through go-redis's AutoPipeliner: concurrent calls share pipelines", scripted: true,
			build: func(e *env) (*instance, error) { return buildEvalFloor(e, true) }},
	)
	if !sc.twoIDs { // ulule's middleware keys by one identity
		s = append(s, subject{name: ululeHTTPName, family: "peer", note: "ulule/limiter's net/http middleware (drivers/middleware/stdlib), one per limit, chained, called in process as ours Handler is", scripted: true, build: buildUluleHTTP})
	}
	if sc.id == "a" {
		s = append(s, subject{name: stateFloorName, family: "floor", note: "one EVALSHA per request, through go-redis's AutoPipeliner, of a script that only calls `TIME`, `HMGET` of two fields of the identity's key and `HSET` of them: the least a limiter keeping its state in a hash on Redis's clock sends, with nothing computed", scripted: true,
			build: buildStateFloor})
	}
	return s
}
