module github.com/ratelimitkit/ratelimit/client/limitertest

go 1.23

require (
	github.com/ratelimitkit/ratelimit v0.0.0-20261128102223-40fb8b8adb89
	github.com/ratelimitkit/ratelimit/client v0.0.0-20261128102223-40fb8b8adb89
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/redis/go-redis/v9 v9.18.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
)

replace (
	github.com/ratelimitkit/ratelimit => ../..
	github.com/ratelimitkit/ratelimit/client => ..
)
