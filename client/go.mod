module github.com/ratelimitkit/ratelimit/client

go 1.23

