package ratelimit_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// The outage log's messages, as an operator greps them.
const (
	msgFailing   = "ratelimit: store failing; "
	msgStill     = "ratelimit: store still failing"
	msgAnswers   = "ratelimit: store answers again"
	msgMistake   = "ratelimit: misconfigured or invalid request"
	actFallback  = "deciding per process with the fallback store"
	actOpen      = "admitting every request unlimited (FailOpen)"
	actClosed    = "refusing every request with 503 (FailClosed)"
	untilAnswers = " until it answers again"
)

// all returns every record, in order.
func (h *logRecorder) all() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// messages returns the level and message of each record, for a test's
// report.
func messages(recs []slog.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Level.String() + " " + r.Message
	}
	return out
}

// logLine is what a test expects of one log record: its level, the start
// of its message, and some of its attributes.
type logLine struct {
	level  slog.Level
	msg    string
	counts map[string]int64 // integer attributes
	outage time.Duration    // the "outage" attribute, when not 0
	errHas string           // in the "error" attribute, when not ""
}

// checkLine reports how rec differs from want.
func checkLine(rec slog.Record, want logLine) []string {
	var bad []string
	if rec.Level != want.level || !strings.HasPrefix(rec.Message, want.msg) {
		bad = append(bad, "got "+rec.Level.String()+" "+rec.Message+", want "+want.level.String()+" "+want.msg+"…")
	}
	for k, n := range want.counts {
		if v, ok := attrOf(rec, k); !ok || v.Kind() != slog.KindInt64 || v.Int64() != n {
			bad = append(bad, k+" = "+v.String()+", want "+slog.Int64Value(n).String())
		}
	}
	if want.outage != 0 {
		if v, ok := attrOf(rec, "outage"); !ok || v.Kind() != slog.KindDuration || v.Duration() != want.outage {
			bad = append(bad, "outage = "+v.String()+", want "+want.outage.String())
		}
	}
	if want.errHas != "" {
		if v, _ := attrOf(rec, "error"); !strings.Contains(v.String(), want.errHas) {
			bad = append(bad, "error = "+v.String()+", want it to contain "+want.errHas)
		}
	}
	return bad
}

// outageServe sends n requests from ipA through h.
func outageServe(h http.Handler, n int) {
	for range n {
		h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	}
}

// TestOutageLog: one line when the store starts failing, a summary at
// most every minute while it fails (with the counts since the previous
// line), one line once it has answered for a second, with the outage's
// length and counts; then the next outage is a new story.
func TestOutageLog(t *testing.T) {
	clk := newTestClock()
	fs := &flakyStore{mem: store.NewMemory()}
	logs := &logRecorder{}
	var hooked atomic.Int64
	lim := newLimiter(t, fs, ratelimit.MustParsePolicy("1000/h"), ratelimit.WithLogger(slog.New(logs)),
		ratelimit.WithFallback(store.NewMemory(store.WithClock(clk.Now))),
		ratelimit.WithCircuitBreaker(0, 0), // every request asks the store: exact counts
		ratelimit.WithErrorHook(func(*http.Request, error) { hooked.Add(1) }))
	ratelimit.SetLogClock(lim, clk.Now)
	h := lim.Handler(okHandler)
	failing := logLine{level: slog.LevelError, msg: msgFailing + actFallback + untilAnswers, errHas: "connection refused"}
	steps := []struct {
		advance  time.Duration
		down     bool
		requests int
		want     *logLine // the line this step writes, if any
	}{
		{0, false, 2, nil},
		{0, true, 1, &failing},
		{0, true, 9, nil},
		{59 * time.Second, true, 5, nil},
		{time.Second, true, 1, &logLine{level: slog.LevelWarn, msg: msgStill, outage: time.Minute, errHas: "connection refused",
			counts: map[string]int64{"failed": 16, "skipped": 0, "answered": 0, "fallback": 15, "unlimited": 0, "refused": 0}}}, // this request's decision comes after

		{30 * time.Second, true, 3, nil},
		{29 * time.Second, true, 1, nil}, // 59s after the summary
		{0, false, 2, nil},               // the store answers: the outage ends if it keeps answering for a second
		{999 * time.Millisecond, false, 1, nil},
		{time.Millisecond, false, 1, &logLine{level: slog.LevelInfo, msg: msgAnswers, outage: 119 * time.Second,
			counts: map[string]int64{"failed": 20, "skipped": 0, "fallback": 20, "unlimited": 0, "refused": 0}}},
		{time.Minute, false, 5, nil},
		{time.Hour, true, 1, &failing},
		{500 * time.Millisecond, false, 1, nil},
		{time.Second, false, 1, &logLine{level: slog.LevelInfo, msg: msgAnswers, outage: 500 * time.Millisecond,
			counts: map[string]int64{"failed": 1, "fallback": 1}}},
	}
	lines, errs := 0, int64(0)
	for i, s := range steps {
		clk.Advance(s.advance)
		fs.down.Store(s.down)
		outageServe(h, s.requests)
		if s.down {
			errs += int64(s.requests)
		}
		recs := logs.all()
		if s.want != nil {
			lines++
		}
		if len(recs) != lines {
			t.Fatalf("step %d: %d log lines, want %d: %v", i, len(recs), lines, messages(recs))
		}
		if s.want != nil {
			for _, b := range checkLine(recs[lines-1], *s.want) {
				t.Errorf("step %d: %s", i, b)
			}
		}
		if got := hooked.Load(); got != errs {
			t.Errorf("step %d: the error hook saw %d errors, want every one: %d", i, got, errs)
		}
	}
	if _, ok := attrOf(logs.all()[0], "suppressed"); ok {
		t.Error(`the failing line carries "suppressed": the old log throttle is back`)
	}
}

// TestOutageLogSaysWhatTheLimiterDoes: the failing line names what the
// Limiter does while the store fails, and the recovery line counts it, for
// each failure configuration.
func TestOutageLogSaysWhatTheLimiterDoes(t *testing.T) {
	tests := []struct {
		name   string
		opts   []ratelimit.Option
		named  bool // the store names a fallback (FallbackStore)
		action string
		counts map[string]int64
	}{
		{"store's fallback by default", nil, true, actFallback,
			map[string]int64{"failed": 3, "fallback": 3, "unlimited": 0, "refused": 0}},
		{"no fallback named: fail closed by default", nil, false, actClosed,
			map[string]int64{"failed": 3, "fallback": 0, "unlimited": 0, "refused": 3}},
		{"fail open", []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailOpen)}, true, actOpen,
			map[string]int64{"failed": 3, "fallback": 0, "unlimited": 3, "refused": 0}},
		{"fail closed", []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)}, true, actClosed,
			map[string]int64{"failed": 3, "fallback": 0, "unlimited": 0, "refused": 3}},
		{"fail closed with a fallback", []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithFallback(store.NewMemory())}, false, actFallback,
			map[string]int64{"failed": 3, "fallback": 3, "unlimited": 0, "refused": 0}},
		{"fail closed, cost 0 served", []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithCost(0)}, false, actClosed,
			map[string]int64{"failed": 3, "fallback": 0, "unlimited": 3, "refused": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newTestClock()
			fs := &flakyStore{mem: store.NewMemory()}
			var st ratelimit.Store = fs
			if tt.named {
				st = &namedFallback{Store: fs, fallback: store.NewMemory()}
			}
			logs := &logRecorder{}
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("1000/h"),
				append([]ratelimit.Option{ratelimit.WithLogger(slog.New(logs)), ratelimit.WithCircuitBreaker(0, 0)}, tt.opts...)...)
			ratelimit.SetLogClock(lim, clk.Now)
			h := lim.Handler(okHandler)
			fs.down.Store(true)
			outageServe(h, 3)
			fs.down.Store(false)
			outageServe(h, 1)
			clk.Advance(time.Second)
			outageServe(h, 1)
			recs := logs.all()
			if len(recs) != 2 {
				t.Fatalf("%d log lines, want 2 (failing, answers again): %v", len(recs), messages(recs))
			}
			for _, b := range checkLine(recs[0], logLine{level: slog.LevelError, msg: msgFailing + tt.action + untilAnswers}) {
				t.Error(b)
			}
			for _, b := range checkLine(recs[1], logLine{level: slog.LevelInfo, msg: msgAnswers, counts: tt.counts}) {
				t.Error(b)
			}
		})
	}
}

// TestOutageLogPartialOutage: a store that fails for some keys and
// answers for others is one outage while the failures go on (the answers
// show in the summary); it ends once the store has answered every request
// for a second.
func TestOutageLogPartialOutage(t *testing.T) {
	clk := newTestClock()
	ss := &shardStore{mem: store.NewMemory(), dead: "ip:198.51.100.9"} // ipB's shard is down
	logs := &logRecorder{}
	lim := newLimiter(t, ss, ratelimit.MustParsePolicy("100000/h"), ratelimit.WithLogger(slog.New(logs)),
		ratelimit.WithFallback(store.NewMemory(store.WithClock(clk.Now))))
	ratelimit.SetLogClock(lim, clk.Now)
	h := lim.Handler(okHandler)
	for range 600 { // a minute: A answered, B failing, 100ms apart
		h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
		h.ServeHTTP(httptest.NewRecorder(), getFrom(ipB))
		clk.Advance(100 * time.Millisecond)
	}
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipB))
	ss.dead = ""
	for range 20 { // two seconds of answers
		h.ServeHTTP(httptest.NewRecorder(), getFrom(ipB))
		clk.Advance(100 * time.Millisecond)
	}
	recs := logs.all()
	if len(recs) != 3 {
		t.Fatalf("%d log lines, want 3 (failing, one summary, answers again): %v", len(recs), messages(recs))
	}
	wants := []logLine{
		{level: slog.LevelError, msg: msgFailing + actFallback, errHas: "i/o timeout"},
		{level: slog.LevelWarn, msg: msgStill, outage: time.Minute, counts: map[string]int64{"failed": 601, "answered": 599, "fallback": 600}},
		{level: slog.LevelInfo, msg: msgAnswers, outage: time.Minute, counts: map[string]int64{"failed": 601, "fallback": 601}},
	}
	for i, w := range wants {
		for _, b := range checkLine(recs[i], w) {
			t.Errorf("line %d: %s", i, b)
		}
	}
}

// TestOutageLogCircuitSkips: requests the open circuit keeps from the
// store count as skipped in the summary, which says the circuit is open;
// the error hook still gets every one.
func TestOutageLogCircuitSkips(t *testing.T) {
	clk := newTestClock()
	fs := &flakyStore{mem: store.NewMemory()}
	logs := &logRecorder{}
	var hooked atomic.Int64
	lim := newLimiter(t, fs, ratelimit.MustParsePolicy("1000/h"), ratelimit.WithLogger(slog.New(logs)),
		ratelimit.WithFallback(store.NewMemory(store.WithClock(clk.Now))),
		ratelimit.WithErrorHook(func(*http.Request, error) { hooked.Add(1) }))
	ratelimit.SetLogClock(lim, clk.Now)
	h := lim.Handler(okHandler)
	outageServe(h, 1) // the store has answered once
	fs.down.Store(true)
	outageServe(h, ratelimit.DefaultCircuitFailures) // failures within the cooldown: the circuit stays closed
	clk.Advance(ratelimit.DefaultCircuitCooldown)
	outageServe(h, 1)  // opens it
	outageServe(h, 10) // skipped
	clk.Advance(time.Minute - ratelimit.DefaultCircuitCooldown)
	outageServe(h, 1) // the probe fails; the summary is due
	recs := logs.all()
	if len(recs) != 2 {
		t.Fatalf("%d log lines, want 2 (failing, one summary): %v", len(recs), messages(recs))
	}
	want := logLine{level: slog.LevelWarn, msg: msgStill, outage: time.Minute,
		counts: map[string]int64{"failed": ratelimit.DefaultCircuitFailures + 2, "skipped": 10, "fallback": ratelimit.DefaultCircuitFailures + 11}}
	for _, b := range checkLine(recs[1], want) {
		t.Error(b)
	}
	if v, _ := attrOf(recs[1], "circuit_open"); !v.Bool() {
		t.Error("the summary does not say the circuit is open")
	}
	if v, _ := attrOf(recs[1], "error"); v.Kind() != slog.KindAny || errors.Is(v.Any().(error), ratelimit.ErrCircuitOpen) {
		t.Errorf("the summary's error is the circuit's (%v), want the store's", v)
	}
	if got := hooked.Load(); got != ratelimit.DefaultCircuitFailures+12 {
		t.Errorf("the error hook saw %d errors, want %d", got, ratelimit.DefaultCircuitFailures+12)
	}
}

// TestOutageLogAllowN: decisions outside HTTP count in the outage log
// too, with no hook nor observer set.
func TestOutageLogAllowN(t *testing.T) {
	clk := newTestClock()
	fs := &flakyStore{mem: store.NewMemory()}
	logs := &logRecorder{}
	lim := newLimiter(t, fs, ratelimit.MustParsePolicy("1000/h"), ratelimit.WithLogger(slog.New(logs)),
		ratelimit.WithFailureMode(ratelimit.FailOpen))
	ratelimit.SetLogClock(lim, clk.Now)
	ctx := context.Background()
	fs.down.Store(true)
	for range 4 {
		if d, err := lim.Allow(ctx, "job:a"); !d.Allowed || err == nil {
			t.Fatalf("Allow while the store fails: %+v, %v; want FailOpen's admission with the error", d, err)
		}
	}
	fs.down.Store(false)
	_, _ = lim.Allow(ctx, "job:a")
	clk.Advance(time.Second)
	_, _ = lim.Allow(ctx, "job:a")
	recs := logs.all()
	if len(recs) != 2 {
		t.Fatalf("%d log lines, want 2: %v", len(recs), messages(recs))
	}
	for _, b := range checkLine(recs[1], logLine{level: slog.LevelInfo, msg: msgAnswers, counts: map[string]int64{"failed": 4, "unlimited": 4}}) {
		t.Error(b)
	}
}

// TestMistakeLog: a request the configuration makes impossible (a cost
// above the policy's capacity) is logged at most once a minute, with the
// count of those left unlogged, and is no outage of the store.
func TestMistakeLog(t *testing.T) {
	clk := newTestClock()
	logs := &logRecorder{}
	var hooked atomic.Int64
	lim := newLimiter(t, store.NewMemory(store.WithClock(clk.Now)), ratelimit.MustParsePolicy("2/m"), ratelimit.WithLogger(slog.New(logs)),
		ratelimit.WithCostFunc(func(*http.Request) int64 { return 5 }),
		ratelimit.WithErrorHook(func(*http.Request, error) { hooked.Add(1) }))
	ratelimit.SetLogClock(lim, clk.Now)
	h := lim.Handler(okHandler)
	steps := []struct {
		advance  time.Duration
		requests int
		lines    int
		unlogged int64 // of the latest line
	}{
		{0, 1, 1, 0},
		{0, 4, 1, 0},
		{59 * time.Second, 1, 1, 0},
		{time.Second, 1, 2, 5},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		outageServe(h, s.requests)
		recs := logs.all()
		if len(recs) != s.lines {
			t.Fatalf("step %d: %d log lines, want %d: %v", i, len(recs), s.lines, messages(recs))
		}
		last := recs[len(recs)-1]
		if last.Message != msgMistake || last.Level != slog.LevelError {
			t.Errorf("step %d: %s %q, want ERROR %q", i, last.Level, last.Message, msgMistake)
		}
		if v, _ := attrOf(last, "unlogged_since_last"); v.Int64() != s.unlogged {
			t.Errorf("step %d: unlogged_since_last = %v, want %d", i, v, s.unlogged)
		}
		if v, _ := attrOf(last, "error"); !strings.Contains(v.String(), "capacity") {
			t.Errorf("step %d: error %q, want the cost's", i, v)
		}
	}
	if hooked.Load() != 7 {
		t.Errorf("the error hook saw %d errors, want every one: 7", hooked.Load())
	}
}
