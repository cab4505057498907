module github.com/ratelimitkit/ratelimit/grpc

go 1.26.0

replace github.com/ratelimitkit/ratelimit => ..

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/ratelimitkit/ratelimit v0.0.0-20261128102223-40fb8b8adb89
	github.com/redis/go-redis/v9 v9.18.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
