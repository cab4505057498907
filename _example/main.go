// Command _example is a chi server with per-route rate limits.
//
//	go run ./_example                                   # embedded Redis (miniredis)
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./_example # a real, shared Redis
//
// It listens on $ADDR (default :8080). Routes:
//
//	GET /api/hello   10/s, 120/m, 240/h per client IP, and per X-API-Key when sent
//	GET /api/search  30/m per client IP; ?pages=N costs N (1 to 10)
//	GET /healthz     not limited
//
// Two copies on different ports with the same REDIS_URL share one budget.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	if err := run(); err != nil {
		slog.Error("example", "err", err)
		os.Exit(1)
	}
}

func run() error {
	addr := envOr("ADDR", ":8080")
	client, where, err := redisClient()
	if err != nil {
		return err
	}
	defer client.Close()
	st, err := store.NewRedis(client, store.WithPrefix("example:"))
	if err != nil {
		return err
	}

	byIP, err := ratelimit.ByIP() // RemoteAddr; add ratelimit.TrustedProxies(...) behind a proxy
	if err != nil {
		return err
	}
	byKey, err := ratelimit.ByHeader("X-API-Key")
	if err != nil {
		return err
	}
	// Fall back to an in-process store if Redis fails, so limits still hold
	// per server during an outage.
	fallback := ratelimit.WithFallback(store.NewMemory())

	hello, err := ratelimit.New(st, ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("hello")),
		ratelimit.WithIdentifiers(byIP, byKey), fallback)
	if err != nil {
		return err
	}
	search, err := ratelimit.New(st, ratelimit.MustParsePolicy("30/m", ratelimit.Named("search")),
		ratelimit.WithIdentifiers(byIP), fallback,
		ratelimit.WithCostFunc(func(r *http.Request) int64 {
			pages, err := strconv.ParseInt(r.URL.Query().Get("pages"), 10, 64)
			if err != nil || pages < 1 {
				return 1
			}
			return min(pages, 10)
		}))
	if err != nil {
		return err
	}

	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	r.Route("/api", func(r chi.Router) {
		r.With(hello.Handler).Get("/hello", func(w http.ResponseWriter, r *http.Request) {
			res, _ := ratelimit.FromContext(r.Context())
			fmt.Fprintf(w, "hello; %d left\n", res.Decision.Remaining)
		})
		r.With(search.Handler).Get("/search", func(w http.ResponseWriter, r *http.Request) {
			res, _ := ratelimit.FromContext(r.Context())
			fmt.Fprintf(w, "searched %d pages; %d left this minute\n", res.Cost, res.Decision.Remaining)
		})
	})

	srv := &http.Server{Addr: addr, Handler: r, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	slog.Info("listening", "addr", addr, "redis", where)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// redisClient connects to $REDIS_URL, or starts an embedded miniredis.
func redisClient() (*redis.Client, string, error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", fmt.Errorf("REDIS_URL: %w", err)
		}
		opt.ContextTimeoutEnabled = true // let the limiter's timeout reach the socket
		return redis.NewClient(opt), opt.Addr + " (REDIS_URL)", nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, "", err
	}
	return redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}),
		mr.Addr() + " (embedded miniredis: set REDIS_URL to share limits across servers)", nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
