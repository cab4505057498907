package main

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// The floors: the least a limiter on Redis pays per request, one round
// trip of next to no work.

func buildPing(e *env) (*instance, error) {
	c := e.newClient()
	return &instance{
		op: func(ctx context.Context, _ int) (bool, error) {
			return false, c.Ping(ctx).Err()
		},
		close: func() { c.Close() },
	}, nil
}

var returnOne = redis.NewScript("return 1")

// scriptClient is a new client with s loaded, and what to run s on: the
// client itself, or its AutoPipeliner when auto.
func scriptClient(e *env, s *redis.Script, auto bool) (*redis.Client, redis.Scripter, error) {
	c := e.newClient()
	if err := s.Load(context.Background(), c).Err(); err != nil {
		c.Close()
		return nil, nil, err
	}
	if !auto {
		return c, c, nil
	}
	ap, err := c.AutoPipeline()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, ap, nil
}

func buildEvalFloor(e *env, auto bool) (*instance, error) {
	c, run, err := scriptClient(e, returnOne, auto)
	if err != nil {
		return nil, err
	}
	return &instance{
		op: func(ctx context.Context, _ int) (bool, error) {
			return false, returnOne.Run(ctx, run, nil).Err()
		},
		close: func() { c.Close() },
	}, nil
}

// stateScript reads Redis's clock and a hash's two fields and writes them
// back: the commands a limiter script on Redis's clock calls, without the
// limiter's arithmetic.
var stateScript = redis.NewScript(`local t = redis.call('TIME')
redis.call('HMGET', KEYS[1], 'a', 'b')
redis.call('HSET', KEYS[1], 'a', t[1], 'b', t[2])
return 1`)

func buildStateFloor(e *env) (*instance, error) {
	c, run, err := scriptClient(e, stateScript, true)
	if err != nil {
		return nil, err
	}
	return &instance{
		op: inSequence(e.ids.perL, 1, func(ctx context.Context, _ int, k string) (bool, error) {
			return false, stateScript.Run(ctx, run, []string{k + ":state"}).Err()
		}),
		close: func() { c.Close() },
	}, nil
}
