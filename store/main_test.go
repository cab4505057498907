package store_test

import (
	"os"
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
