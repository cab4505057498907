package redistest

import (
	"path/filepath"
	"testing"
)

// RestartKeepData is Restart, except that the new process starts in the
// data directory of the one it replaces instead of an empty one, so it loads
// whatever that process persisted. Start the server with persistence on, for
// example StartServer(t, "--appendonly", "yes", "--appendfsync", "always"),
// and the keys and their expiry times survive the restart. The script cache
// never does: Redis does not persist it. Without persistence arguments the
// directory holds no data, and the new process starts empty as after Restart.
//
// Restart itself is unchanged: it always starts in a fresh directory.
func (s *Server) RestartKeepData(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		t.Fatalf("redistest: RestartKeepData %s: the server was never started", s.Addr)
	}
	s.restart(t, filepath.Dir(p.logPath))
}
