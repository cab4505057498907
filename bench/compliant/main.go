// Command compliant measures what a client that honours Retry-After gets
// from the example's limiter: the rate its policy promises, or less.
//
//	cd bench && go run ./compliant
//
// It serves GET /api/hello as _example does (policy "hello": 10/s, 120/m,
// 240/h per client IP and per X-API-Key, counters in Redis under the
// prefix "example:", the memory store as fallback) on a loopback port,
// with Redis a private redis-server it starts (or miniredis when there is
// no redis-server on PATH, or the Redis given with -redis). Then -clients
// clients, each from its own loopback address and with its own API key,
// each make -requests requests with hashicorp/go-retryablehttp, which
// after a 429 sleeps exactly the seconds of Retry-After and tries again.
// It prints, per client and overall, the requests admitted per second and
// the Retry-After values seen.
//
// Admitted per second is the admissions divided by the span from the first
// to the last admission plus one second: every admission lies in that
// half-open interval, where the 10/s limit admits at most 10 per second. A
// client admitted each time the policy allows gets 10.0, less only by its
// own request latency.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/bench/internal/redisproc"
	"github.com/ratelimitkit/ratelimit/store"
)

// policy is _example's policy for /api/hello.
const policy = "10/s, 120/m, 240/h"

// trace: print client 1's responses as they come (-trace).
var trace bool

func main() {
	clients := flag.Int("clients", 4, "concurrent clients, each with its own loopback address and API key")
	requests := flag.Int("requests", 120, "requests each client makes (each retried until admitted)")
	redisAddr := flag.String("redis", "", "host:port of a Redis to use; empty starts a private redis-server (miniredis if there is none)")
	redisBin := flag.String("redis-server", "redis-server", "redis-server binary used when -redis is empty")
	flag.BoolVar(&trace, "trace", false, "print every response client 1 gets: time, status, Retry-After, RateLimit")
	flag.BoolVar(&matrix, "matrix", false, "instead of the example's policy, run every algorithm, small bursts and short periods (-clients clients, 10 s of requests each) and print one row each")
	flag.Parse()
	if *clients < 1 || *clients > 200 || *requests < 1 || *requests > 10_000 {
		log.Fatal("compliant: -clients must be 1 to 200 and -requests 1 to 10000")
	}
	if err := run(*clients, *requests, *redisAddr, *redisBin); err != nil {
		log.Fatalf("compliant: %v", err)
	}
}

// matrix: run matrixCases instead of the example's policy (-matrix).
var matrix bool

// matrixCases are the policies -matrix runs: every algorithm, token
// buckets whose burst refills within a second, and periods below a second.
var matrixCases = []struct {
	policy string
	opts   []ratelimit.PolicyOption
}{
	{"10/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindow)}},
	{"100/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindow)}}, // sub-buckets
	{"10/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingLog)}},
	{"10/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.FixedWindow)}},
	{"10/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket)}},
	{"20/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(5)}},
	{"20/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(1)}},
	{"30/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)}},
	{"10/500ms", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindow)}},
	{"10/500ms", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.FixedWindow)}},
	{"30/500ms", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)}},
	{"120/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)}},
	{"100/2s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)}},
}

func run(nClients, nRequests int, addr, bin string) error {
	where := addr + " (-redis)"
	if addr == "" {
		proc, err := redisproc.Start(bin)
		if err == nil {
			defer proc.Stop()
			addr, where = proc.Addr, proc.Addr+" (a private redis-server)"
		} else {
			mr, merr := miniredis.Run()
			if merr != nil {
				return fmt.Errorf("no redis-server (%v), and miniredis: %w", err, merr)
			}
			defer mr.Close()
			addr, where = mr.Addr(), mr.Addr()+" (miniredis: "+err.Error()+")"
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	version, err := rc.Info(ctx, "server").Result()
	cancel()
	if err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}

	// The example's limiter, as _example/main.go builds it.
	st, err := store.NewRedis(rc, store.WithPrefix("example:"))
	if err != nil {
		return err
	}
	if matrix {
		return runMatrix(st, rc, version, where, nClients)
	}
	byIP := ratelimit.ByIP()
	byKey := ratelimit.ByHeader("X-API-Key")
	var storeErrs atomic.Int64
	hello, err := ratelimit.New(st, ratelimit.MustParsePolicy(policy, ratelimit.Named("hello")),
		ratelimit.WithIdentifiers(byIP, byKey), ratelimit.WithFallback(store.NewMemory()),
		ratelimit.WithErrorHook(func(*http.Request, error) { storeErrs.Add(1) }))
	if err != nil {
		return err
	}
	r := chi.NewRouter()
	r.With(hello.Handler).Get("/api/hello", func(w http.ResponseWriter, r *http.Request) {
		res, _ := ratelimit.FromContext(r.Context())
		fmt.Fprintf(w, "hello; %d left\n", res.Decision.Remaining)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/api/hello"

	fmt.Printf("library: %s\nredis: %s at %s\nserver: _example's /api/hello, policy \"hello\" %s per client IP and per X-API-Key, at %s\n",
		library(), redisVersion(version), where, policy, url)
	fmt.Printf("clients: %d, each from its own loopback address with its own API key, %d requests each, hashicorp/go-retryablehttp (sleeps exactly Retry-After after a 429)\n\n",
		nClients, nRequests)

	res := make([]*result, nClients)
	errs := make([]error, nClients)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = runClient(i, url, nRequests)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	fmt.Println("| client | admitted | 429s | first → last admission | admitted/s | of 10/s | Retry-After seen |")
	fmt.Println("|---|--:|--:|--:|--:|--:|---|")
	all := &result{retryAfter: map[string]int{}}
	for i, c := range res {
		fmt.Printf("| %d (%s) | %d | %d | %s | %.2f | %.0f%% | %s |\n", i+1, c.from, len(c.admitted), c.denied,
			c.span().Round(time.Millisecond), c.rate(), c.rate()*10, c.seen())
		all.admitted = append(all.admitted, c.admitted...)
		all.denied += c.denied
		for v, n := range c.retryAfter {
			all.retryAfter[v] += n
		}
	}
	sort.Slice(all.admitted, func(i, j int) bool { return all.admitted[i] < all.admitted[j] })
	fmt.Printf("| all | %d | %d | %s | %.2f (%.2f per client) | %.0f%% | %s |\n\n", len(all.admitted), all.denied,
		all.span().Round(time.Millisecond), all.rate(), all.rate()/float64(nClients), all.rate()/float64(nClients)*10, all.seen())
	fmt.Printf("whole run %s; store errors (answered by the fallback) %d\n", time.Since(start).Round(time.Millisecond), storeErrs.Load())
	return nil
}

// result is what one client got.
type result struct {
	from       string
	admitted   []time.Duration // when each 200 arrived, from the start
	denied     int
	retryAfter map[string]int // Retry-After values of the 429s, and how often
}

func (r *result) span() time.Duration { return r.admitted[len(r.admitted)-1] - r.admitted[0] }

// rate is admissions per second over the span plus one second.
func (r *result) rate() float64 {
	return float64(len(r.admitted)) / (r.span() + time.Second).Seconds()
}

// periodRate is admissions per second in the steady state: over the whole
// periods that fit in the span after the first period, counted from the
// first admission. What a limit of Rate per Period promises a client that
// keeps asking is Rate in each of them. The first period is left out: it
// holds the first burst, which an algorithm that admits up to twice its
// rate in an unaligned window (the approximation, the fixed window) would
// count in; and so is what follows the last whole period, where a run's
// last requests land wherever it happens to end.
func (r *result) periodRate(period time.Duration) float64 {
	whole := (r.span() - period) / period * period
	if whole <= 0 {
		return 0
	}
	n := 0
	for _, at := range r.admitted {
		if d := at - r.admitted[0]; d >= period && d < period+whole {
			n++
		}
	}
	return float64(n) / whole.Seconds()
}

func (r *result) seen() string {
	var vs []string
	for v, n := range r.retryAfter {
		vs = append(vs, fmt.Sprintf("%s s ×%d", v, n))
	}
	sort.Strings(vs)
	if len(vs) == 0 {
		return "none"
	}
	return strings.Join(vs, ", ")
}

// runClient makes n requests to url from 127.0.0.(11+i) with the API key
// client-(i+1), each retried by go-retryablehttp until admitted.
func runClient(i int, url string, n int) (*result, error) {
	from := fmt.Sprintf("127.0.0.%d", 11+i)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	c.RetryMax = 1000 // never give up: a 429 is always followed by its Retry-After
	c.Logger = nil
	res := &result{from: from, retryAfter: map[string]int{}}
	start := time.Now()
	var mu sync.Mutex
	c.ResponseLogHook = func(_ retryablehttp.Logger, resp *http.Response) {
		mu.Lock()
		defer mu.Unlock()
		if trace && i == 0 {
			fmt.Printf("client 1 %8.3fs: %d Retry-After=%q RateLimit=%q\n", time.Since(start).Seconds(), resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"))
		}
		switch resp.StatusCode {
		case http.StatusOK:
			res.admitted = append(res.admitted, time.Since(start))
		case http.StatusTooManyRequests:
			res.denied++
			res.retryAfter[resp.Header.Get("Retry-After")]++
		}
	}
	for k := 0; k < n; k++ {
		req, err := retryablehttp.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-API-Key", fmt.Sprintf("client-%d", i+1))
		resp, err := c.Do(req)
		if err != nil {
			return nil, fmt.Errorf("client %d request %d: %w", i+1, k+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("client %d request %d: status %d", i+1, k+1, resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(res.admitted) != n {
		return nil, fmt.Errorf("client %d: %d admissions seen, want %d", i+1, len(res.admitted), n)
	}
	return res, nil
}

// library names the ratelimit source this program was built with: the
// directory of the replace directive, and its git commit.
func library() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, m := range bi.Deps {
		if m.Path != "github.com/ratelimitkit/ratelimit" {
			continue
		}
		if m.Replace == nil {
			return m.Path + " " + m.Version
		}
		dir := m.Replace.Path
		if !filepath.IsAbs(dir) {
			// Relative to the bench module, where go run is started.
			if wd, err := os.Getwd(); err == nil {
				dir = filepath.Join(wd, dir)
			}
		}
		out, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%h %s").Output()
		if err != nil {
			return dir
		}
		s := dir + " at " + strings.TrimSpace(string(out))
		if dirty, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(dirty) > 0 {
			s += " (with uncommitted changes)"
		}
		return s
	}
	return "unknown"
}

func redisVersion(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "Redis " + v
		}
	}
	return "Redis"
}

// runMatrix runs every case of matrixCases with n clients, each making 10
// seconds' worth of requests, and prints a row per case: what the clients
// got per second in the steady state (periodRate), and its share of the
// rate the policy states.
func runMatrix(st *store.Redis, rc *redis.Client, version, where string, n int) error {
	fmt.Printf("library: %s\nredis: %s at %s\nclients: %d per policy, each from its own loopback address, hashicorp/go-retryablehttp (sleeps exactly Retry-After after a 429); the Limiter's defaults (waits below a second are held)\n\n",
		library(), redisVersion(version), where, n)
	fmt.Println("| policy | algorithm | burst | stated rate | admitted/s per client | share | 429s | Retry-After seen | held (served later than sent) |")
	fmt.Println("|---|---|--:|--:|--:|--:|--:|---|--:|")
	for i, c := range matrixCases {
		p, err := ratelimit.ParsePolicy(c.policy, append([]ratelimit.PolicyOption{ratelimit.Named(fmt.Sprintf("m%d-%d", i, time.Now().UnixNano()%1e6))}, c.opts...)...)
		if err != nil {
			return err
		}
		l := p.Limits()[0]
		perSecond := float64(l.Rate) / l.Period.Seconds()
		lim, err := ratelimit.New(st, p, ratelimit.WithIdentifiers(mustHeader("X-API-Key")))
		if err != nil {
			return err
		}
		// held: requests served 5ms or more after they reached the Limiter.
		var held atomic.Int64
		type arrivedKey struct{}
		limited := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if at, ok := r.Context().Value(arrivedKey{}).(time.Time); ok && time.Since(at) >= 5*time.Millisecond {
				held.Add(1)
			}
			fmt.Fprintln(w, "hello")
		}))
		mux := http.NewServeMux()
		mux.Handle("/api/hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			limited.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), arrivedKey{}, time.Now())))
		}))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		url := "http://" + ln.Addr().String() + "/api/hello"
		requests := int(perSecond * 10)
		res := make([]*result, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for k := range res {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[k], errs[k] = runClient(k, url, requests)
			}()
		}
		wg.Wait()
		srv.Close()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		all := &result{retryAfter: map[string]int{}}
		got := 0.0
		for _, c := range res {
			got += c.periodRate(l.Period)
			all.denied += c.denied
			for v, k := range c.retryAfter {
				all.retryAfter[v] += k
			}
		}
		got /= float64(n)
		burst := "-"
		if p.Algorithm() == ratelimit.TokenBucket {
			burst = fmt.Sprint(max(l.Burst, l.Rate))
			if l.Burst > 0 {
				burst = fmt.Sprint(l.Burst)
			}
		}
		fmt.Printf("| %s | %s | %s | %.0f/s | %.2f | %.1f%% | %d | %s | %d |\n", c.policy, p.Algorithm(), burst, perSecond, got, 100*got/perSecond, all.denied, all.seen(), held.Load())
	}
	return nil
}

// mustHeader is ByHeader(name), which cannot fail for a valid name.
func mustHeader(name string) ratelimit.Identifier {
	id := ratelimit.ByHeader(name)
	return id
}
