package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
	"github.com/ratelimitkit/ratelimit/lua"
)

// fastVariants splits the baked fast script of b into the three scripts
// the common-path test runs: the script as sent (common path, then
// fast.lua for the rest), fast.lua alone (the reference) and the common
// path alone, whose hand-overs answer -1 and write nothing.
func fastVariants(t *testing.T, b lua.Baked) (full, general, common string) {
	t.Helper()
	full = lua.BakeFast(b)
	i := strings.Index(full, "\n"+lua.CommonMark+"\n")
	if !strings.HasPrefix(full, "local function general(now, v)\n") || i < 0 {
		t.Fatal("BakeFast does not hold a function general then the common path")
	}
	general = full[:i+1] + "return general()\n"
	common = "local function general() return -1 end" + full[i:]
	return full, general, common
}

// TestFastCommonPathMatchesGeneral replays random traces of plain Takes
// on one key through the fast script as sent and through fast.lua alone
// (the script every earlier test and the equivalence suite pin), on two
// keys of the same server, and requires the same reply, the same fields
// and the same expiry after every call. The traces mix admitted calls,
// denials, peeks, costs above the capacity, resends, penalties, gaps of
// every size, a clock stepping back and a key of another type. It also
// counts the calls the common path answered alone, so that the test
// cannot pass by handing everything over.
func TestFastCommonPathMatchesGeneral(t *testing.T) {
	servers := map[string]redis.UniversalClient{}
	mr := miniredis.RunT(t)
	servers["miniredis"] = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	if realRedis() {
		servers["real"] = redistest.StartServer(t).Client(t)
	} else {
		t.Log("no redis-server on PATH: comparing on miniredis only")
	}
	traces, steps := 10, 200
	if raceDetector {
		traces, steps = 4, 100
	}
	for name, c := range servers {
		t.Run(name, func(t *testing.T) {
			answered, calls := 0, 0
			for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow,
				ratelimit.TokenBucket, ratelimit.SlidingWindowApprox, ratelimit.SlidingLog} {
				for tr := range traces {
					rng := rand.New(rand.NewPCG(uint64(alg), uint64(tr)))
					p := randomPolicy(rng, alg)
					if tr%2 == 0 {
						p = roomyPolicy(rng, alg)
					}
					a, n := compareFastTrace(t, c, rng, p, fmt.Sprintf("%s/%d", alg, tr), steps)
					answered, calls = answered+a, calls+n
				}
			}
			// Most calls of the roomy traces are admitted and answered by
			// the common path; the others (small rates) deny often.
			if answered < calls/4 {
				t.Fatalf("the common path answered %d of %d calls alone; want at least a quarter", answered, calls)
			}
			t.Logf("the common path answered %d of %d calls alone", answered, calls)
		})
	}
}

// roomyPolicy is a policy whose limits admit most calls of a trace: rates
// from 40 to 5,000 (sub-buckets for a sliding window), one to three
// limits, sometimes a penalty.
func roomyPolicy(rng *rand.Rand, alg ratelimit.Algorithm) *ratelimit.Policy {
	periods := []time.Duration{250 * time.Millisecond, time.Second, 10 * time.Second, time.Minute, time.Hour}
	rng.Shuffle(len(periods), func(i, j int) { periods[i], periods[j] = periods[j], periods[i] })
	limits := make([]ratelimit.Limit, 1+rng.IntN(3))
	for i := range limits {
		limits[i] = ratelimit.Limit{Rate: 40 + rng.Int64N(5000), Period: periods[i]}
		if alg == ratelimit.SlidingLog {
			limits[i].Rate = 40 + rng.Int64N(60)
		}
	}
	p, err := ratelimit.NewPolicy("roomy", alg, limits...)
	if err != nil {
		panic(err)
	}
	if rng.IntN(4) == 0 {
		if p, err = p.WithBlockFor(periods[0] / 2); err != nil {
			panic(err)
		}
	}
	return p
}

func compareFastTrace(t *testing.T, c redis.UniversalClient, rng *rand.Rand, p *ratelimit.Policy, name string, steps int) (answered, calls int) {
	t.Helper()
	ctx := context.Background()
	b := lua.Baked{
		TTLMS:   (p.TTL() + time.Hour).Milliseconds(), // the keys outlive the test's virtual clock
		BlockUS: p.BlockFor().Microseconds(),
		IDTTLUS: p.MaxPeriod().Microseconds(),
		Reserve: p.Reserves(),
		P:       luaParams(p),
	}
	full, general, common := fastVariants(t, b)
	sFull, sGen, sCommon := redis.NewScript(full), redis.NewScript(general), redis.NewScript(common)
	kh, kg := "hot:"+name, "gen:"+name
	c.Del(ctx, kh, kg)
	periodUS, widthUS, _, _ := p.Compiled()
	now := int64(1_700_000_000_000_000) + rng.Int64N(1_000_000_000)
	var ids []string // the resend IDs sent so far
	for i := range steps {
		l := rng.IntN(len(periodUS))
		switch r := rng.IntN(20); {
		case r < 6: // the same sub-bucket
			now += rng.Int64N(widthUS[l]/4 + 1)
		case r < 10:
			now += widthUS[l]
		case r < 13:
			now += widthUS[l] * (2 + rng.Int64N(12))
		case r < 14:
			now += periodUS[l] + rng.Int64N(periodUS[l])
		case r < 15:
			now -= rng.Int64N(widthUS[l] + 1) // the clock steps back
		}
		cost := int64(1)
		switch r := rng.IntN(12); {
		case r == 0:
			cost = 0
		case r == 1:
			cost = 2 + rng.Int64N(3)
		case r == 2:
			cost = p.Limit(l).Rate + 1 + rng.Int64N(2)
		}
		rid := fmt.Sprintf("%08x", rng.Uint32())
		switch r := rng.IntN(16); {
		case r == 0:
			rid = ""
		case r < 3 && len(ids) > 0: // a resend of one of the last six calls
			rid = ids[max(0, len(ids)-1-rng.IntN(6))]
		}
		ids = append(ids, rid)
		if rng.IntN(150) == 0 { // another type at the key
			c.Set(ctx, kh, "x", 0)
			c.Set(ctx, kg, "x", 0)
		}
		args := []any{now, cost, rid}
		want, errG := sGen.Run(ctx, c, []string{kg}, args...).Result()
		got, errH := sCommon.Run(ctx, c, []string{kh}, args...).Result()
		if errH == nil && got == int64(-1) {
			got, errH = sFull.Run(ctx, c, []string{kh}, args...).Result()
		} else if errH == nil {
			answered++
		}
		calls++
		if fmt.Sprint(errH) != fmt.Sprint(errG) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s step %d (now %d, cost %d, id %q): common path %v (%v), fast.lua %v (%v)", name, i, now, cost, rid, got, errH, want, errG)
		}
		hf, errHF := c.HGetAll(ctx, kh).Result()
		gf, errGF := c.HGetAll(ctx, kg).Result()
		// The common path writes b and g on a new key (0 means none).
		for _, f := range []string{"b", "g"} {
			if hf[f] == "0" && gf[f] == "" {
				delete(hf, f)
			}
		}
		if fmt.Sprint(errHF) != fmt.Sprint(errGF) || !reflect.DeepEqual(hf, gf) {
			t.Fatalf("%s step %d (now %d, cost %d, id %q): fields differ:\ncommon path %v (%v)\nfast.lua    %v (%v)", name, i, now, cost, rid, hf, errHF, gf, errGF)
		}
		th, tg := c.PTTL(ctx, kh).Val(), c.PTTL(ctx, kg).Val()
		if d := th - tg; d < -time.Second || d > time.Second {
			t.Fatalf("%s step %d: expiry %v on the common path, %v with fast.lua", name, i, th, tg)
		}
	}
	return answered, calls
}
