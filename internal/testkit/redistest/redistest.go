// Package redistest starts real redis-server processes for tests: a single
// server (StartServer), a small Redis Cluster of masters (StartCluster), or
// a master with a replica watched by three sentinels (StartSentinel).
//
// Every server listens on 127.0.0.1 only, on a free port, keeps no data on
// disk (save "" and appendonly no, working directory in t.TempDir()) unless
// its arguments turn persistence on (see RestartKeepData), and is killed by
// t.Cleanup. On Linux the kernel also kills it if the test binary
// dies without running its cleanups (Pdeathsig).
//
// When redis-server is not in PATH the helpers skip the test, unless Require
// reports true (RATELIMIT_REQUIRE_REDIS=1, as CI sets it), in which case they
// fail it: a CI run must not pass by silently skipping the real-Redis tests.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that makes real-server tests
// mandatory when set to "1".
const RequireEnv = "RATELIMIT_REQUIRE_REDIS"

const (
	// startTimeout bounds how long one redis-server may take to answer.
	startTimeout = 10 * time.Second
	// stopTimeout bounds how long a killed redis-server may take to exit.
	stopTimeout = 10 * time.Second
	// startAttempts is how many fresh ports StartServer tries when the
	// chosen one was taken by another process in the meantime.
	startAttempts = 5
	// restartTimeout bounds how long Restart waits for its port to be free.
	restartTimeout = 10 * time.Second
)

const skipMessage = "redis-server not found in PATH: skipping real-Redis test " +
	"(install redis-server, or set " + RequireEnv + "=1 to make this a failure)"

// Require reports whether real-server tests are required: the environment
// variable RATELIMIT_REQUIRE_REDIS is "1" (CI sets it). When it is, a missing
// redis-server fails the test instead of skipping it.
func Require() bool {
	return os.Getenv(RequireEnv) == "1"
}

// serverBinary returns the path of redis-server, or ends the test: Fatalf
// when Require() is true, Skipf otherwise.
func serverBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err == nil {
		return bin
	}
	if Require() {
		t.Fatalf("redis-server not found in PATH, but %s=1 requires the real-Redis tests to run: %v "+
			"(install redis-server, or unset %s to let these tests skip)", RequireEnv, err, RequireEnv)
	}
	t.Skip(skipMessage)
	return ""
}

// Need ends the test as StartServer would when redis-server is not in
// PATH (a skip, or a failure if Require()), and does nothing otherwise:
// for a test that decides whether to run (say, testmode.SkipUnlessFull)
// before it starts a server, so that a missing server is the reason given.
func Need(t testing.TB) {
	t.Helper()
	serverBinary(t)
}

// Server is one redis-server process started by StartServer.
// Its methods are safe for concurrent use.
type Server struct {
	// Addr is "127.0.0.1:port". It stays the same across Kill and Restart.
	Addr string

	bin  string
	args []string // extra arguments, after the defaults
	bus  bool     // cluster node: port+10000 is reserved as well
	base string   // per-server temporary directory; one subdirectory per run
	conf string   // if not empty: written to redis.conf in the run's directory, passed first (sentinels)

	mu   sync.Mutex
	proc *proc // the current process; nil before the first start
}

// StartServer starts redis-server on a free loopback port and waits until it
// answers. extraArgs are passed after the defaults (--port, --bind 127.0.0.1,
// --save "", --appendonly no, --dir and --logfile in a temporary directory),
// so they can override them, e.g. StartServer(t, "--maxmemory", "10mb").
// The server is killed when the test and its subtests finish.
//
// Without redis-server in PATH the test is skipped, or fails if Require().
func StartServer(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	return startNode(t, serverBinary(t), false, extraArgs)
}

// startNode starts one server, retrying with a new port when the chosen one
// turns out to be taken, and registers its cleanup.
func startNode(t testing.TB, bin string, bus bool, args []string) *Server {
	t.Helper()
	return startConfigured(t, &Server{bin: bin, args: args, bus: bus})
}

// startConfigured starts s (bin, args, bus and conf set; Addr, base and
// proc not yet), as startNode does.
func startConfigured(t testing.TB, s *Server) *Server {
	t.Helper()
	s.base = t.TempDir()
	for attempt := 1; ; attempt++ {
		port, err := reservePort(s.bus)
		if err != nil {
			t.Fatalf("%v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p, err := s.launch()
		if err == nil {
			s.proc = p
			t.Cleanup(func() {
				if err := s.stop(); err != nil {
					t.Errorf("redistest: stop redis-server %s: %v", s.Addr, err)
				}
				releasePort(port, s.bus)
			})
			t.Logf("redistest: redis-server listening on %s (log %s)", s.Addr, p.logPath)
			return s
		}
		releasePort(port, s.bus)
		if errors.Is(err, errPortInUse) && attempt < startAttempts {
			t.Logf("redistest: %s was taken, trying another port: %v", s.Addr, err)
			continue
		}
		t.Fatalf("redistest: start redis-server on %s: %v", s.Addr, err)
	}
}

// Client returns a go-redis client for the server, closed when the test
// finishes. It reconnects on its own after Restart.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server with SIGKILL, as a crash would, and waits for the
// process to exit. Its port stays reserved for Restart. Killing a server that
// is not running does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatalf("redistest: kill redis-server %s: %v", s.Addr, err)
	}
}

// Restart starts the server again on the same address, killing it first if
// it is still running, and waits until it answers. The new process starts
// empty: no keys, no loaded scripts. Existing clients reconnect by themselves
// (their next command may fail with a connection error).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.restart(t, "")
}

// restart kills the server and starts it again on the same address: in a
// fresh directory when dir is empty, in dir otherwise.
func (s *Server) restart(t testing.TB, dir string) {
	t.Helper()
	s.Kill(t)
	deadline := time.Now().Add(restartTimeout)
	for {
		var p *proc
		var err error
		if dir == "" {
			p, err = s.launch()
		} else {
			p, err = s.launchIn(dir)
		}
		if err == nil {
			s.mu.Lock()
			s.proc = p
			s.mu.Unlock()
			return
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			t.Fatalf("redistest: restart redis-server on %s: %v", s.Addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pause freezes the server with SIGSTOP, as a hung or partitioned server
// would look: connections open, no replies. Resume thaws it. Linux only.
func (s *Server) Pause(t testing.TB) { s.signal(t, 0, "pause") }

// Resume thaws a server frozen by Pause.
func (s *Server) Resume(t testing.TB) { s.signal(t, 1, "resume") }

func (s *Server) signal(t testing.TB, which int, what string) {
	t.Helper()
	sig := pauseSignals[which]
	if sig == 0 {
		t.Fatalf("redistest: %s redis-server %s: not supported on this system", what, s.Addr)
	}
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil || p.exited() {
		t.Fatalf("redistest: %s redis-server %s: not running", what, s.Addr)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %s redis-server %s: %v", what, s.Addr, err)
	}
}

// stop kills the current process, if any, and waits for it to exit.
func (s *Server) stop() error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.kill()
}

// errPortInUse marks a start that failed because the address was taken.
var errPortInUse = errors.New("address already in use")

// launch starts a new process on s.Addr in a fresh directory and waits until
// it answers. On failure the process is gone and the error carries its log.
func (s *Server) launch() (*proc, error) {
	dir, err := os.MkdirTemp(s.base, "run")
	if err != nil {
		return nil, err
	}
	return s.launchIn(dir)
}

// launchIn starts a new process on s.Addr with dir as its working and data
// directory, and waits until it answers, as launch does.
func (s *Server) launchIn(dir string) (*proc, error) {
	_, port, _ := net.SplitHostPort(s.Addr)
	var args []string
	if s.conf != "" {
		path := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(path, []byte(s.conf), 0o600); err != nil {
			return nil, err
		}
		args = append(args, path) // a configuration file must be the first argument
	}
	args = append(args,
		"--port", port,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	)
	p, err := startProc(s.bin, dir, append(args, s.args...))
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(s.Addr, time.Now().Add(startTimeout)); err != nil {
		_ = p.kill()
		return nil, fmt.Errorf("%w\n%s", err, p.logTail(30))
	}
	return p, nil
}

// proc is one running redis-server process.
type proc struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	logPath string        // redis log file
	outPath string        // stdout and stderr (errors before the log file opens)
}

func startProc(bin, dir string, args []string) (*proc, error) {
	p := &proc{
		done:    make(chan struct{}),
		logPath: filepath.Join(dir, "redis.log"),
		outPath: filepath.Join(dir, "stdout.log"),
	}
	out, err := os.Create(p.outPath)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy of the descriptor
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout = out
	p.cmd.Stderr = out
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits, bounded, for the process to exit.
func (p *proc) kill() error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Kill() // fails only if it already exited
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("pid %d still running %v after SIGKILL", p.cmd.Process.Pid, stopTimeout)
	}
}

// waitReady polls addr until the server there answers and is this process
// (not another server that took the port first), the process exits, or the
// deadline passes.
func (p *proc) waitReady(addr string, deadline time.Time) error {
	for {
		if p.exited() {
			if p.portConflict() {
				return fmt.Errorf("redis-server exited: %w", errPortInUse)
			}
			return fmt.Errorf("redis-server exited before answering: %v", p.cmd.ProcessState)
		}
		pid, err := serverPID(addr, 500*time.Millisecond)
		if err == nil {
			if pid == p.cmd.Process.Pid {
				return nil
			}
			return fmt.Errorf("another redis-server (pid %d) answers on %s: %w", pid, addr, errPortInUse)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not answer on %s within %v: last error: %v", addr, startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// portConflict reports whether the process output says it could not bind.
func (p *proc) portConflict() bool {
	text := p.readLogs()
	return strings.Contains(text, "in use") || strings.Contains(text, "Failed listening on port")
}

func (p *proc) readLogs() string {
	var b strings.Builder
	for _, path := range []string{p.outPath, p.logPath} {
		data, err := os.ReadFile(path)
		if err == nil {
			b.Write(data)
		}
	}
	return b.String()
}

// logTail returns the last n lines of the process output, for failure messages.
func (p *proc) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.readLogs(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "--- redis-server output (" + p.logPath + ") ---\n" + strings.Join(lines, "\n")
}

// serverPID asks the server at addr for INFO server over a raw connection
// and returns its process_id. Any answer proves the server is accepting
// commands; the pid tells whose server it is.
func serverPID(addr string, timeout time.Duration) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	head = strings.TrimRight(head, "\r\n")
	if !strings.HasPrefix(head, "$") && !strings.HasPrefix(head, "=") {
		return 0, fmt.Errorf("unexpected reply to INFO: %q", head)
	}
	size, err := strconv.Atoi(head[1:])
	if err != nil || size < 0 {
		return 0, fmt.Errorf("unexpected reply to INFO: %q", head)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}
