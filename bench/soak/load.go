package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// outcome is how a request was answered.
type outcome uint8

const (
	admitted   outcome = iota // 200 with rate-limit headers: the store decided
	denied                    // 429
	failedOpen                // 200 without rate-limit headers: the store failed, FailOpen let it through
	failed                    // transport error or any other status
	numOutcomes
)

// counts are per-class, per-outcome request counters.
type counts [numClasses][numOutcomes]atomic.Int64

// snapshot returns the counters and resets them.
func (c *counts) snapshot() (out [numClasses][numOutcomes]int64) {
	for i := range c {
		for j := range c[i] {
			out[i][j] = c[i][j].Swap(0)
		}
	}
	return out
}

// latencies collects request durations between two samples.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// take returns the p50 and p99 of the durations since the last call, and
// forgets them.
func (l *latencies) take() (p50, p99 time.Duration) {
	l.mu.Lock()
	d := l.d
	l.d = make([]time.Duration, 0, cap(d))
	l.mu.Unlock()
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	q := func(f float64) time.Duration { return d[min(len(d)-1, int(f*float64(len(d))))] }
	return q(0.50), q(0.99)
}

// pacer offers requests at an even rate from start until stop is closed:
// every millisecond it hands jobs the requests due by then, each as the
// time it was scheduled for (since start). A request that finds the queue
// full (every worker busy and as many requests waiting as there are
// workers) is dropped, so the offered load stays steady whatever the
// latency (an open loop). offer is told of every request, queued or not.
func pacer(start time.Time, rps float64, jobs chan<- time.Duration, stop <-chan struct{}, offer func(at time.Duration, queued bool)) {
	defer close(jobs)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var sent int64
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Since(start)
		due := int64(now.Seconds() * rps)
		for ; sent < due; sent++ {
			at := time.Duration(float64(sent) / rps * float64(time.Second))
			select {
			case jobs <- at:
				offer(at, true)
			default:
				offer(at, false)
			}
		}
	}
}

// newClient returns an HTTP client with one keep-alive connection per
// worker at most, and no idle timeout, so the number of connections (and
// their goroutines) does not drift during a run.
func newClient(workers int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			MaxIdleConns:        workers,
			MaxIdleConnsPerHost: workers,
			MaxConnsPerHost:     workers,
			DisableCompression:  true,
		},
		Timeout: 10 * time.Second,
	}
}

// warm opens n connections to srv at once, so that every worker's
// connection exists before the measurements start.
func warm(client *http.Client, url string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(url)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// warmHandler answers once n requests are in flight together (or after 5s),
// so that warm's requests each get their own connection.
func warmHandler(n int) http.Handler {
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		arrived++
		if arrived == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, "warm")
	})
}

// send makes one request as the identity with API key key, and classifies
// the answer. retryAfter is the Retry-After of a 429, if any.
func send(ctx context.Context, client *http.Client, url, key string) (outcome, time.Duration) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return failed, 0
	}
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return failed, 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if resp.Header.Get("RateLimit") != "" {
			return admitted, 0
		}
		return failedOpen, 0
	case http.StatusTooManyRequests:
		var ra time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			ra = time.Duration(s) * time.Second
		}
		return denied, ra
	default:
		return failed, 0
	}
}

// okHandler is the application behind the limiter.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// newServer serves h under / and the warm-up handler under /warm, on a
// real listener on 127.0.0.1.
func newServer(h http.Handler, workers int) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.Handle("/warm", warmHandler(workers))
	return httptest.NewServer(mux)
}

func apiKey(id int32) string { return fmt.Sprintf("soak-%d", id) }
