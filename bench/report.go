package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/store"
)

type table struct {
	sc   *scenario
	nIDs int
	rows []*cellResult
}

type report struct {
	cfg          config
	args         []string
	own          bool
	addr         string
	start, end   time.Time
	redisVersion string
	cpuModel     string
	loadStart    string
	gitState     string
	tables       []*table
}

func (r *report) collectEnv(ctx context.Context, c *redis.Client) {
	if c != nil { // nil: no Redis in this run, redisVersion stays ""
		r.redisVersion = "?"
		txt, _ := c.Info(ctx, "server").Result()
		for _, line := range strings.Split(txt, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				r.redisVersion = v
			}
		}
	}
	r.cpuModel = "?"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				r.cpuModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	r.loadStart = loadAvg()
	r.gitState = gitState()
}

// gitState describes the checkout of the library being measured (the
// parent directory, through the replace directive), or "" if git cannot.
func gitState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	head, err := exec.CommandContext(ctx, "git", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(head))
	if st, err := exec.CommandContext(ctx, "git", "-C", "..", "status", "--porcelain", "--", ".", ":!bench").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		// Name them: the library measured is what was on disk when the
		// program was built.
		var files []string
		for _, line := range strings.Split(strings.TrimRight(string(st), "\n"), "\n") {
			if len(line) > 3 {
				files = append(files, "`"+strings.TrimSpace(line[3:])+"`")
			}
		}
		if len(files) > 8 {
			files = append(files[:8], "…")
		}
		s += " with uncommitted changes in " + strings.Join(files, ", ")
	}
	return s
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func (r *report) command() string {
	s := "go run ."
	for _, a := range r.args {
		s += " " + shellQuote(a)
	}
	return s
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// baseline returns redis_rate's ops/s in t, or 0.
func baseline(t *table) float64 {
	if t == nil {
		return 0
	}
	for _, row := range t.rows {
		if row.name == redisRateName && row.skipped == "" && !row.invalid() {
			return row.opsPerSec()
		}
	}
	return 0
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	redisKind := "a private redis-server started by the program (`--save \"\" --appendonly no`), so its INFO counts this run only"
	if !r.own {
		redisKind = "an existing Redis at " + r.addr + " (INFO counters include any other client's traffic)"
	}
	w("## Results\n\n")
	w("Command (in `bench/`): `%s`\n\n", r.command())
	w("- %s; %d concurrent callers; %s measured per cell after %s warm-up; %d identities (1 in scenario d, %d in e); rates ×%d in a–c, ×%d in the memory section\n",
		r.start.UTC().Format("2006-01-02 15:04 UTC"), r.cfg.conc, r.cfg.dur, r.cfg.warm, r.cfg.nIDs, asIsIdentities, r.cfg.scale, memoryScale)
	w("- %s, %d CPUs, GOMAXPROCS %d, %s %s/%s; load average %s at start, %s at end; whole run %s\n",
		r.cpuModel, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		r.loadStart, loadAvg(), r.end.Sub(r.start).Round(time.Second))
	if r.redisVersion != "" {
		w("- Redis %s: %s; %s\n", r.redisVersion, redisKind, pinnedTopology())
	}
	if r.gitState != "" {
		w("- library measured: ratelimit at git %s\n", r.gitState)
	}
	w("- each section runs its rows in %d rounds of %s each (rotating the order), so a burst of outside load is shared rather than landing on one row\n\n",
		r.cfg.rounds, (r.cfg.dur / time.Duration(r.cfg.rounds)).String())
	w("Rows: ours = this library (`store.NewRedis(client).Take`, and `ratelimit.New(store, policy, WithTimeout(%s)).Handler(next)` called in process); ", handlerTimeout)
	w("*unbatched* / *batched N* = the same on `store.NewRedis(client, store.WithBatching(0 or N))` (the plain rows use no option: batching is on by default, %d calls in flight); ", store.DefaultBatching)
	w("*deny cache* = the same on `store.NewDenyCache(store.NewRedis(client))`; ")
	w("peers = one limiter per limit (and per identity in c), called in sequence, stopping at the first denial; every go-redis client, ours and the peers', has go-redis's default options (`redis.Options{Addr: addr}`: a pool of 10 connections per CPU).\n\n")
	seen := map[string]bool{}
	for _, t := range r.tables {
		for _, row := range t.rows {
			if seen[row.name] || row.family == "ours" {
				continue
			}
			seen[row.name] = true
			w("- %s: %s\n", row.name, row.note)
		}
	}
	w("\n")

	w("%s\n", summaryStart)
	w("### Targets and headline figures (this run)\n\n")
	w("| | measured | target | result |\n|---|---|---|---|\n")
	for _, t := range r.targets() {
		w("| %s | %s | %s | %s |\n", t.what, t.measured, t.target, t.result)
	}
	w("\n%s\n\n", summaryEnd)

	baseA := baseline(r.table("a"))
	for _, t := range r.tables {
		if t.sc.memory {
			r.memoryTable(w, t)
			continue
		}
		base := baseline(t)
		w("### (%s) %s\n\n", t.sc.id, t.sc.title)
		oursCol := ""
		if t.hasVariants() {
			oursCol = "vs ours default | "
			if t.sc.flood {
				oursCol = "vs ours uncached | "
			}
		}
		w("| limiter | ops/s | vs redis_rate | vs redis_rate (a) | %sp50 µs | p99 µs | round trips/op | Redis cmds/op | Redis CPU µs/op | client CPU µs/op | total CPU µs/op | allocs/op | denied | errors |\n", oursCol)
		w("|---|--:|--:|--:|%s--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n", strings.Repeat("--:|", strings.Count(oursCol, "|")))
		for _, row := range t.rows {
			if row.skipped != "" {
				w("| %s | skipped: %s | | | %s| | | | | | | | | |\n", row.name, mdEscape(row.skipped), strings.Repeat(" |", strings.Count(oursCol, "|")))
				continue
			}
			ops := row.opsPerSec()
			opsCell, vsBase, vsA, vsOurs := thousands(ops), ratio(ops, base), ratio(ops, baseA), t.vsBase(row)
			if row.invalid() {
				opsCell, vsBase, vsA, vsOurs = thousands(ops)+" ⚠ errors", "—", "—", "—"
			}
			if oursCol != "" {
				vsOurs += " | "
			} else {
				vsOurs = ""
			}
			trips := perOpStr(row.perOp(float64(row.roundTrips)))
			if row.roundTrips < 0 {
				trips = perOpStr(row.perOp(float64(row.roundTripsINFO))) + "†"
			}
			redisUS := row.perOp(row.redisCPU * 1e6)
			clientUS := row.perOp(float64(row.clientCPU) / 1e3)
			w("| %s | %s | %s | %s | %s%s | %s | %s | %s | %s | %s | %s | %.1f | %s | %s |\n",
				row.name, opsCell, vsBase, vsA, vsOurs,
				num(us(row.hist.quantile(0.5))), num(us(row.hist.quantile(0.99))), trips, perOpStr(row.perOp(float64(row.redisCalls))),
				num(redisUS), num(clientUS), num(redisUS+clientUS),
				row.perOp(float64(row.allocs)), pct(row.denied, row.ops), errCell(row))
		}
		w("\n")
		for _, row := range t.rows {
			if row.retried > 0 {
				w("%s: %d of %d slices had more than 1%% failed requests and were measured again.\n\n", row.name, row.retried, row.samples)
			}
		}
		if t.hasDenyCache() {
			w("Deny cache: how many of the flood's decisions reached Redis. A cached denial is answered in process until its Retry-After has passed; then the callers waiting at that moment (up to %d) go to Redis, which admits the one or few requests the limit has room for and denies the rest, and the new denial is cached again.\n\n", r.cfg.conc)
			w("| limiter | decisions | answered from the cache | store calls (cache misses) | store calls/s | Redis round trips | round trips per cached denial | Redis cmds/op |\n")
			w("|---|--:|--:|--:|--:|--:|--:|--:|\n")
			for _, row := range t.rows {
				if row.storeCalls < 0 || row.skipped != "" || row.ops == 0 {
					continue
				}
				hits := int64(row.ops) - row.storeCalls
				w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, thousands(float64(row.ops)),
					pct(uint64(hits), row.ops), thousands(float64(row.storeCalls)), thousands(float64(row.storeCalls)/row.elapsed.Seconds()),
					thousands(float64(row.roundTrips)), perHit(row), perOpStr(row.perOp(float64(row.redisCalls))))
			}
			w("\n")
		}
		w("<details><summary>(%s) Redis commands per request, from INFO commandstats</summary>\n\n", t.sc.id)
		w("| limiter | commands per request (Redis µs per call) | Redis µs executing commands per request | of which script body (Lua) |\n")
		w("|---|---|--:|--:|\n")
		for _, row := range t.rows {
			if row.skipped != "" || row.ops == 0 {
				continue
			}
			var parts []string
			var scriptUS, innerUS, allUS int64
			hasEval := false
			for _, c := range row.cmds {
				parts = append(parts, fmt.Sprintf("%s %s (%.1f)", strings.ToUpper(c.name), perOpStr(row.perOp(float64(c.calls))), float64(c.usec)/float64(c.calls)))
				allUS += c.usec
				if c.name == "fcall" || c.name == "evalsha" || c.name == "eval" {
					scriptUS += c.usec
					hasEval = true
				} else {
					innerUS += c.usec
				}
			}
			exec, lua := "—", "—"
			switch {
			case row.scripted:
				exec = num(row.perOp(float64(scriptUS)))
				lua = num(row.perOp(float64(scriptUS - innerUS)))
			case !hasEval:
				exec = num(row.perOp(float64(allUS)))
			}
			w("| %s | %s | %s | %s |\n", row.name, strings.Join(parts, " · "), exec, lua)
		}
		w("\n</details>\n\n")
	}
	w("How to read: *ops/s* are completed decisions (one request through every limit and identity) per second; ")
	w("*vs redis_rate* divides by redis_rate's ops/s in the same table, *vs redis_rate (a)* by redis_rate's ops/s with one limit; ")
	w("*vs ours default* / *vs ours uncached* divide an unbatched, batched or deny-cache row's ops/s by that of our plain row of the same API and algorithm in the same table. ")
	w("*round trips/op* are counted by a go-redis hook (a pipeline or MULTI…EXEC counts once); † inferred from INFO (MGET + EXEC) because httprate-redis builds its own client. ")
	w("*Redis cmds/op* counts every command Redis ran, including those a script ran. ")
	w("*Redis CPU* is Redis's used_cpu_user+used_cpu_sys, *client CPU* this process's getrusage user+system time (load generator included), both divided by ops. ")
	w("*allocs/op* are Go heap allocations of the whole process per op. *denied* should be 0%% in a–c and the memory section, close to 0%% in e, and about 100%% in d (the floors never deny). ")
	w("In the memory section, *ns/op* is wall time per decision with all callers together (1e9 ÷ ops/s, as `go test -bench` reports for RunParallel), *CPU ns/op* this process's CPU time per decision, and *÷ sethvargo* divides either by the same figure of sethvargo/go-limiter at the same layer (Handler rows by its httplimit middleware, Take rows by its store's Take): below 1 is faster.\n")
	return b.String()
}

// Markers around the targets table, so that SUMMARY.md can be cut from
// the report.
const (
	summaryStart = "<!-- summary: start -->"
	summaryEnd   = "<!-- summary: end -->"
)

func (r *report) table(id string) *table {
	for _, t := range r.tables {
		if t.sc.id == id {
			return t
		}
	}
	return nil
}

func (t *table) row(name string) *cellResult {
	if t == nil {
		return nil
	}
	for _, row := range t.rows {
		if row.name == name {
			return row
		}
	}
	return nil
}

// ok reports a row with numbers that describe its limiter.
func (r *cellResult) ok() bool { return r != nil && r.skipped == "" && r.ops > 0 && !r.invalid() }

func (t *table) hasVariants() bool {
	for _, row := range t.rows {
		if row.base != "" {
			return true
		}
	}
	return false
}

func (t *table) hasDenyCache() bool {
	for _, row := range t.rows {
		if row.storeCalls >= 0 && row.skipped == "" {
			return true
		}
	}
	return false
}

// vsBase is row's ops/s divided by its base row's, or "—".
func (t *table) vsBase(row *cellResult) string {
	b := t.row(row.base)
	if row.base == "" || !b.ok() {
		return "—"
	}
	return ratio(row.opsPerSec(), b.opsPerSec())
}

// perHit is the Redis round trips per decision answered from the deny
// cache: every round trip beyond the store calls' own.
func perHit(row *cellResult) string {
	hits := int64(row.ops) - row.storeCalls
	if hits <= 0 {
		return "—"
	}
	// Every store call (cache miss) is at most one round trip, fewer when
	// batched calls share one; any trip beyond them came from a hit.
	return perOpStr(float64(max(0, row.roundTrips-row.storeCalls)) / float64(hits))
}

// perOpStr formats a count per op: two decimals, four when it is under
// 0.01 but not 0.
func perOpStr(v float64) string {
	if v > 0 && v < 0.01 {
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// nsPerOp is the wall time per decision, all callers together.
func (r *cellResult) nsPerOp() float64 { return r.perOp(float64(r.elapsed.Nanoseconds())) }

// cpuNsPerOp is this process's CPU time per decision.
func (r *cellResult) cpuNsPerOp() float64 { return r.perOp(float64(r.clientCPU.Nanoseconds())) }

// memBase is the row a memory-section row is compared with: its base, or
// itself for the peers.
func (t *table) memBase(row *cellResult) *cellResult {
	switch {
	case row.base != "":
		return t.row(row.base)
	case row.family == "peer":
		return row
	}
	return nil
}

func (r *report) memoryTable(w func(string, ...any), t *table) {
	w("### (memory) %s\n\n", t.sc.title)
	w("In process, no Redis: the same harness and identities, every request allowed. The 3-limit rows use the policy of scenario b; sethvargo/go-limiter has one limit per store, so its rows are the one-limit setup.\n\n")
	w("| limiter | ops/s | ns/op | ns/op ÷ sethvargo | CPU ns/op | CPU ÷ sethvargo | allocs/op | B/op | denied | errors |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, row := range t.rows {
		if row.skipped != "" {
			w("| %s | skipped: %s | | | | | | | | |\n", row.name, mdEscape(row.skipped))
			continue
		}
		vsNs, vsCPU := "—", "—"
		if b := t.memBase(row); b.ok() && row.ok() {
			vsNs, vsCPU = ratio(row.nsPerOp(), b.nsPerOp()), ratio(row.cpuNsPerOp(), b.cpuNsPerOp())
		}
		opsCell := thousands(row.opsPerSec())
		if row.invalid() {
			opsCell += " ⚠ errors"
		}
		w("| %s | %s | %s | %s | %s | %s | %.1f | %s | %s | %s |\n", row.name, opsCell,
			thousands(row.nsPerOp()), vsNs, thousands(row.cpuNsPerOp()), vsCPU,
			row.perOp(float64(row.allocs)), thousands(row.perOp(float64(row.bytes))), pct(row.denied, row.ops), errCell(row))
	}
	w("\n")
}

func errCell(row *cellResult) string {
	if row.errs == 0 {
		return "0"
	}
	msg := row.firstErr
	if len(msg) > 80 {
		msg = msg[:80] + "…"
	}
	return fmt.Sprintf("%d (%s)", row.errs, mdEscape(msg))
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func ratio(v, base float64) string {
	if base <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v/base)
}

func pct(n, total uint64) string {
	if total == 0 {
		return "—"
	}
	p := 100 * float64(n) / float64(total)
	switch {
	case n == 0:
		return "0%"
	case p < 0.01:
		return "<0.01%"
	case p > 99.99 && n != total:
		return ">99.99%"
	}
	return strconv.FormatFloat(p, 'f', 2, 64) + "%"
}

// num formats a microsecond figure: one decimal below 100, none above.
func num(v float64) string {
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return thousands(v)
}

func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
