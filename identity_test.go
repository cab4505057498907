package ratelimit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// apiKeyDigest is the expected key for an API key value, computed here
// independently of the package.
func apiKeyDigest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "key:" + hex.EncodeToString(sum[:])[:32]
}

func TestByHeader(t *testing.T) {
	id := ratelimit.ByHeader("x-api-key")
	const secret = "sk_live_0123456789abcdef"
	tests := []struct {
		name   string
		lines  []headerLine
		want   string
		wantOK bool
	}{
		{"value", []headerLine{{"X-API-Key", secret}}, apiKeyDigest(secret), true},
		{"spaces trimmed", []headerLine{{"X-Api-Key", " \t" + secret + " "}}, apiKeyDigest(secret), true},
		{"first line", []headerLine{{"X-API-Key", secret}, {"X-API-Key", "other"}}, apiKeyDigest(secret), true},
		{"missing", nil, "", false},
		{"other header", []headerLine{{"Authorization", secret}}, "", false},
		{"empty", []headerLine{{"X-API-Key", ""}}, "", false},
		{"blank", []headerLine{{"X-API-Key", "  \t "}}, "", false},
		{"empty first line", []headerLine{{"X-API-Key", ""}, {"X-API-Key", secret}}, "", false},
	}
	for _, tt := range tests {
		r := identReq("203.0.113.7:1", tt.lines...)
		key, ok := id.Identify(r)
		if key != tt.want || ok != tt.wantOK {
			t.Errorf("%s: Identify = %q, %v; want %q, %v", tt.name, key, ok, tt.want, tt.wantOK)
		}
		if ok && strings.Contains(key, secret) {
			t.Errorf("%s: key %q holds the raw value", tt.name, key)
		}
	}

	// Stable, distinct, and of fixed length whatever the value.
	seen := map[string]string{}
	for _, v := range []string{"a", "b", "A", "a ", "ab", strings.Repeat("k", 1<<20), "ключ", "\x00"} {
		r := identReq("203.0.113.7:1", headerLine{"X-API-Key", v})
		k1, ok1 := id.Identify(r)
		k2, ok2 := id.Identify(r)
		if !ok1 || !ok2 || k1 != k2 {
			t.Fatalf("value %.10q: keys %q, %q not stable", v, k1, k2)
		}
		if len(k1) != len("key:")+32 || strings.Trim(k1[4:], "0123456789abcdef") != "" {
			t.Fatalf("value %.10q: key %q is not key: and 32 hex digits", v, k1)
		}
		trimmed := strings.Trim(v, " \t")
		if prev, dup := seen[k1]; dup && prev != trimmed {
			t.Fatalf("values %.10q and %.10q share key %q", prev, v, k1)
		}
		seen[k1] = trimmed
	}
	if key, ok := id.Identify(nil); ok || key != "" {
		t.Errorf("Identify(nil) = %q, %v; want not applicable", key, ok)
	}

	for _, name := range []string{"", "X API Key", "X-API-Key:", "X-API-Kéy", "X-API-Key\r\n", "(key)"} {
		id := ratelimit.ByHeader(name)
		err := identifierErr(id)
		if err == nil {
			t.Errorf("ByHeader(%q): New accepted it, want an error", name)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "ratelimit: ") || !strings.Contains(msg, strconv.Quote(name)) {
			t.Errorf("ByHeader(%q): error %q must start with ratelimit: and name the header", name, msg)
		}
		if key, ok := id.Identify(getFrom("192.0.2.1:1", name, "v")); ok || key != "" {
			t.Errorf("ByHeader(%q).Identify = %q, %v; want not applicable", name, key, ok)
		}
	}
	for _, name := range []string{"X-API-Key", "apikey", "X_Api_Key", "!#$%&'*+-.^_`|~09AZaz"} {
		if err := identifierErr(ratelimit.ByHeader(name)); err != nil {
			t.Errorf("ByHeader(%q): %v", name, err)
		}
	}
}

func TestByUser(t *testing.T) {
	tests := []struct {
		name   string
		fn     func(*http.Request) (string, bool)
		want   string
		wantOK bool
	}{
		{"user", func(*http.Request) (string, bool) { return "42", true }, "user:42", true},
		{"any text", func(*http.Request) (string, bool) { return "a:b}{c d", true }, "user:a:b}{c d", true},
		{"anonymous", func(*http.Request) (string, bool) { return "", false }, "", false},
		{"id but not ok", func(*http.Request) (string, bool) { return "42", false }, "", false},
		{"empty id", func(*http.Request) (string, bool) { return "", true }, "", false},
		{"nil fn", nil, "", false},
		{"reads the request", func(r *http.Request) (string, bool) {
			u := r.Header.Get("X-Test-User")
			return u, u != ""
		}, "user:alice", true},
	}
	for _, tt := range tests {
		r := identReq("203.0.113.7:1", headerLine{"X-Test-User", "alice"})
		key, ok := ratelimit.ByUser(tt.fn).Identify(r)
		if key != tt.want || ok != tt.wantOK {
			t.Errorf("%s: Identify = %q, %v; want %q, %v", tt.name, key, ok, tt.want, tt.wantOK)
		}
	}
}

// Identifiers are shared by all requests; -race checks they keep no state.
func TestIdentifiersConcurrent(t *testing.T) {
	byIP := mustByIP(t, testTrusted, ratelimit.ClientIPHeader("Forwarded"))
	byKey := ratelimit.ByHeader("X-API-Key")
	ids := []ratelimit.Identifier{byIP, byKey}
	want := []string{"ip:2001:db8:cafe::/64", apiKeyDigest("k")}
	const workers = 8
	got := make([][]string, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				r := identReq("10.0.0.1:1", fwdLine(`for="[2001:db8:cafe::17]:4711", for=10.0.0.2`), headerLine{"X-API-Key", "k"})
				for _, id := range ids {
					key, _ := id.Identify(r)
					got[w] = append(got[w], key)
				}
			}
		}()
	}
	wg.Wait()
	for w := range got {
		for i, key := range got[w] {
			if key != want[i%len(want)] {
				t.Fatalf("worker %d, call %d: key %q, want %q", w, i, key, want[i%len(want)])
			}
		}
	}
}

// TestLongIdentity: an identity of any length is limited like any other
// (the stores hash long keys), never turned into a store error that a
// fail-open Limiter would let through unlimited.
func TestLongIdentity(t *testing.T) {
	long := strings.Repeat("u", 100_000)
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("2/h"),
		ratelimit.WithIdentifiers(ratelimit.ByUser(func(*http.Request) (string, bool) { return long, true })))
	codes := []int{}
	for range 3 {
		w := httptest.NewRecorder()
		lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA))
		codes = append(codes, w.Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("statuses %v, want [200 200 429]", codes)
	}
	ids := make([]ratelimit.Identifier, ratelimit.MaxKeys+1)
	for i := range ids {
		ids[i] = ratelimit.ByUser(func(*http.Request) (string, bool) { return "x", true })
	}
	if _, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/s"), ratelimit.WithIdentifiers(ids...)); err == nil {
		t.Fatal("more than MaxKeys identifiers accepted")
	}
}
