// Command _example is a chi server with per-route rate limits.
//
//	go run -C _example .                                   # embedded Redis (miniredis)
//	REDIS_URL=redis://127.0.0.1:6379/0 go run -C _example . # a real, shared Redis
//
// It listens on $ADDR (default :8080). Routes:
//
//	GET /api/hello          10/s, 120/m, 240/h per client IP, and per X-API-Key when sent
//	GET /api/search?pages=N 30/m per client IP; costs N, a whole number from 1 to 10
//	                        (default 1); any other value is a 400 problem document
//	POST /login             form fields user and password (demo: alice / wonderland);
//	                        only failures count, IPv6 clients by /64: 5/15m per IP
//	                        and user name (then blocked 1h), 20/15m per IP, 100/h per
//	                        user name (not enforced on networks with no failure in
//	                        15m); a success resets only the IP and user name pair
//	GET /healthz            not limited
//	GET /metrics            the limiters' decisions, held requests, store errors and
//	                        circuit state, from the metrics/prometheus adapter; not limited
//
// At startup it checks that Redis answers (store.Redis.Ping) and logs the
// server, or why it does not answer: then each copy limits on its own
// in-memory counters (the fallback) until Redis is back.
//
// Two copies on different ports with the same REDIS_URL share one budget.
package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	ratelimitprom "github.com/ratelimitkit/ratelimit/metrics/prometheus"
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
	// Say at once where the counters live, or why Redis does not answer.
	pingCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	info, err := st.Ping(pingCtx)
	cancel()
	if err != nil {
		slog.Error("redis does not answer: each copy limits on its own in-memory counters until it does", "redis", where, "err", err)
	} else {
		slog.Info("redis answers", "redis", where, "servers", info.String())
	}

	// Fall back to an in-process store if Redis fails, so limits still hold
	// per server during an outage.
	observer, metrics, err := newMetrics()
	if err != nil {
		return err
	}
	handler, err := newRouter(st, store.NewMemory(), observer, metrics, demoPassword)
	if err != nil {
		return err
	}

	srv := &http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
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

// newRouter returns the example's routes, limited in st, falling back to
// fallbackStore when st fails, every Limiter reporting to observer
// (metrics serves what it counts on /metrics); POST /login checks
// passwords with checkPassword. The tests build their server with it too.
func newRouter(st, fallbackStore ratelimit.Store, observer ratelimit.Observer, metrics http.Handler, checkPassword func(user, password string) bool) (http.Handler, error) {
	byIP := ratelimit.ByIP() // RemoteAddr; add ratelimit.TrustedProxies(...) behind a proxy
	byKey := ratelimit.ByHeader("X-API-Key")
	fallback := ratelimit.WithFallback(fallbackStore)
	// Every limiter reports to one observer, served on /metrics.
	observe := ratelimit.WithObserver(observer)

	hello, err := ratelimit.New(st, ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("hello")),
		ratelimit.WithIdentifiers(byIP, byKey), fallback, observe)
	if err != nil {
		return nil, err
	}
	search, err := ratelimit.New(st, ratelimit.MustParsePolicy("30/m", ratelimit.Named("search")),
		ratelimit.WithIdentifiers(byIP), fallback, observe,
		ratelimit.WithCostFunc(func(r *http.Request) int64 {
			if pages, ok := r.Context().Value(pagesKey{}).(int64); ok {
				return pages // checked by pagesParam
			}
			return 1
		}))
	if err != nil {
		return nil, err
	}

	login, err := loginLimiters(st, byIP, checkPassword, fallback, observe)
	if err != nil {
		return nil, err
	}

	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	r.Handle("/metrics", metrics)
	r.With(login.ip.Handler, login.net.Handler, login.user.Handler, login.userClean.Handler, login.pair.Handler).Post("/login", login.serve)
	r.Route("/api", func(r chi.Router) {
		r.With(hello.Handler).Get("/hello", func(w http.ResponseWriter, r *http.Request) {
			res, _ := ratelimit.FromContext(r.Context())
			fmt.Fprintf(w, "hello; %d left\n", res.Decision.Remaining)
		})
		// pagesParam runs first: a bad request is answered 400 and costs nothing.
		r.With(pagesParam, search.Handler).Get("/search", func(w http.ResponseWriter, r *http.Request) {
			res, _ := ratelimit.FromContext(r.Context())
			unit := "pages"
			if res.Cost == 1 {
				unit = "page"
			}
			fmt.Fprintf(w, "searched %d %s; %d left this minute\n", res.Cost, unit, res.Decision.Remaining)
		})
	})
	return r, nil
}

// loginGuard holds the Limiters of POST /login, stacked in this order:
// each counts failed attempts only (a success is refunded to all), each
// for its own identity, with its own policy.
type loginGuard struct {
	ip  *ratelimit.Limiter // per client IP (IPv6: per /64): 20 failures per 15 minutes
	net *ratelimit.Limiter // per network (IPv6: per /48): denies nothing; a failure marks its network for 15 minutes
	// user and userClean share one policy, so one count per user name
	// across all networks: 100 failures per hour, no block. user limits
	// the networks net marked; userClean, a dry run, counts the others
	// and never denies them, so that whoever spends a name's failures
	// does not lock its owner out.
	user, userClean *ratelimit.Limiter
	pair            *ratelimit.Limiter // per IP (/64) and user name together: 5 per 15 minutes, then blocked for an hour
	netPolicy       *ratelimit.Policy
	byIP            *ratelimit.IPIdentifier

	checkPassword func(user, password string) bool // demoPassword in the example
}

// onlyFailures refunds every request that did not fail.
var onlyFailures = ratelimit.WithRefundIf(func(_ *http.Request, status int) bool { return status < 400 })

func loginLimiters(st ratelimit.Store, byIP *ratelimit.IPIdentifier, checkPassword func(user, password string) bool, fallback, observe ratelimit.Option) (*loginGuard, error) {
	g := &loginGuard{byIP: byIP, checkPassword: checkPassword}
	userName := ratelimit.ByUser(func(r *http.Request) (string, bool) {
		u := r.PostFormValue("user")
		return u, u != "" && len(u) <= 256
	})
	pairID := ratelimit.IdentifierFunc(g.pairKey)
	var err error
	if g.ip, err = ratelimit.New(st, ratelimit.MustParsePolicy("20/15m", ratelimit.Named("login-ip")),
		ratelimit.WithIdentifiers(byIP), onlyFailures, fallback, observe); err != nil {
		return nil, err
	}
	// login-net holds one failure per network for 15 minutes. In a dry run
	// a request it would deny is served and not charged: a network is clean
	// again 15 minutes after the failure that marked it. It limits nothing,
	// so it sends no headers.
	g.netPolicy = ratelimit.MustParsePolicy("1/15m", ratelimit.Named("login-net"))
	if g.net, err = ratelimit.New(st, g.netPolicy, ratelimit.WithIdentifiers(ratelimit.IdentifierFunc(g.netKey)),
		ratelimit.WithDryRun(true), ratelimit.WithHeaders(ratelimit.HeadersNone), onlyFailures, fallback, observe); err != nil {
		return nil, err
	}
	// No block per user name, and no denial of a clean network by it:
	// anyone could lock the owner out by failing on purpose. The slow limit
	// stops a distributed guessing of one name's password from networks
	// that failed before.
	userPolicy := ratelimit.MustParsePolicy("100/h", ratelimit.Named("login-user"))
	if g.user, err = ratelimit.New(st, userPolicy, ratelimit.WithIdentifiers(userName),
		ratelimit.WithSkip(g.clean), onlyFailures, fallback, observe); err != nil {
		return nil, err
	}
	if g.userClean, err = ratelimit.New(st, userPolicy, ratelimit.WithIdentifiers(userName), ratelimit.WithDryRun(true),
		ratelimit.WithSkip(func(r *http.Request) bool { return !g.clean(r) }), onlyFailures, fallback, observe); err != nil {
		return nil, err
	}
	if g.pair, err = ratelimit.New(st, ratelimit.MustParsePolicy("5/15m", ratelimit.Named("login-pair"), ratelimit.BlockFor(time.Hour)),
		ratelimit.WithIdentifiers(pairID), onlyFailures, fallback, observe); err != nil {
		return nil, err
	}
	return g, nil
}

// clean reports whether the request comes from a network login-net has
// not marked: login-net, which ran before, had room for it. A failure
// marks its network for 15 minutes; so does, while it is served, a request
// not yet known to succeed. A request login-net could not decide is not
// clean.
func (g *loginGuard) clean(r *http.Request) bool {
	for _, res := range ratelimit.AllFromContext(r.Context()) {
		if res.Policy == g.netPolicy {
			return res.Err == nil && res.Decision.Allowed
		}
	}
	return false
}

// netKey is login-net's key: the client's /48 for IPv6, so that whoever
// holds a /48 (a site's allocation, free from some tunnel brokers) has one
// clean network and not 65,536; login-ip's key otherwise. It comes from
// byIP, so that both find the client the same way.
func (g *loginGuard) netKey(r *http.Request) (string, bool) {
	if ip, ok := g.byIP.ClientIP(r); ok && ip.Is6() {
		if p, err := ip.Prefix(48); err == nil {
			return "ip:" + p.String(), true
		}
	}
	return g.byIP.Identify(r)
}

// pairKey is the key of a client network and a user name together. The
// network is login-ip's key: the client's /64 for IPv6 (so that rotating
// addresses inside one allocation does not give fresh tries), its address
// for IPv4, or ratelimit.UnknownIPKey, shared by every request whose
// address cannot be determined.
func (g *loginGuard) pairKey(r *http.Request) (string, bool) {
	u := r.PostFormValue("user")
	if u == "" || len(u) > 256 {
		return "", false
	}
	ip, _ := g.byIP.Identify(r) // always applies
	return "pair:" + ip + "/" + u, true
}

// serve checks the password: 401 when wrong, 200 when right. A success
// resets the pair's failures and nothing else: not login-ip's nor
// login-net's, or an attacker with an account of its own could clear its
// network's failures between guesses at other names; not the user name's,
// or the owner logging in during an attack would give the attacker a
// fresh 100.
func (g *loginGuard) serve(w http.ResponseWriter, r *http.Request) {
	user, password := r.PostFormValue("user"), r.PostFormValue("password")
	if !g.checkPassword(user, password) {
		http.Error(w, "wrong user name or password", http.StatusUnauthorized)
		return
	}
	if key, ok := g.pairKey(r); ok {
		if err := g.pair.Reset(r.Context(), key); err != nil {
			slog.Warn("login: reset failed", "err", err) // the failures expire by themselves
		}
	}
	fmt.Fprintf(w, "welcome, %s\n", user)
}

// demoPassword knows one user: alice, password wonderland.
func demoPassword(user, password string) bool {
	return subtle.ConstantTimeCompare([]byte(user), []byte("alice"))&subtle.ConstantTimeCompare([]byte(password), []byte("wonderland")) == 1
}

// Bounds of ?pages=N on /api/search.
const minPages, maxPages = 1, 10

type pagesKey struct{}

// pagesParam checks ?pages=N (absent means 1) and puts N in the request's
// context for the cost function, or answers 400 Bad Request with an RFC
// 9457 problem document saying what is accepted.
func pagesParam(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pages := int64(1)
		if vs, ok := r.URL.Query()["pages"]; ok {
			n, err := strconv.ParseInt(vs[0], 10, 64)
			switch {
			case len(vs) > 1:
				badPages(w, vs, fmt.Sprintf("pages must be given once; got %d values", len(vs)))
				return
			case err != nil || n < minPages || n > maxPages:
				badPages(w, vs, fmt.Sprintf("pages must be a whole number from %d to %d; got %q", minPages, maxPages, vs[0]))
				return
			}
			pages = n
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), pagesKey{}, pages)))
	})
}

// badPagesType is the problem type of badPages's documents.
const badPagesType = "https://github.com/ratelimitkit/ratelimit#example-bad-pages"

// badPages answers 400 with a problem document: what was wrong (detail),
// the values received, and the accepted range.
func badPages(w http.ResponseWriter, got []string, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(struct {
		Type   string   `json:"type"`
		Title  string   `json:"title"`
		Status int      `json:"status"`
		Detail string   `json:"detail"`
		Param  string   `json:"param"`
		Got    []string `json:"got"`
		Min    int      `json:"min"`
		Max    int      `json:"max"`
	}{badPagesType, "Bad Request", http.StatusBadRequest, detail + ".", "pages", got, minPages, maxPages})
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

// newMetrics returns the metrics/prometheus adapter, which the Limiters
// report to, and the handler that serves its registry on /metrics.
func newMetrics() (ratelimit.Observer, http.Handler, error) {
	collector, err := ratelimitprom.New()
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(collector); err != nil {
		return nil, nil, err
	}
	return collector, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
