package denycache

import (
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// namedFallback is a store that names a fallback.
type namedFallback struct {
	ratelimit.Store
	fallback ratelimit.Store
}

func (s namedFallback) Fallback() ratelimit.Store { return s.fallback }

// TestFallbackForwarded: the cache names its inner store's fallback, or
// none when the inner store names none.
func TestFallbackForwarded(t *testing.T) {
	fb := memory.New()
	if got := New(namedFallback{Store: memory.New(), fallback: fb}).Fallback(); got != fb {
		t.Errorf("Fallback() = %v, want the inner store's", got)
	}
	if got := New(memory.New()).Fallback(); got != nil {
		t.Errorf("Fallback() over a store that names none = %v, want nil", got)
	}
}
