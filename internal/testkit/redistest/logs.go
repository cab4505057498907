package redistest

// Logs returns what the server's current process wrote to its output and
// its log file so far ("" before the first start).
func (s *Server) Logs() string {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return ""
	}
	return p.readLogs()
}
