package redistest

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Main runs a package's tests (m.Run) with go-redis's log kept rather than
// written: go-redis logs every failed dial and reconnect to stderr, which
// tests that stop servers on purpose cause by the hundred. A passing run
// prints none of it; a failing one prints the last lines after its
// failures, where they may explain one. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
func Main(m *testing.M) int {
	logs := &clientLog{}
	redis.SetLogger(logs)
	code := m.Run()
	if code != 0 {
		logs.dump(os.Stderr)
	}
	return code
}

// clientLogLines is how many of go-redis's last lines a failing run
// prints.
const clientLogLines = 50

// clientLog keeps go-redis's last log lines (redis.SetLogger).
type clientLog struct {
	mu    sync.Mutex
	lines []string
	total int
}

func (l *clientLog) Printf(_ context.Context, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	if len(l.lines) > clientLogLines {
		l.lines = l.lines[len(l.lines)-clientLogLines:]
	}
}

func (l *clientLog) dump(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total == 0 {
		return
	}
	fmt.Fprintf(w, "go-redis logged %d lines during the run; the last %d:\n", l.total, len(l.lines))
	for _, s := range l.lines {
		fmt.Fprintln(w, "  "+s)
	}
}
