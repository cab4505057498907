module github.com/ratelimitkit/ratelimit/_example

go 1.23.0

replace (
	github.com/ratelimitkit/ratelimit => ../
	github.com/ratelimitkit/ratelimit/metrics/prometheus => ../metrics/prometheus
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/go-chi/chi/v5 v5.3.0
	github.com/prometheus/client_golang v1.23.2
	github.com/ratelimitkit/ratelimit v0.0.0-20261128102223-40fb8b8adb89
	github.com/ratelimitkit/ratelimit/metrics/prometheus v0.0.0-20261128102224-a7b43795a40f
	github.com/redis/go-redis/v9 v9.18.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.35.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)
