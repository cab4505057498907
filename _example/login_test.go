package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/store"
)

// clock is a clock the tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// loginServer is the example's router (newRouter, as run builds it) on a
// memory store that reads clock, with the demo password check counted.
type loginServer struct {
	h      http.Handler
	clock  *clock
	checks atomic.Int64 // password checks: runs of the /login handler
}

func newLoginServer(t *testing.T) *loginServer {
	t.Helper()
	s := &loginServer{clock: &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	check := func(user, password string) bool {
		s.checks.Add(1)
		return demoPassword(user, password)
	}
	observer, metrics, err := newMetrics()
	if err != nil {
		t.Fatal(err)
	}
	h, err := newRouter(store.NewMemory(store.WithClock(s.clock.Now)), store.NewMemory(), observer, metrics, check)
	if err != nil {
		t.Fatal(err)
	}
	s.h = h
	return s
}

// login posts a login form from the client at remote ("192.0.2.1:1234",
// "[2001:db8::1]:1234").
func (s *loginServer) login(remote, user, password string) *httptest.ResponseRecorder {
	form := url.Values{"user": {user}, "password": {password}}
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, r)
	return w
}

// attempt is one login of a scenario and what it must get.
type attempt struct {
	wait     time.Duration // the clock moves this much first
	remote   string
	user     string
	password string
	status   int
	// retryAfter, when not empty, is the Retry-After the answer must carry.
	retryAfter string
	// exhausted, when not empty, names the policy the RateLimit header must
	// show with nothing left ("login-user-1h"): the one that denied.
	exhausted string
	// rateLimit, when not empty, is a part the RateLimit header must hold.
	rateLimit string
}

// play runs the attempts in order (step 1 first) and checks that the password was checked
// exactly for the attempts answered 200 or 401: a 429 never reaches the
// handler.
func (s *loginServer) play(t *testing.T, attempts []attempt) {
	t.Helper()
	for i, a := range attempts {
		s.clock.Add(a.wait)
		before := s.checks.Load()
		w := s.login(a.remote, a.user, a.password)
		where := fmt.Sprintf("step %d (%s as %s from %s)", i+1, map[bool]string{true: "right password", false: "wrong password"}[a.password == "wonderland"], a.user, a.remote)
		if w.Code != a.status {
			t.Fatalf("%s: status %d, want %d; RateLimit: %s; Retry-After: %q; body: %s",
				where, w.Code, a.status, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"), strings.TrimSpace(w.Body.String()))
		}
		checked := s.checks.Load() - before
		if want := int64(map[bool]int{true: 1}[a.status != http.StatusTooManyRequests]); checked != want {
			t.Fatalf("%s: %d password checks, want %d (status %d)", where, checked, want, w.Code)
		}
		if a.retryAfter != "" && w.Header().Get("Retry-After") != a.retryAfter {
			t.Fatalf("%s: Retry-After %q, want %q", where, w.Header().Get("Retry-After"), a.retryAfter)
		}
		if a.exhausted != "" && !strings.Contains(w.Header().Get("RateLimit"), `"`+a.exhausted+`";r=0;`) {
			t.Fatalf("%s: RateLimit %q does not show %s exhausted", where, w.Header().Get("RateLimit"), a.exhausted)
		}
		if !strings.Contains(pkParam.ReplaceAllString(w.Header().Get("RateLimit"), ""), a.rateLimit) {
			t.Fatalf("%s: RateLimit %q does not hold %q", where, w.Header().Get("RateLimit"), a.rateLimit)
		}
	}
}

// repeat returns n copies of a.
func repeat(n int, a attempt) []attempt {
	out := make([]attempt, n)
	for i := range out {
		out[i] = a
	}
	return out
}

// TestLoginIPv6RotationInsideA64: a client rotating its address inside one
// IPv6 /64 is one client for login-pair, as for login-ip: 5 wrong passwords
// for alice, then blocked for an hour, whatever the address; another /64
// is not blocked.
func TestLoginIPv6RotationInsideA64(t *testing.T) {
	s := newLoginServer(t)
	var steps []attempt
	for n := 1; n <= 5; n++ {
		steps = append(steps, attempt{remote: fmt.Sprintf("[2001:db8:1:2::%d]:1234", n), user: "alice", password: "nope", status: 401})
	}
	for n := 6; n <= 20; n++ {
		steps = append(steps, attempt{remote: fmt.Sprintf("[2001:db8:1:2::%x]:1234", n), user: "alice", password: "nope",
			status: 429, retryAfter: "3600", exhausted: "login-pair-15m"})
	}
	steps = append(steps,
		// The block holds for the right password too, from any address of the /64.
		attempt{remote: "[2001:db8:1:2:ffff::1]:1234", user: "alice", password: "wonderland", status: 429, retryAfter: "3600", exhausted: "login-pair-15m"},
		// Another /64 (of the same /48, even) is not blocked.
		attempt{remote: "[2001:db8:1:3::1]:1234", user: "alice", password: "nope", status: 401},
		attempt{remote: "[2001:db8:1:3::2]:1234", user: "alice", password: "wonderland", status: 200},
		// The /64 blocked for alice may still try other names.
		attempt{remote: "[2001:db8:1:2::99]:1234", user: "bob", password: "nope", status: 401},
		// After 59 minutes the block still holds; after 61 it is lifted.
		attempt{wait: 59 * time.Minute, remote: "[2001:db8:1:2::100]:1234", user: "alice", password: "wonderland", status: 429, exhausted: "login-pair-15m"},
		attempt{wait: 2 * time.Minute, remote: "[2001:db8:1:2::101]:1234", user: "alice", password: "wonderland", status: 200},
	)
	s.play(t, steps)
	if got := s.checks.Load(); got != 9 {
		t.Errorf("%d password checks in all, want 9 (5 from the /64 for alice, 1 for bob, 3 from elsewhere or after the block)", got)
	}
}

// TestLoginBotnetDoesNotLockOutOwner: 20 addresses failing 5 times each
// spend alice's 100 failures per hour. From then on a network with a
// failure in the last 15 minutes is denied by login-user, but one with none
// is not: the owner logs in from it, and an attacker gets one guess from
// it, after which it has a failure.
func TestLoginBotnetDoesNotLockOutOwner(t *testing.T) {
	s := newLoginServer(t)
	var steps []attempt
	for a := 1; a <= 20; a++ {
		steps = append(steps, repeat(5, attempt{remote: fmt.Sprintf("192.0.2.%d:1234", a), user: "alice", password: "nope", status: 401})...)
	}
	steps = append(steps,
		// The owner, from a network with no failure: in.
		attempt{remote: "198.51.100.7:1234", user: "alice", password: "wonderland", status: 200},
		attempt{remote: "[2001:db8:7:7::1]:1234", user: "alice", password: "wonderland", status: 200},
		// A network of the botnet: login-user denies, even the right password.
		attempt{remote: "192.0.2.3:1234", user: "alice", password: "wonderland", status: 429, exhausted: "login-user-1h"},
		// A network whose only failure was at another name: denied too.
		attempt{remote: "203.0.113.9:1234", user: "bob", password: "nope", status: 401},
		attempt{remote: "203.0.113.9:1234", user: "alice", password: "wonderland", status: 429, exhausted: "login-user-1h"},
		// A fresh network gets one guess, then it has a failure.
		attempt{remote: "198.51.100.8:1234", user: "alice", password: "nope", status: 401},
		attempt{remote: "198.51.100.8:1234", user: "alice", password: "nope", status: 429, exhausted: "login-user-1h"},
		// The same for IPv6, by /48: another /64 of the /48 is no fresh network.
		attempt{remote: "[2001:db8:5:1::1]:1234", user: "alice", password: "nope", status: 401},
		attempt{remote: "[2001:db8:5:1::2]:1234", user: "alice", password: "nope", status: 429, exhausted: "login-user-1h"},
		attempt{remote: "[2001:db8:5:2::1]:1234", user: "alice", password: "nope", status: 429, exhausted: "login-user-1h"},
		attempt{remote: "[2001:db8:5:ffff::1]:1234", user: "alice", password: "wonderland", status: 429, exhausted: "login-user-1h"},
		// 15 minutes after its failure a network is fresh again: one more guess.
		attempt{wait: 15 * time.Minute, remote: "198.51.100.8:1234", user: "alice", password: "nope", status: 401},
		attempt{remote: "198.51.100.8:1234", user: "alice", password: "nope", status: 429, exhausted: "login-user-1h"},
		attempt{remote: "192.0.2.3:1234", user: "alice", password: "wonderland", status: 200},
		// The owner's successes reset nothing an attacker could use: the
		// name's failures still count.
		attempt{remote: "203.0.113.9:1234", user: "alice", password: "nope", status: 401},
		attempt{remote: "203.0.113.9:1234", user: "alice", password: "nope", status: 429, exhausted: "login-user-1h"},
	)
	s.play(t, steps)
}

// TestLoginSuccessResetsOnlyThePair: the right password resets the pair's
// failures, so the client has its 5 tries again before the hour's block,
// but not the IP's nor the user name's: they still count the failures
// before the success.
func TestLoginSuccessResetsOnlyThePair(t *testing.T) {
	s := newLoginServer(t)
	const ip = "192.0.2.1:1234"
	wrong := func(user string) attempt {
		return attempt{remote: ip, user: user, password: "nope", status: 401}
	}
	steps := repeat(4, wrong("alice"))
	steps = append(steps,
		attempt{remote: ip, user: "alice", password: "wonderland", status: 200},
		attempt{remote: ip, user: "alice", password: "nope", status: 401,
			rateLimit: `"login-ip-15m";r=15;t=900, "login-user-1h";r=95;t=3600, "login-pair-15m";r=4;t=900`})
	steps = append(steps, repeat(4, wrong("alice"))...)
	steps = append(steps, attempt{remote: ip, user: "alice", password: "nope", status: 429, retryAfter: "3600", exhausted: "login-pair-15m"})
	// 9 failures so far count for the IP: 11 more at other names reach its 20.
	steps = append(steps, repeat(5, wrong("bob"))...)
	steps = append(steps, repeat(5, wrong("carol"))...)
	steps = append(steps,
		attempt{remote: ip, user: "dave", password: "nope", status: 401, rateLimit: `"login-ip-15m";r=0;`},
		attempt{remote: ip, user: "erin", password: "nope", status: 429, exhausted: "login-ip-15m"},
		attempt{remote: ip, user: "alice", password: "wonderland", status: 429, exhausted: "login-ip-15m"},
	)
	s.play(t, steps)
	if got := s.checks.Load(); got != 21 {
		t.Errorf("%d password checks in all, want 21 (20 failures, 1 success)", got)
	}
}

// pkParam matches the pk parameter of a RateLimit item (each identity's
// partition key), which the steps leave aside.
var pkParam = regexp.MustCompile(`;pk=:[A-Za-z0-9+/=]*:`)
