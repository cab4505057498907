package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestDeterministic: two runs write the same files, byte for byte.
func TestDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	none := filepath.Join(t.TempDir(), "no-fleet.csv")
	for _, dir := range []string{a, b} {
		if err := generate(dir, none, filepath.Join(dir, "fleet")); err != nil {
			t.Fatal(err)
		}
	}
	fa, fb := listFiles(t, a), listFiles(t, b)
	if !slices.Equal(fa, fb) {
		t.Fatalf("runs wrote different files:\n%v\n%v", fa, fb)
	}
	if want := len(scenarios()); len(fa) != want {
		t.Fatalf("wrote %d files, want %d (a PNG per scenario): %v", len(fa), want, fa)
	}
	for _, name := range fa {
		x, err := os.ReadFile(filepath.Join(a, name))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs", name)
		}
		if len(x) < 1000 {
			t.Errorf("%s: only %d bytes", name, len(x))
		}
	}
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestDrawnIsAdmitted: the bars drawn are the requests the Limiter
// admitted, bin by bin; the curves are the admissions counted by brute
// force; and a Limiter asked directly (AllowN) at the same instants
// decides the same way as the Handler did.
func TestDrawnIsAdmitted(t *testing.T) {
	for _, s := range scenarios() {
		t.Run(s.File, func(t *testing.T) {
			f, r, err := s.figure()
			if err != nil {
				t.Fatal(err)
			}
			// Bars: admitted and denied per bin, from the status codes.
			drawnAdmitted := 0
			for i := range f.Bars.bins() {
				var admitted, denied int
				for _, e := range r.Events {
					if e.At >= time.Duration(i)*s.Bin && e.At < time.Duration(i+1)*s.Bin {
						if e.Status == http.StatusOK {
							admitted++
						} else {
							denied++
						}
					}
				}
				got := f.Bars.Layers[0].Values[i] + f.Bars.Layers[1].Values[i]
				if got != admitted || f.Bars.Layers[2].Values[i] != denied {
					t.Errorf("bin %d: drawn %d admitted, %d denied; the client saw %d and %d", i, got, f.Bars.Layers[2].Values[i], admitted, denied)
				}
				drawnAdmitted += got
			}
			if len(r.Events) == 0 || drawnAdmitted == 0 {
				t.Fatalf("%d requests, %d admitted drawn: the scenario shows nothing", len(r.Events), drawnAdmitted)
			}

			// The same instants through Limiter.AllowN on a fresh store.
			replayed := replay(t, r)
			if replayed != drawnAdmitted {
				t.Errorf("drawn %d admitted, AllowN admitted %d", drawnAdmitted, replayed)
			}

			// Curves: the most admitted in any window, by brute force.
			adm := r.admittedTimes()
			for i, steps := range f.Counts {
				period := r.Policy.Limits()[i].Period
				if got, want := maxCount(steps), bruteMax(adm, period); got != want {
					t.Errorf("limit %d: drawn most %d in a window, brute force says %d", i, got, want)
				}
			}
		})
	}
}

// replay asks a new Limiter, over a new memory store, about each request
// of r at its instant, and fails the test on the first decision that
// differs from the status the Handler gave; it returns how many it
// admitted.
func replay(t *testing.T, r *run) int {
	t.Helper()
	clk := &clock{now: epoch}
	lim, err := ratelimit.New(store.NewMemory(store.WithClock(clk.Now)), r.Policy, ratelimit.WithMaxDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, e := range r.Events {
		clk.set(epoch.Add(e.At))
		d, err := lim.AllowN(context.Background(), 1, "replay")
		if err != nil {
			t.Fatalf("event %d at %s: %v", i, e.At, err)
		}
		if d.Allowed != e.Admitted() {
			t.Fatalf("event %d at %s: AllowN says allowed=%v, the Handler answered %d", i, e.At, d.Allowed, e.Status)
		}
		if d.Allowed {
			n++
		}
	}
	return n
}

// bruteMax is the most admissions in any window [s, s+period), by trying
// every window that starts at an admission.
func bruteMax(adm []time.Duration, period time.Duration) int {
	m := 0
	for _, s := range adm {
		n := 0
		for _, a := range adm {
			if a >= s && a < s+period {
				n++
			}
		}
		m = max(m, n)
	}
	return m
}

// TestClientHonoursRetryAfter: after a 429 the client's next request is
// exactly Retry-After later (the header in whole seconds, at least 1, the
// Decision's RetryAfter rounded up), and it is admitted.
func TestClientHonoursRetryAfter(t *testing.T) {
	for _, s := range scenarios() {
		t.Run(s.File, func(t *testing.T) {
			_, r, err := s.figure()
			if err != nil {
				t.Fatal(err)
			}
			waits := 0
			for i, e := range r.Events {
				if !e.Admitted() {
					want := max(1, int64((e.Exact+time.Second-1)/time.Second))
					if e.RetryAfter != want {
						t.Errorf("429 at %s: Retry-After %d, want %d (RetryAfter %s rounded up)", e.At, e.RetryAfter, want, e.Exact)
					}
				}
				if e.Phase != phasePolite || e.Admitted() || i+1 == len(r.Events) {
					continue
				}
				next := r.Events[i+1]
				if wait := next.At - e.At; wait != time.Duration(e.RetryAfter)*time.Second {
					t.Errorf("429 at %s with Retry-After %d: next request %s later", e.At, e.RetryAfter, wait)
				}
				if !next.Admitted() {
					t.Errorf("429 at %s with Retry-After %d: the request after waiting was denied", e.At, e.RetryAfter)
				}
				waits++
			}
			if waits == 0 {
				t.Error("the client never had to wait: the scenario shows no Retry-After")
			}
		})
	}
}

// TestWhatTheFiguresShow pins what the README says each figure shows.
func TestWhatTheFiguresShow(t *testing.T) {
	most := map[string][]int{}
	firstPolite := map[string]time.Duration{}
	for _, s := range scenarios() {
		f, r, err := s.figure()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range f.Counts {
			most[s.File] = append(most[s.File], maxCount(c))
		}
		if s.Compare != nil {
			_, c, err := s.simulate()
			if err != nil {
				t.Fatal(err)
			}
			firstPolite[s.File] = firstPoliteAdmission(r)
			firstPolite[s.File+"/compare"] = firstPoliteAdmission(c)
		}
	}
	check := func(file string, ok func(m []int) bool, what string) {
		t.Helper()
		if m := most[file]; !ok(m) {
			t.Errorf("%s: most admitted in a window %v: want %s", file, m, what)
		}
	}
	exact := func(m []int) bool { return slices.Equal(m, []int{10}) }
	check("sliding-window", exact, "exactly the limit, 10")
	check("sliding-log", exact, "exactly the limit, 10")
	check("fixed-window", func(m []int) bool { return slices.Equal(m, []int{20}) }, "twice the limit, 20, across the edge")
	check("sliding-window-approx", func(m []int) bool { return len(m) == 1 && m[0] > 30 && m[0] < 60 }, "over 30, under 60 (drawn at 30/s)")
	// Token bucket: Burst + d/T in a span d: 10 + 1s/100ms = 20 at most.
	check("token-bucket", func(m []int) bool { return len(m) == 1 && m[0] > 10 && m[0] <= 20 }, "over 10 (the burst, then the refill), at most 20")
	check("sliding-window-100-per-10s", func(m []int) bool { return slices.Equal(m, []int{100}) }, "exactly the limit, 100")
	for _, f := range []string{"sliding-window-3-limits", "sliding-log-3-limits"} {
		check(f, func(m []int) bool { return slices.Equal(m, []int{10, 120, 240}) }, "exactly the limits")
	}
	check("fixed-window-3-limits", func(m []int) bool { return len(m) == 3 && m[0] == 20 && m[1] > 120 && m[2] == 240 }, "over the second and minute limits")

	sub, log := firstPolite["sliding-window-100-per-10s"], firstPolite["sliding-window-100-per-10s/compare"]
	if sub <= log || sub-log > time.Second {
		t.Errorf("sub-buckets admitted the waiting client at %s, the exact log at %s: want later by at most one sub-bucket (1s)", sub, log)
	}
}

// firstPoliteAdmission is when the client honouring Retry-After was first
// admitted.
func firstPoliteAdmission(r *run) time.Duration {
	for _, e := range r.Events {
		if e.Phase == phasePolite && e.Admitted() {
			return e.At
		}
	}
	return -1
}

// TestSeriesFromCSV: the CSV figure kind reads columns and draws them, and
// refuses bad input with an error that says where.
func TestSeriesFromCSV(t *testing.T) {
	in := "t,limiter-a,limiter-b\n0,10,9.5\n1,10,0\n# a comment\n2,11,10\n"
	cols, err := readColumns(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != 3 || cols[1].Name != "limiter-a" || !slices.Equal(cols[2].Values, []float64{9.5, 0, 10}) {
		t.Fatalf("read %+v", cols)
	}
	f, err := buildSeriesFigure(seriesSpec{Title: "fleet: per second", XLabel: "t (s)", YLabel: "per second"}, cols[0], cols[1:])
	if err != nil {
		t.Fatal(err)
	}
	svg1, err := renderSVG(f)
	if err != nil {
		t.Fatal(err)
	}
	f2, _ := buildSeriesFigure(seriesSpec{Title: "fleet: per second", XLabel: "t (s)", YLabel: "per second"}, cols[0], cols[1:])
	svg2, err := renderSVG(f2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(svg1, svg2) || !bytes.Contains(svg1, []byte("limiter-b")) {
		t.Error("series SVG is not deterministic or lacks the legend")
	}
	if png, err := renderPNG(f); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("series PNG: %v", err)
	}

	for _, bad := range []struct{ in, want string }{
		{"", "empty"},
		{"t,a\n", "no rows"},
		{"t,a\n0,1\n1,x\n", `line 3, column "a"`},
		{"t,a\n0,NaN\n", "finite"},
		{"t,\n0,1\n", "column 2 has no name"},
		{"t,a\n0,1,2\n", "wrong number of fields"},
	} {
		if _, err := readColumns(strings.NewReader(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("readColumns(%q): error %v, want one containing %q", bad.in, err, bad.want)
		}
	}
	if _, err := buildSeriesFigure(seriesSpec{}, cols[0], []Column{{Name: "short", Values: []float64{1}}}); err == nil {
		t.Error("columns of different lengths: no error")
	}
	if _, err := buildSeriesFigure(seriesSpec{}, cols[0], nil); err == nil {
		t.Error("no column to draw: no error")
	}
}

// TestTrailing checks the window count on a small case by hand: windows
// are half-open, so admissions one period apart never count together.
func TestTrailing(t *testing.T) {
	ms := time.Millisecond
	got := trailing([]time.Duration{0, 0, 500 * ms, 1000 * ms}, time.Second, 2*time.Second)
	want := []step{{0, 2}, {500 * ms, 3}, {1000 * ms, 2}, {1500 * ms, 1}, {2000 * ms, 0}}
	if !slices.Equal(got, want) {
		t.Errorf("trailing: got %v, want %v", got, want)
	}
}
