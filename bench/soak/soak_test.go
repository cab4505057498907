package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

func testPopulation(limits ...limitSpec) *population {
	return newPopulation(config{rps: 100, residents: 10, greedy: 1, polite: 1}, limits, time.Second)
}

// admit records an admission of greedy resident 0 sent at send and
// answered at recv (milliseconds).
func admit(p *population, send, recv int) {
	id := int32(greedy) * classStride
	p.ids[id].inflight = true
	p.done(id, greedy, span{send: time.Duration(send) * time.Millisecond, recv: time.Duration(recv) * time.Millisecond}, true, 0)
}

func TestOverAdmissionCheck(t *testing.T) {
	tests := []struct {
		name  string
		spans [][2]int // send, recv in ms
		want  int
	}{
		{"rate admissions in one period", [][2]int{{0, 1}, {100, 101}, {200, 201}}, 0},
		{"rate+1 spaced by the period", [][2]int{{0, 1}, {100, 101}, {200, 201}, {1000, 1001}}, 0},
		{"rate+1 within the period", [][2]int{{0, 1}, {100, 101}, {200, 201}, {998, 999}}, 1},
		// The last answer came after a full period: the charges may have
		// been spread over more than a period, so no verdict.
		{"rate+1, slow last answer", [][2]int{{0, 1}, {100, 101}, {200, 201}, {900, 1000}}, 0},
		{"two violations in a row", [][2]int{{0, 1}, {10, 11}, {20, 21}, {30, 31}, {40, 41}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPopulation(limitSpec{rate: 3, period: time.Second})
			for _, s := range tt.spans {
				admit(p, s[0], s[1])
			}
			if got, first, _ := p.result(); got != tt.want {
				t.Errorf("violations = %d (%q), want %d", got, first, tt.want)
			}
		})
	}
}

func TestOverAdmissionCheckEveryLimit(t *testing.T) {
	// 3 per second is kept, 5 per 10s is not.
	p := testPopulation(limitSpec{rate: 3, period: time.Second}, limitSpec{rate: 5, period: 10 * time.Second})
	for i := range 6 {
		admit(p, i*1000, i*1000+1)
	}
	got, first, _ := p.result()
	if got != 1 || len(first) != 1 || !strings.Contains(first[0], "limit 1 (5 per 10s)") {
		t.Errorf("violations = %d %q, want 1 of limit 1", got, first)
	}
}

func TestPruneForgetsVisitors(t *testing.T) {
	p := testPopulation(limitSpec{rate: 3, period: time.Second})
	id := int32(visitor) * classStride
	if !p.take(id, 0) {
		t.Fatal("a new visitor was not ready")
	}
	p.done(id, visitor, span{send: 0, recv: time.Millisecond}, true, 0)
	residents := 10 + 1 + 1
	if n := p.sweep(500 * time.Millisecond); n != residents+1 {
		t.Errorf("tracked identities within the period = %d, want the %d residents and the visitor", n, residents)
	}
	if n := p.sweep(5 * time.Second); n != residents {
		t.Errorf("tracked identities after the period = %d, want the %d residents", n, residents)
	}
}

func TestPoliteWaits(t *testing.T) {
	p := testPopulation(limitSpec{rate: 3, period: time.Second})
	id := int32(polite) * classStride
	p.ids[id].inflight = true
	p.done(id, polite, span{send: 0, recv: time.Millisecond}, false, 2*time.Second)
	if p.take(id, time.Second) {
		t.Error("a polite identity was picked before its Retry-After")
	}
	if !p.take(id, 2*time.Second+time.Millisecond) {
		t.Error("a polite identity was not picked after its Retry-After")
	}
}

func TestAutoPolicy(t *testing.T) {
	for _, d := range []time.Duration{12 * time.Second, 13 * time.Second, 30 * time.Second, 3 * time.Minute, 19 * time.Minute, 20 * time.Minute, 30 * time.Minute, 2 * time.Hour} {
		s := autoPolicy(d)
		p, err := ratelimit.ParsePolicy(s)
		if err != nil {
			t.Errorf("%v: autoPolicy %q: %v", d, s, err)
			continue
		}
		if n := len(p.Limits()); n != 3 {
			t.Errorf("%v: %q has %d limits, want 3", d, s, n)
		}
		for _, l := range p.Limits() {
			if l.Period > d/4 {
				t.Errorf("%v: %q: period %v is longer than a quarter of the run", d, s, l.Period)
			}
		}
	}
}

func TestCheckSoak(t *testing.T) {
	base := sample{heap: 100 << 20, goroutines: 100, keys: 1000, usedMemory: 10 << 20, base: true}
	tests := []struct {
		name  string
		end   func(s *sample)
		fails int
	}{
		{"flat", func(*sample) {}, 0},
		{"heap +9%", func(s *sample) { s.heap = 109 << 20 }, 0},
		{"heap +11%", func(s *sample) { s.heap = 111 << 20 }, 1},
		{"goroutines +11%", func(s *sample) { s.goroutines = 111 }, 1},
		{"keys +11%", func(s *sample) { s.keys = 1110 }, 1},
		{"keys halved", func(s *sample) { s.keys = 500 }, 0},
		{"used_memory +20%", func(s *sample) { s.usedMemory = 12 << 20 }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			end := base
			end.base = false
			tt.end(&end)
			decided := sample{}
			decided.n[normal][admitted] = 100
			f := checkSoak([]sample{decided, base, end}, 0, nil, true, false)
			if f.n != tt.fails {
				t.Errorf("%d failures, want %d:\n%s", f.n, tt.fails, strings.Join(f.lines, "\n"))
			}
		})
	}
	f := checkSoak([]sample{base, base}, 2, []string{"x"}, true, false)
	if f.n == 0 {
		t.Error("violations did not fail the run")
	}

	// The end is the least of the last three samples: a stall at the last
	// instant is not a leak; growth in all three is.
	flat, spike, grown := base, base, base
	flat.base, spike.base, grown.base = false, false, false
	spike.heap, spike.goroutines = 200<<20, 200
	grown.heap = 120 << 20
	decided := sample{}
	decided.n[normal][admitted] = 100
	for _, tt := range []struct {
		name  string
		after []sample
		fails int
	}{
		{"spike in the last sample", []sample{flat, flat, flat, flat, spike}, 0},
		{"growth in the last three", []sample{flat, grown, grown, grown}, 1},
		{"growth before the last three only", []sample{grown, grown, flat, flat, flat}, 0},
	} {
		f := checkSoak(append([]sample{decided, base}, tt.after...), 0, nil, true, false)
		if f.n != tt.fails {
			t.Errorf("%s: %d failures, want %d:\n%s", tt.name, f.n, tt.fails, strings.Join(f.lines, "\n"))
		}
	}
}
