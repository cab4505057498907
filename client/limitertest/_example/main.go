// Command _example shows the client transport at work: it serves a route
// limited like the project example's /api/hello ("10/s, 120/m, 240/h" per
// client IP, answering 429 rather than holding requests) on 127.0.0.1, and
// has 8 goroutines share one client transport, each sending requests as
// fast as the transport lets it, for about 3 seconds. It prints what the
// server admitted each second and how many requests it refused.
//
//	cd client && go run ./_example
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/client"
	"github.com/ratelimitkit/ratelimit/store"
)

const (
	workers  = 8
	duration = 3 * time.Second
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	lim, err := ratelimit.New(store.NewMemory(),
		ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("hello")),
		ratelimit.WithMaxDelay(0)) // no holding: a request the policy refuses gets 429 at once
	if err != nil {
		return err
	}
	start := time.Now()
	var mu sync.Mutex
	perSecond := make([]int, int(duration/time.Second)+1)
	var refused atomic.Int64
	hello := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if s := int(time.Since(start) / time.Second); s < len(perSecond) {
			perSecond[s]++
		}
		mu.Unlock()
		fmt.Fprintln(w, "hello")
	}))
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", countRefusals(hello, &refused))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/api/hello"
	fmt.Printf("GET %s, %d goroutines sharing client.NewTransport, for %s\n", url, workers, duration)

	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = workers
	hc := &http.Client{Transport: client.NewTransport(base)}

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := hc.Do(req)
				if errors.Is(err, context.DeadlineExceeded) {
					return // the run is over, or the next quota comes after its end
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for s, n := range perSecond[:int(duration/time.Second)] {
		fmt.Printf("second %d: %d admitted\n", s+1, n)
		total += n
	}
	fmt.Printf("admitted %d (the policy allows %d), refused with 429: %d, errors: %d\n",
		total, int(duration/time.Second)*10, refused.Load(), failed.Load())
	return nil
}

// countRefusals counts the 429 answers of h.
func countRefusals(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&statusWriter{ResponseWriter: w, refused: n}, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	refused *atomic.Int64
}

func (s *statusWriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests {
		s.refused.Add(1)
	}
	s.ResponseWriter.WriteHeader(code)
}
