package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/lua"
)

var _ ratelimit.Store = (*Redis)(nil)

// One *redis.Script per script: Run sends EVALSHA and falls back to EVAL
// when Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var (
	takeSources = [...]string{
		ratelimit.SlidingWindow: lua.TakeSliding,
		ratelimit.FixedWindow:   lua.TakeFixed,
		ratelimit.TokenBucket:   lua.TakeToken,
	}
	takeScripts = [...]*redis.Script{
		ratelimit.SlidingWindow: redis.NewScript(lua.TakeSliding),
		ratelimit.FixedWindow:   redis.NewScript(lua.TakeFixed),
		ratelimit.TokenBucket:   redis.NewScript(lua.TakeToken),
	}
	refundScripts = [...]*redis.Script{
		ratelimit.SlidingWindow: redis.NewScript(lua.RefundSliding),
		ratelimit.FixedWindow:   redis.NewScript(lua.RefundFixed),
		ratelimit.TokenBucket:   redis.NewScript(lua.RefundToken),
	}
)

// Redis is a Store whose counters live in Redis, shared by every server
// that uses the same Redis and key prefix. Each Take is one script call
// that checks every limit of every key and charges all or nothing, using
// Redis's own clock (TIME), so app servers' clocks do not matter.
//
// With a single Redis or Sentinel (*redis.Client, *redis.FailoverClient)
// all keys go to one script: one round trip. With Redis Cluster
// (*redis.ClusterClient) each key's slot comes from its own identity, so
// each key gets its own script, all sent in one pipeline (still one round
// trip); if any key denies, the keys that were charged are refunded in a
// second round trip, so a denied request is never charged anywhere.
//
// Every key expires once the policy's TTL (its longest period, plus one
// sub-bucket) has passed without a charge, or up to a quarter of that
// later: a busy key's expiry is pushed out once per quarter TTL rather
// than on every call. Nothing accumulates.
//
// On a Cluster, each master has a node circuit (WithNodeCircuit): once
// calls to it go unanswered a few times in a row, keys on it fail at once
// with ErrNodeUnavailable until a probe gets an answer, so a dead or hung
// master does not cost every request the whole timeout.
//
// The first 64 policies a store sees each get a script of their own with
// the policy's limits written in, so a call carries only the time and
// cost; Redis keeps one such script per distinct policy. Later policies
// share the algorithm's script, which takes the limits as arguments.
//
// Redis ≥ 5 is required (scripts replicated by effects). A Redis is safe
// to share with other data: keys are namespaced by the prefix.
type Redis struct {
	client     redis.UniversalClient
	cluster    bool
	ctxHonored bool // the client enforces context deadlines itself
	prefix     string
	now        func() time.Time // tests only: replaces Redis TIME
	ttlExtra   time.Duration    // tests only: added to every key's TTL
	batch      *batcher         // nil: one call per Take
	refunds    sync.WaitGroup   // Cluster refunds running in the background

	nodes        sync.Map // Cluster master address → *nodeCircuit
	nodeFailures int
	nodeCooldown time.Duration
	nodeClock    func() time.Time // tests only: the node circuits' clock
	argCache     sync.Map         // *ratelimit.Policy → *preparedTake
	prepMu       sync.Mutex       // held while preparing a policy not in argCache
	argCount     int              // policies in argCache; guarded by prepMu
	maxBaked     int              // policies that get a baked script

	diag *diagnostics // causes seen below the commands (diagnose.go)
}

// maxPrepared bounds the policies whose arguments are kept prepared;
// maxBaked, those that get a script of their own (see prepared).
const (
	maxPrepared = 1024
	maxBaked    = 64
)

// RedisOption configures NewRedis.
type RedisOption func(*Redis)

// WithPrefix sets the key prefix (default DefaultPrefix, "rl:"), to
// namespace applications sharing one Redis. Printable ASCII without braces,
// at most 64 bytes.
func WithPrefix(prefix string) RedisOption { return func(r *Redis) { r.prefix = prefix } }

// withClock makes the scripts use now() instead of Redis TIME. Tests use
// it to replay one trace against several stores.
// Redis still expires keys in real time, which must not cut a replayed
// trace short on a slow machine; expired state reads as empty either way,
// so the longer TTL changes no decision.
func withClock(now func() time.Time) RedisOption {
	return func(r *Redis) { r.now, r.ttlExtra = now, time.Hour }
}

// NewRedis returns a Store on client: a *redis.Client (single Redis or
// Sentinel via redis.NewFailoverClient), a *redis.ClusterClient or a
// *redis.Ring (sharded like a Cluster: each identity's script goes to its
// own shard). Any other client is used as one server.
//
// Timeouts: Take never outlives its context's deadline. go-redis enforces
// context deadlines on the socket only when the client was built with
// ContextTimeoutEnabled: true; set it, and Take calls Redis directly. Without
// it, Take still returns at the deadline, but runs each call on a goroutine
// to do so (slower, and the abandoned call holds a connection until the
// client's ReadTimeout). On a Cluster, set it too: then, with a master
// down, a request whose other identities live elsewhere still gets their
// answer in time (a denial there stands) instead of a timeout.
//
// NewRedis adds a go-redis hook to client (on a Cluster or Ring, also to
// its nodes' clients) that watches failed dials and commands, so that an
// error that would say only "context deadline exceeded" also names the
// latest cause, such as a refused connection; see Ping for a startup check.
// As with any go-redis AddHook, build the store before other goroutines
// send commands on the client.
func NewRedis(client redis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	if client == nil {
		return nil, errors.New("ratelimit/store: NewRedis: nil client")
	}
	r := &Redis{client: client, prefix: DefaultPrefix, maxBaked: maxBaked,
		nodeFailures: DefaultNodeFailures, nodeCooldown: DefaultNodeCooldown}
	for _, o := range opts {
		o(r)
	}
	if err := validPrefix(r.prefix); err != nil {
		return nil, err
	}
	if r.nodeFailures > 0 && r.nodeCooldown <= 0 {
		return nil, fmt.Errorf("ratelimit/store: WithNodeCircuit(%d, %s): want a positive cooldown (or failures 0 to turn it off)", r.nodeFailures, r.nodeCooldown)
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		r.cluster = true
		r.ctxHonored = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		// A Ring shards by key like a Cluster: one script per key, each
		// sent to its own shard.
		r.cluster = true
		r.ctxHonored = c.Options().ContextTimeoutEnabled
	case *redis.Client:
		r.ctxHonored = c.Options().ContextTimeoutEnabled
	}
	if r.cluster {
		// A Cluster pipeline returns when its slowest node answers, so a
		// batch would make live nodes' requests wait for a dead one.
		r.batch = nil
	}
	if r.batch != nil {
		r.batch.client = client
	}
	r.diag = diagnose(client) // adds a go-redis hook: errors then name their cause
	return r, nil
}

// Take implements ratelimit.Store.
func (r *Redis) Take(ctx context.Context, req ratelimit.Request) (_ ratelimit.Decision, err error) {
	defer r.diag.explainErr(&err) // a timeout's error names its cause (diagnose.go)
	if err := validate(&req); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	if _, ok := ctx.Deadline(); !ok || r.ctxHonored {
		return r.take(ctx, req)
	}
	type answer struct {
		d   ratelimit.Decision
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		d, err := r.take(ctx, req)
		ch <- answer{d, err}
	}()
	select {
	case a := <-ch:
		return a.d, a.err
	case <-ctx.Done():
		return ratelimit.Decision{}, fmt.Errorf("ratelimit/store: redis: %w", ctx.Err())
	}
}

func (r *Redis) take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	pol := req.Policy
	keys := make([]string, len(req.Keys))
	for i, k := range req.Keys {
		keys[i] = redisKey(r.prefix, pol.ID(), k)
	}
	var now int64 // 0: the script reads Redis TIME
	if r.now != nil {
		now = r.now().UnixMicro()
	}
	var ps [ratelimit.MaxLimits]param
	lim, nf := params(pol, &ps)
	prep := r.prepared(pol, nf, lim)
	args, script := prep.args(now, req.Cost), prep.script
	d := ratelimit.Decision{Limits: make([]ratelimit.LimitStatus, len(lim))}

	if !r.cluster || len(keys) == 1 {
		var reply []int64
		var err error
		switch {
		case r.batch != nil:
			reply, err = r.batch.do(ctx, script, keys, args)
		case r.cluster:
			reply, err = r.runOnNode(ctx, script, keys[0], args)
		default:
			reply, err = script.Run(ctx, r.client, keys, args...).Int64Slice()
		}
		if err != nil {
			return ratelimit.Decision{}, fmt.Errorf("ratelimit/store: redis: %w", err)
		}
		allowed, err := readReply(&d, reply, 0, len(keys), len(lim), true)
		if err != nil {
			return ratelimit.Decision{}, err
		}
		finish(&d, allowed)
		return d, nil
	}

	// Redis Cluster: the keys live on different nodes, so each key's
	// script is its own command, all sent at once (one round trip in
	// parallel). Each answer stands on its own: the first denial answers
	// the request at once, even while a dead node keeps another command
	// waiting until the deadline; charges made for a request that is not
	// admitted are refunded.
	pctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		// End the calls at three quarters of the budget, leaving time to
		// answer with what the live nodes said.
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*3/4))
		defer cancel()
	}
	answers := make(chan keyAnswer, len(keys))
	for i := range keys {
		go func(i int) {
			rep, err := r.runOnNode(pctx, script, keys[i], args)
			if err == nil && (len(rep) != 2+3*len(lim) || rep[0] != 0 && rep[0] != 1) {
				err = fmt.Errorf("unexpected script reply of %d values", len(rep))
			}
			answers <- keyAnswer{i, rep, err}
		}(i)
	}
	replies := make([][]int64, len(keys))
	denied, pending := false, len(keys)
	var failed error
	for pending > 0 && !denied {
		a := <-answers
		pending--
		if a.err != nil {
			failed = fmt.Errorf("ratelimit/store: redis: key %d: %w", a.i, a.err)
			continue
		}
		replies[a.i] = a.rep
		denied = a.rep[0] == 0
	}
	allowed := !denied && failed == nil
	refund := &refunder{r: r, pol: pol, cost: req.Cost, nf: nf, lim: lim}
	folded := false
	for ki, rep := range replies {
		if rep == nil {
			continue
		}
		if rep[0] == 1 && req.Cost > 0 && !allowed {
			// Charged here, not admitted: refund, and report this key as
			// if it had not been charged.
			refund.add(keys[ki], rep[1])
			for i := range lim {
				rep[2+3*i] += req.Cost
			}
		}
		if _, err := readReply(&d, rep, ki, 1, len(lim), !folded); err != nil {
			return ratelimit.Decision{}, err
		}
		folded = true
	}
	if !allowed && (len(refund.keys) > 0 || pending > 0) {
		// Best effort, off the request's path: the calls still in flight
		// are awaited and refunded if they charged; a refund that fails
		// leaves a charge that expires with its window.
		r.refunds.Add(1)
		go func() {
			defer r.refunds.Done()
			refund.run(answers, pending, keys)
		}()
	}
	if !denied && failed != nil {
		return ratelimit.Decision{}, failed // no key denied, some could not decide
	}
	finish(&d, allowed)
	return d, nil
}

// keyAnswer is one key's script reply in a Redis Cluster request.
type keyAnswer struct {
	i   int
	rep []int64
	err error
}

// refundTimeout bounds the background refunds of a Cluster denial.
const refundTimeout = 2 * time.Second

// refunder takes back the charges of a request that was not admitted.
type refunder struct {
	r    *Redis
	pol  *ratelimit.Policy
	cost int64
	nf   int
	lim  []param
	keys []string
	at   []int64
}

func (f *refunder) add(key string, at int64) {
	f.keys = append(f.keys, key)
	f.at = append(f.at, at)
}

// run waits for the pending answers, adds their charges, and refunds all.
func (f *refunder) run(answers <-chan keyAnswer, pending int, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), refundTimeout)
	defer cancel()
	for ; pending > 0; pending-- {
		select {
		case a := <-answers:
			if a.err == nil && a.rep[0] == 1 && f.cost > 0 {
				f.add(keys[a.i], a.rep[1])
			}
		case <-ctx.Done():
			return
		}
	}
	if len(f.keys) > 0 {
		runEach(ctx, f.r.client, refundScripts[f.pol.Algorithm()], f.keys, func(i int) []any {
			return scriptArgs(f.at[i], f.cost, 0, f.nf, f.lim)
		})
	}
}

// preparedTake is what a policy's Take sends besides its keys: the script
// and the arguments after now and cost (none when the script has the
// policy baked in), boxed once so a Take does not box them again.
type preparedTake struct {
	script *redis.Script
	tail   []any
}

func (p *preparedTake) args(now, cost int64) []any {
	args := make([]any, 2, 2+len(p.tail))
	args[0], args[1] = now, cost
	return append(args, p.tail...)
}

// prepared returns the policy's prepared Take, computing it once. The
// first maxBaked policies get a script of their own with their parameters
// baked in (Redis keeps one script per distinct policy); later ones, and
// those beyond maxPrepared, use the algorithm's script with full ARGV.
func (r *Redis) prepared(pol *ratelimit.Policy, nf int, lim []param) *preparedTake {
	if v, ok := r.argCache.Load(pol); ok {
		return v.(*preparedTake)
	}
	r.prepMu.Lock()
	defer r.prepMu.Unlock()
	if v, ok := r.argCache.Load(pol); ok { // prepared while this call waited
		return v.(*preparedTake)
	}
	ttl := (pol.TTL() + r.ttlExtra).Milliseconds()
	n := r.argCount + 1
	var p *preparedTake
	if n <= r.maxBaked {
		flat := make([]int64, 0, 4*len(lim))
		for _, l := range lim {
			flat = append(flat, l.capacity, l.width, l.n, l.off)
		}
		p = &preparedTake{script: redis.NewScript(lua.Bake(takeSources[pol.Algorithm()], ttl, nf, flat))}
	} else {
		p = &preparedTake{script: takeScripts[pol.Algorithm()], tail: scriptArgs(0, 0, ttl, nf, lim)[2:]}
	}
	// Policies are meant to be built once; a program that builds one per
	// request must not grow the cache without bound.
	if n <= maxPrepared {
		r.argCache.Store(pol, p)
		r.argCount = n
	}
	return p
}

// scriptArgs lays out ARGV: now, cost, ttl (ms), fields, limits, then four
// numbers per limit.
func scriptArgs(now, cost, ttlMS int64, nf int, lim []param) []any {
	args := make([]any, 0, 5+4*len(lim))
	args = append(args, now, cost, ttlMS, nf, len(lim))
	for _, p := range lim {
		args = append(args, p.capacity, p.width, p.n, p.off)
	}
	return args
}

// readReply folds the statuses of nkeys keys, the first numbered first,
// from a take reply: {allowed, per key: time, per limit: rem, reset, retry}.
// firstFold says no status was folded into d before.
func readReply(d *ratelimit.Decision, reply []int64, first, nkeys, nlim int, firstFold bool) (bool, error) {
	if want := 1 + nkeys*(1+3*nlim); len(reply) != want || (reply[0] != 0 && reply[0] != 1) {
		return false, fmt.Errorf("ratelimit/store: redis: unexpected script reply of %d values, want %d", len(reply), want)
	}
	at := 1
	for k := 0; k < nkeys; k++ {
		at++ // the key's time
		for i := 0; i < nlim; i++ {
			fold(d, i, first+k, status{rem: reply[at], reset: reply[at+1], retry: reply[at+2]}, firstFold && k == 0)
			at += 3
		}
	}
	return reply[0] == 1, nil
}

// runEach runs script once per key in one pipeline; see pipeline.
func runEach(ctx context.Context, c redis.UniversalClient, s *redis.Script, keys []string, args func(int) []any) []*redis.Cmd {
	return pipeline(ctx, c, len(keys), func(i int) (*redis.Script, []string, []any) {
		return s, keys[i : i+1], args(i)
	})
}

// pipeline sends n script calls in one pipeline; call(i) says which. Calls
// that find no cached script (NOSCRIPT, after a restart or SCRIPT FLUSH)
// are sent again as EVAL in a second pipeline. Every command carries its
// own answer or error: one failing call (a dead Cluster node) does not
// fail the others.
func pipeline(ctx context.Context, c redis.UniversalClient, n int, call func(i int) (*redis.Script, []string, []any)) []*redis.Cmd {
	cmds := make([]*redis.Cmd, n)
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
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
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				s, keys, args := call(i)
				cmds[i] = s.Eval(ctx, p, keys, args...)
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
func unanswered(cmds []*redis.Cmd, err error) {
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
