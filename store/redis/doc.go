// Package redis is the Redis store: counters shared by every server that
// uses the same Redis (a single server, Sentinel, a Cluster or a Ring) and
// key prefix, each decision one script call on Redis's own clock.
//
// The script's source is the top-level lua package (lua.Source, its files
// listed there); script.go gives it the
// names of internal/layout and, for the first policies a store sees, their
// numbers as data. The Go side: store.go (the Store and its calls, within
// their deadline), options.go, take.go (one call and its reply),
// cluster.go (a request across Cluster masters, with its refunds),
// refund.go (Refund and Reset), batch.go (calls sharing pipelines),
// pipeline.go, resend.go (a resent call charged once), nodecircuit.go (a
// circuit per Cluster master), keys.go, ping.go, diagnose.go (what an
// error says of its cause) and fallback.go (the memory store that decides
// while Redis fails).
//
// Most programs build it with store.NewRedis.
//
// # When Redis fails
//
// The store names a fallback (Fallback, fallback.go): a memory store of
// this process. A Limiter built without WithFallback and WithFailureMode
// asks it while Redis fails or does not answer in time, so the routes stay
// limited: each server counts on its own, and a fleet of N servers admits
// up to N times the limit until Redis answers again.
//
// A refused connection fails fast only if the client says so. With
// go-redis v9's defaults, a dial that is refused is retried 5 times 100ms
// apart (Options.DialerRetries, DialerRetryTimeout) and a failed command 3
// times with a backoff (MaxRetries), so while Redis is down every request
// waits the Limiter's whole timeout until the Limiter's circuit opens
// (after a second of failures; then once a second, for its probe). On a
// killed local Redis, 4 clients each sending a request every 10ms: with
// the defaults, every request of that first second took the whole 100ms;
// with
//
//	redis.NewClient(&redis.Options{
//		Addr:                  addr,
//		ContextTimeoutEnabled: true,
//		DialerRetries:         1,                // one dial per new connection...
//		DialerRetryTimeout:    time.Millisecond, // ...and no 100ms pause after it fails
//		MaxRetries:            -1,               // no command retries within the timeout
//	})
//
// none took more than 4ms. The price: a command that meets a dead pooled
// connection or a Sentinel failover is not retried; the Limiter's fallback
// decides that request.
//
// go-redis writes lines of its own to standard error through a
// process-wide logger, one per failed dial ("redis: pool.go:617: redis:
// connection pool: failed to dial after 5 attempts: dial tcp ...: connect:
// connection refused"), beside the Limiter's outage log. This package
// never changes that process-wide setting; a program can. To silence them,
// call logging.Disable() (package github.com/redis/go-redis/v9/logging);
// to send them elsewhere, give redis.SetLogger any value with a method
// Printf(ctx context.Context, format string, v ...any), such as:
//
//	// goRedisLog sends go-redis's own lines to slog, at level Debug.
//	type goRedisLog struct{ l *slog.Logger }
//
//	func (g goRedisLog) Printf(ctx context.Context, format string, v ...any) {
//		g.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
//	}
//
//	redis.SetLogger(goRedisLog{slog.Default()}) // once, at startup
package redis
