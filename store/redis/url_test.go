package redis

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
)

// TestNewFromURL: a store from a URL decides on the Redis it names, with
// the fail-fast options set over the URL's, and Close closes its client;
// a URL that does not parse is an error, never a panic.
func TestNewFromURL(t *testing.T) {
	mr := miniredis.RunT(t)
	s, err := NewFromURL("redis://"+mr.Addr()+"/0?max_retries=5&dial_timeout=2s", WithPrefix("u:"))
	if err != nil {
		t.Fatal(err)
	}
	o := s.client.(*goredis.Client).Options()
	// go-redis keeps MaxRetries -1 (no retries) as 0.
	if !o.ContextTimeoutEnabled || o.DialerRetries != 1 || o.DialerRetryTimeout != time.Millisecond || o.MaxRetries > 0 || o.DialTimeout != 2*time.Second {
		t.Errorf("options %+v: want the fail-fast four over the URL's, the URL's dial timeout kept", o)
	}
	p := ratelimit.MustParsePolicy("1/m")
	req := ratelimit.Request{Policy: p, Keys: []string{"ip:192.0.2.1"}, Cost: 1}
	for i, want := range []bool{true, false} {
		d, err := s.Take(context.Background(), req)
		if err != nil || d.Allowed != want {
			t.Fatalf("step %d: %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	if len(mr.Keys()) == 0 || mr.Keys()[0][:2] != "u:" {
		t.Errorf("keys %q, want them under the prefix u:", mr.Keys())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(context.Background(), req); err == nil {
		t.Error("a Take after Close succeeded; want the closed client's error")
	}
	for i, bad := range []string{"", "http://x", "redis://h:notaport", "redis://h/notadb"} {
		if _, err := NewFromURL(bad); err == nil {
			t.Errorf("step %d: NewFromURL(%q) succeeded, want an error", i, bad)
		}
	}
	c := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	defer c.Close()
	own, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Close(); err != nil || c.Ping(context.Background()).Err() != nil {
		t.Errorf("Close of a store on the caller's client: %v; the client must stay open", err)
	}
}
