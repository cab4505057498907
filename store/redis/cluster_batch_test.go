package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// TestClusterBatchesPerMaster: on a real 3-master Redis Cluster, 64 callers
// of requests of 40 identities share each master's pipelines
// (more commands than round trips, counted by a hook), and every identity
// of "50/h" is admitted exactly 50 of 100, as alone.
func TestClusterBatchesPerMaster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(t)
	var pipes, cmds atomic.Int64
	client.OnNewNode(func(n *goredis.Client) { n.AddHook(pipeCounter{&pipes, &cmds}) })
	s, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("50/h", ratelimit.Named("batched"))
	for id, n := range takeEach(t, s, p, 40, 100, 64) {
		if n != 50 {
			t.Fatalf("ip:%d admitted %d of 100 under 50/h", id, n)
		}
	}
	n := 0
	s.nodeBatches.Range(func(any, any) bool { n++; return true })
	t.Logf("%d commands in %d pipelines over %d masters' batchers", cmds.Load(), pipes.Load(), n)
	if n != 3 || pipes.Load() == 0 || cmds.Load() <= pipes.Load() {
		t.Fatalf("%d batchers, %d commands in %d pipelines: want 3 batchers sharing pipelines", n, cmds.Load(), pipes.Load())
	}
}

// pipeCounter counts a node's pipelines and the commands they carried.
type pipeCounter struct{ pipes, cmds *atomic.Int64 }

func (h pipeCounter) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h pipeCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h pipeCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.pipes.Add(1)
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// BenchmarkClusterBatching compares, in one run, a store on a local
// 3-master Cluster batching per master (the default) with one sending each
// call alone (WithBatching(0)): 64 callers, the policy "10/s, 120/m,
// 240/h", over 1,000 identities (most calls denied: 60 a identity) and over
// 100,000 (every call admitted). It reports decisions a second, the
// masters' CPU and this process's per decision for each, and, with -v, the
// ratios.
//
//	go test -run '^$' -bench ClusterBatching -benchtime 60000x -v ./store/redis
func BenchmarkClusterBatching(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	client := cl.Client(b)
	p := ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("bench"))
	for _, ids := range []int64{1000, 100000} {
		rates := map[string]float64{}
		for _, mode := range []struct {
			name string
			opts []Option
		}{{"unbatched", []Option{WithBatching(0)}}, {"batched", nil}} {
			b.Run(fmt.Sprintf("ids=%d/%s", ids, mode.name), func(b *testing.B) {
				s, err := New(client, append(mode.opts, WithPrefix(fmt.Sprintf("b%d%s:", ids, mode.name)))...)
				if err != nil {
					b.Fatal(err)
				}
				cpu, own := mastersCPU(b, client), processCPU()
				b.ResetTimer()
				callEach(b, 64, func(i int64) error {
					key := "ip:" + strconv.FormatInt(i%ids, 10)
					_, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{key}, Cost: 1})
					return err
				})
				rate := float64(b.N) / b.Elapsed().Seconds()
				rates[mode.name] = rate
				b.ReportMetric(rate, "decisions/s")
				// The masters' own CPU (INFO cpu) per decision: what a
				// capacity plan scales (docs/benchmarks.md, "Capacity").
				b.ReportMetric((mastersCPU(b, client)-cpu)/float64(b.N)*1e6, "redis-µs/decision")
				// This process's CPU per decision (the callers, go-redis, the
				// store): what bounds a Cluster once its masters have cores to
				// spare (docs/benchmarks.md, "A Cluster on cores of its own").
				if now := processCPU(); own >= 0 && now >= 0 {
					b.ReportMetric((now-own)/float64(b.N)*1e6, "client-µs/decision")
				}
			})
		}
		if rates["unbatched"] > 0 {
			b.Logf("%d identities: batched ÷ unbatched %.2f× (%.0f vs %.0f decisions/s)", ids, rates["batched"]/rates["unbatched"], rates["batched"], rates["unbatched"])
		}
	}
}

// mastersCPU is the CPU the Cluster's masters have used, in seconds, by
// their own count (INFO cpu: used_cpu_sys plus used_cpu_user).
func mastersCPU(b *testing.B, c *goredis.ClusterClient) float64 {
	var mu sync.Mutex
	total := 0.0
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, n *goredis.Client) error {
		info, err := n.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(info, "\n") {
			name, v, _ := strings.Cut(strings.TrimSpace(l), ":")
			if name == "used_cpu_sys" || name == "used_cpu_user" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return err
				}
				mu.Lock()
				total += f
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}
