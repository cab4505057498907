package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// The targets of the issues "Performance: the fastest distributed limiter
// in Go, shown side by side" and "Fastest by default", each judged from
// this run's own tables.
const (
	oneVsUlule      = 1.1  // (a) ours, default algorithm ÷ ulule/limiter ops/s
	oneVsRedisRate  = 1.5  // (a) ours ÷ redis_rate
	threeVsRedis    = 3    // (b) ours ÷ redis_rate
	threeVsUlule    = 2    // (b) ours ÷ ulule/limiter
	floorShare      = 0.5  // (a) our rows ÷ the batched floor
	p50Slack        = 1.1  // 1 caller: p50 ≤ this × the floor's p50 + the script's time
	idleSlack       = 0.05 // 1 and 8 callers: default within 5% of WithBatching(0)
	denyTarget      = 10   // deny cache ÷ Redis-bound ops/s, scenario d
	memoryTarget    = 2    // ours ÷ sethvargo ns/op, memory section, one limit
	runTimeTarget   = 4 * time.Minute
	runTimeTolerant = 4*time.Minute + 15*time.Second // "about four minutes"
)

type target struct{ what, measured, target, result string }

// short names the algorithms in the targets table.
func short(a ratelimit.Algorithm) string {
	switch a {
	case ratelimit.SlidingWindow:
		return "sliding"
	case ratelimit.TokenBucket:
		return "token"
	case ratelimit.FixedWindow:
		return "fixed"
	case ratelimit.SlidingLog:
		return "log"
	case ratelimit.SlidingWindowApprox:
		return "approx"
	}
	return a.String()
}

func verdict(met, all int) string {
	switch {
	case all == 0:
		return "not measured"
	case met == all:
		return "**met**"
	case met == 0:
		return "**missed**"
	}
	return fmt.Sprintf("**missed** (%d of %d rows met)", met, all)
}

// bestRow returns the valid row of family fam with the most ops/s.
func bestRow(t *table, fam string) *cellResult {
	var best *cellResult
	for _, row := range t.rows {
		if row.family == fam && row.ok() && (best == nil || row.opsPerSec() > best.opsPerSec()) {
			best = row
		}
	}
	return best
}

// perRow lists f(row) for our rows "ours <api>, <alg><suffix>" of t, by API
// and algorithm, and counts those for which ok holds.
func perRow(t *table, suffix string, f func(row *cellResult) (float64, bool), ok func(float64) bool) (string, int, int) {
	var parts []string
	met, all := 0, 0
	for _, api := range []string{"Take", "Handler"} {
		var ps []string
		for _, alg := range fullAlgorithms {
			all++
			x, found := f(t.row("ours " + api + ", " + alg.String() + suffix))
			if !found {
				ps = append(ps, short(alg)+" —")
				continue
			}
			if ok(x) {
				met++
			}
			ps = append(ps, fmt.Sprintf("%s %s×", short(alg), ratioNum(x)))
		}
		parts = append(parts, api+" "+strings.Join(ps, ", "))
	}
	return strings.Join(parts, "; "), met, all
}

// ratioNum prints a ratio with two decimals below 10, one below 100.
func ratioNum(x float64) string {
	switch {
	case x < 10:
		return fmt.Sprintf("%.2f", x)
	case x < 100:
		return fmt.Sprintf("%.1f", x)
	}
	return thousands(x)
}

// ratioTo returns a row's ops/s divided by those of the row base picks.
func ratioTo(base func(row *cellResult) *cellResult) func(row *cellResult) (float64, bool) {
	return func(row *cellResult) (float64, bool) {
		if !row.ok() {
			return 0, false
		}
		b := base(row)
		if !b.ok() {
			return 0, false
		}
		return row.opsPerSec() / b.opsPerSec(), true
	}
}

func (t *table) baseOf(row *cellResult) *cellResult { return t.row(row.base) }

func (r *report) targets() []target {
	var ts []target

	// Headline: in each Redis scenario, our fastest row against the
	// fastest peer.
	for _, id := range []string{"a", "b", "c", "d"} {
		t := r.table(id)
		if t == nil {
			continue
		}
		ours, peer := bestRow(t, "ours"), bestRow(t, "peer")
		if ours == nil || peer == nil {
			continue
		}
		m := fmt.Sprintf("%s: %s ops/s = %s× %s", ours.name, thousands(ours.opsPerSec()), ratioNum(ours.opsPerSec()/peer.opsPerSec()), peer.name)
		if rr := t.row(redisRateName); rr.ok() && rr != peer {
			m += fmt.Sprintf(", %s× redis_rate", ratioNum(ours.opsPerSec()/rr.opsPerSec()))
		}
		res := "ours fastest"
		if peer.opsPerSec() > ours.opsPerSec() {
			res = peer.name + " fastest"
		}
		ts = append(ts, target{"(" + id + ") " + t.sc.shortTitle() + ": our fastest row vs the fastest peer", m, "headline", res})
	}

	ts = append(ts, r.defaultTargets()...)
	ts = append(ts, r.pinnedTargets()...)

	// 2. Deny cache, scenario d.
	if t := r.table("d"); t != nil {
		atLeast := func(x float64) bool { return x >= denyTarget }
		suffix := variant{denyCache: true}.suffix()
		m, met, all := perRow(t, suffix, ratioTo(t.baseOf), atLeast)
		ts = append(ts, target{"(d) denied flood, deny cache vs ours uncached", m, fmt.Sprintf("≥ %d×", denyTarget), verdict(met, all)})
		m, met, all = perRow(t, suffix, ratioTo(func(*cellResult) *cellResult { return t.row(redisRateName) }), atLeast)
		ts = append(ts, target{"(d) denied flood, deny cache vs redis_rate", m, fmt.Sprintf("≥ %d×", denyTarget), verdict(met, all)})
		var hitTrips []string
		zero, rows := 0, 0
		lo, hi := -1.0, 0.0
		for _, row := range t.rows {
			if row.storeCalls < 0 || !row.ok() {
				continue
			}
			rows++
			if row.roundTrips <= row.storeCalls {
				zero++
			}
			hitTrips = append(hitTrips, perHit(row))
			c := row.perOp(float64(row.redisCalls))
			if lo < 0 || c < lo {
				lo = c
			}
			hi = max(hi, c)
		}
		if rows > 0 {
			m := fmt.Sprintf("round trips per cached denial: %s; Redis cmds per decision overall (cache expiries included): %s–%s",
				strings.Join(dedupe(hitTrips), ", "), perOpStr(lo), perOpStr(hi))
			ts = append(ts, target{"(d) Redis commands per blocked request while the cache holds", m, "0", verdict(zero, rows)})
		}
	}

	// 3. Memory section.
	if t := r.table("memory"); t != nil {
		for _, layer := range []struct{ api, base, target string }{
			{"Handler", sethvargoHTTP, fmt.Sprintf("≤ %d× (headline: middleware vs middleware)", memoryTarget)},
			{"Take", sethvargoTake, "reference (store vs store)"},
		} {
			b := t.row(layer.base)
			var ps []string
			met, all := 0, 0
			for _, alg := range fullAlgorithms {
				all++
				row := t.row("ours " + layer.api + ", memory, " + alg.String() + ", 1 limit")
				if !row.ok() || !b.ok() {
					ps = append(ps, short(alg)+" —")
					continue
				}
				x := row.nsPerOp() / b.nsPerOp()
				if x <= memoryTarget {
					met++
				}
				ps = append(ps, fmt.Sprintf("%s %s ns/op = %s× (CPU %s×)", short(alg), thousands(row.nsPerOp()), ratioNum(x), ratioNum(row.cpuNsPerOp()/b.cpuNsPerOp())))
			}
			m := strings.Join(ps, "; ")
			if b.ok() {
				m = fmt.Sprintf("sethvargo %s ns/op; ours: %s", thousands(b.nsPerOp()), m)
			}
			res := verdict(met, all)
			if layer.api == "Take" {
				res = fmt.Sprintf("(%d of %d within %d×)", met, all, memoryTarget)
			}
			ts = append(ts, target{"(memory) one limit, ours " + layer.api + " vs sethvargo/go-limiter", m, layer.target, res})
		}
		var ps []string
		for _, alg := range fullAlgorithms {
			row := t.row("ours Handler, memory, " + alg.String() + ", 3 limits")
			if !row.ok() {
				ps = append(ps, short(alg)+" —")
				continue
			}
			ps = append(ps, fmt.Sprintf("%s %s ns/op, %.0f allocs/op", short(alg), thousands(row.nsPerOp()), row.perOp(float64(row.allocs))))
		}
		ts = append(ts, target{"(memory) three limits, ours Handler", strings.Join(ps, "; "), "shown", "—"})
	}

	// The example's policy as it is: what each algorithm costs Redis.
	if t := r.table("e"); t != nil {
		var ps []string
		for _, alg := range algorithms {
			row := t.row("ours Take, " + alg.String())
			if !row.ok() {
				ps = append(ps, short(alg)+" —")
				continue
			}
			ps = append(ps, fmt.Sprintf("%s %s µs (%s ops/s)", short(alg), num(row.perOp(row.redisCPU*1e6)), thousands(row.opsPerSec())))
		}
		if rr := t.row(redisRateName); rr.ok() {
			ps = append(ps, fmt.Sprintf("redis_rate's three calls %s µs", num(rr.perOp(rr.redisCPU*1e6))))
		}
		ts = append(ts, target{"(e) the unscaled policy, ours Take: Redis CPU per call", strings.Join(ps, "; "), "shown", "—"})
	}

	// Waiting in line and the cost of a Request.ID.
	if t := r.table("w"); t != nil {
		var ps []string
		for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.TokenBucket} {
			plain, id := t.row("ours Take, "+alg.String()), t.row("ours Take, "+alg.String()+", Request.ID")
			if !plain.ok() || !id.ok() {
				continue
			}
			ps = append(ps, fmt.Sprintf("%s: %s× the ops/s, Redis CPU %s → %s µs per call", short(alg), ratioNum(id.opsPerSec()/plain.opsPerSec()),
				num(plain.perOp(plain.redisCPU*1e6)), num(id.perOp(id.redisCPU*1e6))))
		}
		if len(ps) > 0 {
			ts = append(ts, target{"(w) Take with a new Request.ID per request vs without", strings.Join(ps, "; "), "shown", "—"})
		}
		ps = nil
		for _, row := range t.rows {
			if !strings.HasPrefix(row.name, "ours Wait, ") || !row.ok() {
				continue
			}
			ps = append(ps, fmt.Sprintf("%s: %s served/s, %s round trips each, p50 %s µs", row.name[len("ours Wait, "):], thousands(row.opsPerSec()),
				perOpStr(row.perOp(float64(row.roundTrips))), num(us(row.hist.quantile(0.5)))))
		}
		if len(ps) > 0 {
			ts = append(ts, target{fmt.Sprintf("(w) %d callers waiting in line on one key of %s/s", r.cfg.conc, thousands(waitRate)), strings.Join(ps, "; "), "served at the rate", "—"})
		}
	}

	// 4. No row invalidated by errors (the Handler rows' 1s timeout keeps
	// the circuit breaker closed).
	bad, handlerErrs, rows := 0, uint64(0), 0
	for _, t := range r.tables {
		for _, row := range t.rows {
			if row.skipped != "" {
				continue
			}
			rows++
			if row.invalid() {
				bad++
			}
			if strings.HasPrefix(row.name, "ours Handler") {
				handlerErrs += row.errs
			}
		}
	}
	res := "**met**"
	if bad > 0 {
		res = "**missed**"
	}
	ts = append(ts, target{"rows marked ⚠ (over 0.1% errors); store errors in our Handler rows (timeout " + handlerTimeout.String() + ")",
		fmt.Sprintf("%d of %d rows; %d errors", bad, rows, handlerErrs), "0 ⚠", res})

	// 5. Run time of the default run.
	took := r.end.Sub(r.start).Round(time.Second)
	res = "n/a (not the full default run)"
	if r.fullDefault() {
		res = "**met**"
		if took > runTimeTolerant {
			res = "**missed**"
		}
	}
	ts = append(ts, target{"whole default run", took.String(), "≤ about " + runTimeTarget.String(), res})
	return ts
}

// fullDefault reports whether this was the default run: every section,
// every row, the default durations.
func (r *report) fullDefault() bool {
	return len(r.tables) == len(sectionIDs) && r.cfg.only == nil && r.cfg.dur == defaultDuration &&
		r.cfg.warm == defaultWarmup && r.cfg.rounds == defaultRounds
}

func dedupe(s []string) []string {
	var out []string
	for _, v := range s {
		found := false
		for _, o := range out {
			found = found || o == v
		}
		if !found {
			out = append(out, v)
		}
	}
	return out
}

// shortTitle names a scenario in the targets table.
func (sc *scenario) shortTitle() string {
	switch sc.id {
	case "a":
		return "one limit"
	case "b":
		return "three limits"
	case "c":
		return "three limits × two identities"
	case "d":
		return "denied flood"
	case "e":
		return "three limits as they are"
	case "w":
		return "waiting in line, request IDs"
	}
	return sc.id
}

// defaultTargets judges the targets of "Fastest by default": our store with
// no options against the peers at their defaults, the floors, and our store
// with batching off.
func (r *report) defaultTargets() []target {
	var ts []target
	def := "ours Take, " + ratelimit.SlidingWindow.String()
	peers := func(id string, vsUlule, vsRR float64) {
		t := r.table(id)
		if t == nil {
			return
		}
		ours, ul, rr, rra := t.row(def), t.row("ulule/limiter v3"), t.row(redisRateName), t.row(redisRateAutoName)
		if !ours.ok() || !ul.ok() || !rr.ok() {
			ts = append(ts, target{"(" + id + ") default store and algorithm vs the peers", "not measured", "", "not measured"})
			return
		}
		a, b := ours.opsPerSec()/ul.opsPerSec(), ours.opsPerSec()/rr.opsPerSec()
		m := fmt.Sprintf("%s ops/s = %s× ulule/limiter, %s× redis_rate", thousands(ours.opsPerSec()), ratioNum(a), ratioNum(b))
		if rra.ok() {
			m += fmt.Sprintf(" (%s× redis_rate on the AutoPipeliner)", ratioNum(ours.opsPerSec()/rra.opsPerSec()))
		}
		res := "**met**"
		if a < vsUlule || b < vsRR {
			res = "**missed**"
		}
		ts = append(ts, target{fmt.Sprintf("(%s) %s, %s: ours Take (no options, %s) vs the peers at their defaults", id, t.sc.shortTitle(), strconv.Itoa(r.cfg.conc)+" callers", short(ratelimit.SlidingWindow)),
			m, fmt.Sprintf("≥ %s× ulule, ≥ %s× redis_rate", ratioNum(vsUlule), ratioNum(vsRR)), res})
	}
	peers("a", oneVsUlule, oneVsRedisRate)
	peers("b", threeVsUlule, threeVsRedis)

	// Our rows against the batched floor.
	for _, id := range []string{"a", "b", "c"} {
		t := r.table(id)
		if t == nil {
			continue
		}
		fl := t.row(batchedFloorName)
		if !fl.ok() {
			continue
		}
		m, met, all := perRow(t, "", ratioTo(func(*cellResult) *cellResult { return fl }), func(x float64) bool { return x >= floorShare })
		want, res := fmt.Sprintf("≥ %.0f%% for each row", floorShare*100), verdict(met, all)
		if id != "a" {
			want, res = "reported", "—"
		}
		ts = append(ts, target{fmt.Sprintf("(%s) ours (no options) ÷ the batched floor (%s ops/s)", id, thousands(fl.opsPerSec())), m, want, res})
		// What a script reaches that does only what every limiter on
		// Redis's clock must (read the time, read and write a hash), and
		// the simplest peer script, on the same pipelines.
		var refs []string
		for _, name := range []string{stateFloorName, redisRateAutoName} {
			if x := t.row(name); x.ok() {
				refs = append(refs, fmt.Sprintf("%s %s× (Redis CPU %.1f µs/op)", name, ratioNum(x.opsPerSec()/fl.opsPerSec()), x.perOp(x.redisCPU*1e6)))
			}
		}
		if id == "a" && len(refs) > 0 {
			ts = append(ts, target{"(a) the bounds under ours ÷ the batched floor", strings.Join(refs, "; "), "reference", "—"})
		}
	}

	// Batching on by default: free when idle, a gain under load.
	for _, id := range []string{"a", "b"} {
		t := r.table(id)
		if t == nil {
			continue
		}
		var ps []string
		met, all := 0, 0
		for _, alg := range fullAlgorithms {
			on, off := t.row("ours Take, "+alg.String()), t.row("ours Take, "+alg.String()+variant{setBatch: true}.suffix())
			if !on.ok() || !off.ok() {
				continue
			}
			all++
			ops := on.opsPerSec() / off.opsPerSec()
			p50 := float64(on.hist.quantile(0.5)) / float64(off.hist.quantile(0.5))
			if ops >= 1-idleSlack && p50 <= 1+idleSlack {
				met++
			}
			ps = append(ps, fmt.Sprintf("%s ops/s %s×, p50 %s×", short(alg), ratioNum(ops), ratioNum(p50)))
		}
		if all == 0 {
			continue
		}
		want, res := "gain shown", "—"
		if r.cfg.conc <= 8 {
			want, res = fmt.Sprintf("ops/s ≥ %.2f×, p50 ≤ %.2f× (median of 3 runs: see SUMMARY.md)", 1-idleSlack, 1+idleSlack), verdict(met, all)
		}
		ts = append(ts, target{fmt.Sprintf("(%s) ours Take, no options (batching on) ÷ WithBatching(0), %d callers", id, r.cfg.conc), strings.Join(ps, "; "), want, res})
	}

	// One caller: close to one round trip.
	if t := r.table("a"); t != nil {
		ours, fl := t.row(def), t.row(floorName)
		if ours.ok() && fl.ok() {
			script := max(0, ours.perOp(ours.redisCPU*1e6)-fl.perOp(fl.redisCPU*1e6))
			bound := p50Slack*us(fl.hist.quantile(0.5)) + script
			got := us(ours.hist.quantile(0.5))
			want, res := fmt.Sprintf("≤ %.1f× floor p50 + script time", p50Slack), "n/a (judged at -concurrency 1)"
			if r.cfg.conc == 1 {
				res = "**met**"
				if got > bound {
					res = "**missed**"
				}
			}
			ts = append(ts, target{fmt.Sprintf("(a) p50 of ours Take (no options), %d caller(s)", r.cfg.conc),
				fmt.Sprintf("%s µs; floor %s µs, script %s µs: bound %s µs", num(got), num(us(fl.hist.quantile(0.5))), num(script), num(bound)), want, res})
		}
	}

	// Redis CPU per decision against ulule/limiter's, per limit checked.
	var ps []string
	met, all := 0, 0
	for _, id := range []string{"a", "b"} {
		t := r.table(id)
		if t == nil {
			continue
		}
		ours, ul := t.row(def), t.row("ulule/limiter v3")
		if !ours.ok() || !ul.ok() {
			continue
		}
		nl := float64(len(t.sc.limits))
		o, u := ours.perOp(ours.redisCPU*1e6)/nl, ul.perOp(ul.redisCPU*1e6)/nl
		all++
		if o <= u {
			met++
		}
		ps = append(ps, fmt.Sprintf("(%s) ours %s µs, ulule %s µs per limit", id, num(o), num(u)))
	}
	if all > 0 {
		want, res := "≤ ulule/limiter's", verdict(met, all)
		if r.cfg.conc != 64 {
			res = "n/a (judged at 64 callers)"
		}
		ts = append(ts, target{fmt.Sprintf("Redis CPU per decision, ours Take (no options) vs ulule/limiter, %d callers", r.cfg.conc), strings.Join(ps, "; "), want, res})
	}
	return ts
}
