package redis

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// runEach runs script once per key in one pipeline; see pipeline.
func runEach(ctx context.Context, c goredis.UniversalClient, s *goredis.Script, keys []string, args func(int) []any) []*goredis.Cmd {
	return pipeline(ctx, c, len(keys), func(i int) (*goredis.Script, []string, []any) {
		return s, keys[i : i+1], args(i)
	})
}

// pipeline sends n script calls in one pipeline; call(i) says which. Calls
// that find no cached script (NOSCRIPT, after a restart or SCRIPT FLUSH)
// are sent again as EVAL in a second pipeline. Every command carries its
// own answer or error: one failing call (a dead Cluster node) does not
// fail the others.
func pipeline(ctx context.Context, c goredis.UniversalClient, n int, call func(i int) (*goredis.Script, []string, []any)) []*goredis.Cmd {
	cmds := make([]*goredis.Cmd, n)
	_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := range cmds {
			s, keys, args := call(i)
			cmds[i] = s.EvalSha(ctx, p, keys, args...)
		}
		return nil
	})
	unanswered(cmds, err)
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && isNoScript(err) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, i := range again {
				s, keys, args := call(i)
				cmds[i] = s.Eval(ctx, p, keys, fresh(args)...)
			}
			return nil
		})
		unanswered(cmds, err)
	}
	return cmds
}

// unanswered gives the pipeline's error to each command that got neither a
// reply nor an error of its own (go-redis leaves them empty when, for
// instance, it cannot dial), so callers see why instead of an empty reply.
func unanswered(cmds []*goredis.Cmd, err error) {
	if err == nil {
		return
	}
	for _, c := range cmds {
		if c.Err() == nil && c.Val() == nil {
			c.SetErr(err)
		}
	}
}

func isNoScript(err error) bool { return strings.HasPrefix(err.Error(), "NOSCRIPT") }
