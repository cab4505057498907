package redis

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// runEach runs script once per key in one pipeline; see pipeline.
func runEach(ctx context.Context, c goredis.UniversalClient, s *script, keys []string, args func(int) []any) []*goredis.Cmd {
	return pipeline(ctx, c, len(keys), func(i int) (*script, []string, []any) {
		return s, keys[i : i+1], args(i)
	})
}

// pipeline sends n script calls in one pipeline; call(i) says which. Calls
// that find no cached script or function (after a restart, SCRIPT FLUSH or
// FUNCTION FLUSH; see script.again) are sent again as EVAL in a second
// pipeline. Every command carries its
// own answer or error: one failing call (a dead Cluster node) does not
// fail the others.
func pipeline(ctx context.Context, c goredis.UniversalClient, n int, call func(i int) (*script, []string, []any)) []*goredis.Cmd {
	cmds := make([]*goredis.Cmd, n)
	_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := range cmds {
			s, keys, args := call(i)
			cmds[i] = s.call(ctx, p, keys, args)
		}
		return nil
	})
	unanswered(cmds, err)
	var again []int
	for i, cmd := range cmds {
		if s, _, _ := call(i); s.again(ctx, c, cmd.Err()) {
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
