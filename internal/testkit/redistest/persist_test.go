package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestServerRealRestartKeepData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := s.Client(t)
	if err := c.Set(ctx, "kept", "value", time.Hour).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.RestartKeepData(t)
	if err := pingEventually(ctx, c); err != nil {
		t.Fatalf("PING after RestartKeepData: %v", err)
	}
	if got, err := c.Get(ctx, "kept").Result(); err != nil || got != "value" {
		t.Fatalf("GET after RestartKeepData = %q, %v; want value (loaded from the AOF)", got, err)
	}
	if ttl, err := c.TTL(ctx, "kept").Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Fatalf("TTL after RestartKeepData = %v, %v; want the expiry kept (0 < ttl ≤ 1h)", ttl, err)
	}

	// Restart still starts empty, with the same arguments.
	s.Restart(t)
	if err := pingEventually(ctx, c); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := c.Get(ctx, "kept").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err = %v, want redis.Nil (fresh directory)", err)
	}

	// Without persistence, RestartKeepData starts empty too.
	plain := StartServer(t)
	pc := plain.Client(t)
	if err := pc.Set(ctx, "lost", "value", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	plain.RestartKeepData(t)
	if err := pingEventually(ctx, pc); err != nil {
		t.Fatalf("PING after RestartKeepData: %v", err)
	}
	if err := pc.Get(ctx, "lost").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after RestartKeepData without persistence: err = %v, want redis.Nil", err)
	}
}
