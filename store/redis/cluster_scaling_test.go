package redis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// The settings of BenchmarkClusterScaling, from the environment.
const (
	// scalingMastersEnv lists the Cluster sizes to run, comma-separated.
	scalingMastersEnv = "RATELIMIT_CLUSTER_MASTERS"
	// scalingCallersEnv lists the numbers of concurrent callers.
	scalingCallersEnv = "RATELIMIT_CLUSTER_CALLERS"
	// scalingPinEnv, when "1", gives each master a core of its own (master
	// i on core i) and this process the cores after them (taskset, Linux).
	scalingPinEnv = "RATELIMIT_CLUSTER_PIN"
)

// scalingIdentities is how many identities the callers spread over, as
// in bench/'s sections a and b.
const scalingIdentities = 1000

// BenchmarkClusterScaling measures a store on a local Redis Cluster of each
// size listed in RATELIMIT_CLUSTER_MASTERS (default 1 and 3), under each
// number of callers in RATELIMIT_CLUSTER_CALLERS (default 256), deciding
// the three limits of bench/'s section b ("10/s, 120/m, 240/h", scaled so
// that every call is admitted) over 1,000 identities. It reports decisions
// a second, the masters' CPU and this process's per decision, and how busy
// the masters were; with -v it logs each size's decisions a second against
// the first size's. With RATELIMIT_CLUSTER_PIN=1 each master runs on a core
// of its own and this process on the cores after them, as where each
// master has a machine of its own (docs/benchmarks.md, "A Cluster on cores
// of its own"):
//
//	RATELIMIT_CLUSTER_MASTERS=1,6 RATELIMIT_CLUSTER_PIN=1 \
//	  go test -run '^$' -bench ClusterScaling -benchtime 200000x -v ./store/redis
func BenchmarkClusterScaling(b *testing.B) {
	masters := scalingCounts(b, scalingMastersEnv, "1,3")
	callers := scalingCounts(b, scalingCallersEnv, "256")
	pinned := os.Getenv(scalingPinEnv) == "1"
	p := ratelimit.MustParsePolicy("10000000/s, 120000000/m, 240000000/h", ratelimit.Named("scaling"))
	rates := map[string]float64{}
	for _, m := range masters {
		if pinned && m >= runtime.NumCPU() {
			b.Fatalf("%s=1 needs a core for each of %d masters and one at least for the callers; this machine has %d", scalingPinEnv, m, runtime.NumCPU())
		}
		cl := redistest.StartCluster(b, m)
		client := cl.Client(b)
		if pinned {
			pinCluster(b, client, m)
		}
		for _, c := range callers {
			name := fmt.Sprintf("masters=%d/callers=%d", m, c)
			b.Run(name, func(b *testing.B) {
				s, err := New(client, WithPrefix(fmt.Sprintf("s%d:", c)))
				if err != nil {
					b.Fatal(err)
				}
				take := func(i int64) error {
					key := "ip:" + strconv.FormatInt(i%scalingIdentities, 10)
					_, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{key}, Cost: 1})
					return err
				}
				for i := range int64(scalingIdentities) { // every master's library loaded, every key written
					if err := take(i); err != nil {
						b.Fatal(err)
					}
				}
				cpu, own := mastersCPU(b, client), processCPU()
				b.ResetTimer()
				callEach(b, c, take)
				secs := b.Elapsed().Seconds()
				used := mastersCPU(b, client) - cpu
				rate := float64(b.N) / secs
				rates[name] = rate
				b.ReportMetric(rate, "decisions/s")
				b.ReportMetric(used/float64(b.N)*1e6, "redis-µs/decision")
				b.ReportMetric(used/secs/float64(m), "master-busy")
				if now := processCPU(); own >= 0 && now >= 0 {
					b.ReportMetric((now-own)/float64(b.N)*1e6, "client-µs/decision")
				}
			})
		}
	}
	for _, c := range callers {
		first := fmt.Sprintf("masters=%d/callers=%d", masters[0], c)
		for _, m := range masters[1:] {
			name := fmt.Sprintf("masters=%d/callers=%d", m, c)
			if rates[first] > 0 && rates[name] > 0 {
				b.Logf("%d callers: %d masters ÷ %d: %.2f× (%.0f against %.0f decisions/s)", c, m, masters[0], rates[name]/rates[first], rates[name], rates[first])
			}
		}
	}
}

// callEach makes calls 1 to b.N of call from callers goroutines at once,
// each taking the next call as it finishes one; it stops a goroutine at its
// first error.
func callEach(b *testing.B, callers int, call func(i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := call(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// scalingCounts reads a comma-separated list of positive counts from the
// environment variable env, or def where it is unset.
func scalingCounts(b *testing.B, env, def string) []int {
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want positive counts separated by commas", env, v)
		}
		out = append(out, n)
	}
	return out
}

// pinCluster puts master i of the Cluster of m masters on core i, and this
// process (each of its threads, and so those it starts later) on the cores
// after them.
func pinCluster(b *testing.B, c *goredis.ClusterClient, m int) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		b.Fatalf("%s=1: %v", scalingPinEnv, err)
	}
	var mu sync.Mutex
	var pids []string
	err = c.ForEachMaster(context.Background(), func(ctx context.Context, n *goredis.Client) error {
		info, err := n.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(info, "\n") {
			if pid, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
				mu.Lock()
				pids = append(pids, pid)
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil || len(pids) != m {
		b.Fatalf("%s=1: the masters' process IDs: %v (%d of %d)", scalingPinEnv, err, len(pids), m)
	}
	for i, pid := range pids {
		if out, err := exec.Command(taskset, "-a", "-p", "-c", strconv.Itoa(i), pid).CombinedOutput(); err != nil {
			b.Fatalf("taskset master %s to core %d: %v: %s", pid, i, err, out)
		}
	}
	own := fmt.Sprintf("%d-%d", m, runtime.NumCPU()-1)
	if out, err := exec.Command(taskset, "-a", "-p", "-c", own, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
		b.Fatalf("taskset this process to cores %s: %v: %s", own, err, out)
	}
	b.Logf("%d masters on cores 0-%d, this process on cores %s", m, m-1, own)
}
