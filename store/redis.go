package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/lua"
)

// One *redis.Script per script: Run sends EVALSHA and falls back to EVAL
// when Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var (
	takeScript   = redis.NewScript(lua.Take)
	refundScript = redis.NewScript(lua.Refund)
	resetScript  = redis.NewScript(lua.Reset)
)

var (
	_ ratelimit.Store    = (*Redis)(nil)
	_ ratelimit.Resetter = (*Redis)(nil)
	_ ratelimit.Refunder = (*Redis)(nil)
	_ ratelimit.Reserver = (*Redis)(nil)
	_ ratelimit.Granter  = (*Redis)(nil)
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
// share the algorithm's script, which takes the limits as arguments. A
// baked policy also gets a leaner script for the common call (one key, no request ID, a plain Take), which does the same
// with fewer fields read and less work in Lua (lua/fast.lua).
//
// Redis ≥ 5 is required (scripts replicated by effects). A Redis is safe
// to share with other data: keys are namespaced by the prefix.
type Redis struct {
	client      redis.UniversalClient
	cluster     bool
	ctxHonored  bool // the client enforces context deadlines itself
	prefix      string
	now         func() time.Time // tests only: replaces Redis TIME
	ttlExtra    time.Duration    // tests only: added to every key's TTL
	noResendIDs bool             // tests only: calls carry no resend ID
	ridHook     func() *resendID // tests only: the resend ID of each call
	batch       *batcher         // nil: one call per Take (WithBatching(0))
	refunds     sync.WaitGroup   // Cluster refunds running in the background

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
		nodeFailures: DefaultNodeFailures, nodeCooldown: DefaultNodeCooldown,
		batch: &batcher{max: DefaultBatching}}
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
func (r *Redis) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return r.do(ctx, req, op{cost: req.Cost})
}

// Reserve implements ratelimit.Reserver. On a Cluster (or Ring), a request
// whose keys live on several masters cannot reserve, since each master
// would reserve its own time: it is a plain Take.
func (r *Redis) Reserve(ctx context.Context, req ratelimit.Request, maxDelay time.Duration) (ratelimit.Decision, error) {
	return r.do(ctx, req, op{cost: req.Cost, maxDelay: reserveUS(maxDelay)})
}

// TakeUpTo implements ratelimit.Granter. On a Cluster (or Ring), each key
// grants what fits on its master and the excess over the smallest grant is
// refunded at once, off the request's path.
func (r *Redis) TakeUpTo(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	if req.Cost < 1 {
		return ratelimit.Decision{}, fmt.Errorf("ratelimit/store: %w: TakeUpTo with cost %d, want at least 1", ErrInvalidRequest, req.Cost)
	}
	return r.do(ctx, req, op{cost: req.Cost, upTo: true})
}

// do runs one request within ctx's deadline (see NewRedis on timeouts).
func (r *Redis) do(ctx context.Context, req ratelimit.Request, o op) (_ ratelimit.Decision, err error) {
	defer r.diag.explainErr(&err) // a timeout's error names its cause (diagnose.go)
	if err := validate(&req); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	if _, ok := ctx.Deadline(); !ok || r.ctxHonored {
		return r.take(ctx, req, o)
	}
	type answer struct {
		d   ratelimit.Decision
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		d, err := r.take(ctx, req, o)
		ch <- answer{d, err}
	}()
	select {
	case a := <-ch:
		return a.d, a.err
	case <-ctx.Done():
		return ratelimit.Decision{}, fmt.Errorf("ratelimit/store: redis: %w", ctx.Err())
	}
}

// callArgs lays out a take's ARGV: the per-call arguments, then the
// policy's unless its script has them baked in.
func (p *preparedTake) callArgs(now int64, o op, rid any, hasID bool) []any {
	args := make([]any, 6, 6+len(p.tail))
	mode := "0"
	if o.upTo {
		mode = "1"
	}
	id := "0"
	if hasID {
		id = "1"
	}
	args[0], args[1], args[2], args[3], args[4], args[5] = now, o.cost, mode, o.maxDelay, rid, id
	return append(args, p.tail...)
}

// nowUS is the time the scripts get: 0, for Redis TIME, unless a test set
// a clock.
func (r *Redis) nowUS() int64 {
	if r.now != nil {
		return r.now().UnixMicro()
	}
	return 0
}

func (r *Redis) take(ctx context.Context, req ratelimit.Request, o op) (ratelimit.Decision, error) {
	pol := req.Policy
	now := r.nowUS()
	prep := r.prepared(pol)
	nl := pol.NumLimits()
	keys := make([]string, len(req.Keys))
	for i, k := range req.Keys {
		keys[i] = redisKey(r.prefix, pol.ID(), k)
	}
	var idKeys []string
	if req.ID != "" {
		h := idHash(req.ID)
		idKeys = make([]string, len(req.Keys))
		for i, k := range req.Keys {
			idKeys[i] = redisKey(r.prefix, pol.ID()+":id:"+h, k)
		}
	}

	if !r.cluster || len(keys) == 1 {
		script, all := prep.script, append(keys, idKeys...)
		var args []any
		if prep.fast != nil && len(keys) == 1 && idKeys == nil && !o.upTo && o.maxDelay == 0 {
			script, args = prep.fast, []any{now, o.cost, r.resendID(ctx)}
		} else {
			args = prep.callArgs(now, o, r.resendID(ctx), idKeys != nil)
		}
		var reply []int64
		var err error
		switch {
		case r.batch != nil:
			reply, err = r.batch.do(ctx, script, all, args)
		case r.cluster:
			reply, err = r.runOnNode(ctx, script, all, args)
		default:
			reply, err = runScript(ctx, r.client, script, all, args).Int64Slice()
		}
		if err != nil {
			err = resendErr(err)
			return ratelimit.Decision{}, fmt.Errorf("ratelimit/store: redis: %w", err)
		}
		if err := checkReply(reply, len(keys), nl); err != nil {
			return ratelimit.Decision{}, err
		}
		return decide(req, [][]int64{reply}, nl), nil
	}
	return r.takeCluster(ctx, req, o, prep, keys, idKeys, now)
}

// Reply layout of the take script: a header, then per key a kind, the time
// of its charge, its refund count, and 4 numbers per limit.
const (
	rAllowed = 0
	rNow     = 1
	rGranted = 2
	rRelease = 3
	rHeader  = 5
)

// Key kinds in a reply.
const (
	kindDecided  = 0
	kindCharged  = 1
	kindRecorded = 2 // answered by its request ID's record
	kindResent   = 3 // a resend of a call that charged
)

func checkReply(reply []int64, nkeys, nlim int) error {
	if want := rHeader + nkeys*(3+4*nlim); len(reply) != want || reply[rAllowed] != 0 && reply[rAllowed] != 1 {
		return fmt.Errorf("ratelimit/store: redis: unexpected script reply of %d values, want %d", len(reply), want)
	}
	return nil
}

// decide builds the Decision of replies that together cover req.Keys in
// order (one reply for all keys, or one per key on a Cluster), as the
// memory store builds its own.
func decide(req ratelimit.Request, replies [][]int64, nl int) ratelimit.Decision {
	d := ratelimit.Decision{Limits: make([]ratelimit.LimitStatus, nl)}
	allowed, all := true, true
	var marks []int64
	var charged []string
	ki := 0
	var first []int64 // the first key's part
	for _, rep := range replies {
		if rep[rAllowed] == 0 {
			allowed = false
		}
		n := (len(rep) - rHeader) / (3 + 4*nl)
		for k := 0; k < n; k, ki = k+1, ki+1 {
			part := rep[rHeader+k*(3+4*nl):]
			if ki == 0 {
				first = part
			}
			for i := 0; i < nl; i++ {
				p := part[3+4*i:]
				fold(&d, i, ki, status{rem: p[0], reset: p[1], retry: p[2]}, ki == 0)
			}
			if part[0] != kindRecorded {
				all = false
			}
			if part[0] == kindCharged {
				charged = append(charged, req.Keys[ki])
				marks = append(marks, part[1], part[2])
				for i := 0; i < nl; i++ {
					marks = append(marks, part[3+4*i+3])
				}
			}
		}
	}
	rep := replies[0]
	d.Granted = rep[rGranted]
	if all {
		d.Repeated = true
		if at := first[1]; at > rep[rNow] {
			d.Delay = time.Duration(at-rep[rNow]) * time.Microsecond
		}
	} else if rel := rep[rRelease]; rel > rep[rNow] {
		d.Delay = time.Duration(rel-rep[rNow]) * time.Microsecond
	}
	finish(&d, allowed)
	if len(charged) > 0 {
		d.Receipt = ratelimit.NewReceipt(req.Policy, charged, d.Granted, marks)
	}
	return d
}

// takeCluster runs one request whose keys live in different slots: each
// key's script is its own command, all sent at once (one round trip in
// parallel). Every master's answer is awaited, up to three quarters of the
// budget, so that a denial reports the longest wait any master gave; masters
// that never answered are left out. Charges made for a request that is not
// admitted (or, granting, beyond the smallest grant) are refunded off the
// request's path.
func (r *Redis) takeCluster(ctx context.Context, req ratelimit.Request, o op, prep *preparedTake, keys, idKeys []string, now int64) (ratelimit.Decision, error) {
	nl := req.Policy.NumLimits()
	o.maxDelay = 0 // each master would reserve its own time: no reservations across masters
	pctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		// End the calls at three quarters of the budget, leaving time to
		// answer with what the live masters said.
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*3/4))
		defer cancel()
	}
	answers := make(chan keyAnswer, len(keys))
	for i := range keys {
		rid := r.resendID(ctx) // one per command: each is sent, and resent, on its own
		go func(i int) {
			ks := keys[i : i+1]
			if idKeys != nil {
				ks = []string{keys[i], idKeys[i]}
			}
			rep, err := r.runOnNode(pctx, prep.script, ks, prep.callArgs(now, o, rid, idKeys != nil))
			err = resendErr(err)
			if err == nil {
				err = checkReply(rep, 1, nl)
			}
			answers <- keyAnswer{i, rep, err}
		}(i)
	}
	replies := make([][]int64, len(keys))
	var failed error
	pending := len(keys)
collect:
	for pending > 0 {
		var a keyAnswer
		select {
		case a = <-answers:
		case <-pctx.Done():
			select { // an answer that arrived with the deadline still counts
			case a = <-answers:
			default:
				break collect
			}
		}
		pending--
		if a.err != nil {
			failed = fmt.Errorf("ratelimit/store: redis: key %d: %w", a.i, a.err)
			continue
		}
		replies[a.i] = a.rep
	}
	denied, grant := false, o.cost
	for _, rep := range replies {
		if rep == nil {
			continue
		}
		if rep[rAllowed] == 0 {
			denied = true
		}
		grant = min(grant, rep[rGranted])
	}
	allowed := !denied && failed == nil && pending == 0
	// Give back what the request was charged and will not use.
	refunds := &refunder{r: r, pol: req.Policy}
	for ki, rep := range replies {
		if rep == nil {
			continue
		}
		part := rep[rHeader:]
		if part[0] != kindCharged {
			continue
		}
		back := rep[rGranted]
		if allowed {
			back -= grant
		}
		if back <= 0 {
			continue
		}
		m := make([]int64, 0, 2+nl)
		m = append(m, part[1], part[2])
		for i := 0; i < nl; i++ {
			m = append(m, part[3+4*i+3])
		}
		refunds.add(keys[ki], back, slices.Clone(m))
		// Report this key as if it had not been charged what comes back;
		// its receipt's TATs are those after the grant alone.
		_, widths, _, _ := req.Policy.Compiled()
		for i := 0; i < nl; i++ {
			part[3+4*i] += back
			if req.Policy.Counter(i) == ratelimit.CounterToken {
				part[3+4*i+3] -= back * widths[i]
			}
		}
		if !allowed {
			part[0] = kindDecided
		}
		rep[rGranted] -= back
	}
	if pending > 0 || len(refunds.keys) > 0 {
		r.refunds.Add(1)
		go func() {
			defer r.refunds.Done()
			refunds.run(answers, pending, keys, o, grant, allowed, nl)
		}()
	}
	if !denied && (failed != nil || pending > 0) {
		if failed == nil {
			failed = fmt.Errorf("ratelimit/store: redis: %d of %d keys got no answer: %w", pending, len(keys), context.DeadlineExceeded)
		}
		return ratelimit.Decision{}, failed // no key denied, some could not decide
	}
	var got [][]int64
	var gotKeys []string
	for ki, rep := range replies {
		if rep != nil {
			if !allowed {
				rep[rAllowed] = 0
			}
			rep[rGranted] = grant
			got = append(got, rep)
			gotKeys = append(gotKeys, req.Keys[ki])
		}
	}
	sub := req
	sub.Keys = gotKeys
	d := decide(sub, got, nl)
	// Indexes refer to the request's keys, not to those that answered.
	remap := make([]int, 0, len(gotKeys))
	for ki, rep := range replies {
		if rep != nil {
			remap = append(remap, ki)
		}
	}
	d.Key = remap[d.Key]
	for i := range d.Limits {
		d.Limits[i].Key = remap[d.Limits[i].Key]
	}
	if !allowed {
		d.Granted, d.Receipt = 0, ratelimit.Receipt{}
	}
	return d, nil
}

// keyAnswer is one key's script reply in a Redis Cluster request.
type keyAnswer struct {
	i   int
	rep []int64
	err error
}

// refundTimeout bounds the background refunds of a Cluster request.
const refundTimeout = 2 * time.Second

// refunder takes back charges a Cluster request will not use.
type refunder struct {
	r     *Redis
	pol   *ratelimit.Policy
	keys  []string
	costs []int64
	marks [][]int64
}

func (f *refunder) add(key string, cost int64, marks []int64) {
	f.keys = append(f.keys, key)
	f.costs = append(f.costs, cost)
	f.marks = append(f.marks, marks)
}

// run waits for the answers still pending (those that charged are refunded
// too: the request did not wait for them), then refunds everything.
func (f *refunder) run(answers <-chan keyAnswer, pending int, keys []string, o op, grant int64, allowed bool, nl int) {
	ctx, cancel := context.WithTimeout(context.Background(), refundTimeout)
	defer cancel()
	for ; pending > 0; pending-- {
		select {
		case a := <-answers:
			if a.err == nil && a.rep[rHeader] == kindCharged && a.rep[rGranted] > 0 {
				m := []int64{a.rep[rHeader+1], a.rep[rHeader+2]}
				for i := 0; i < nl; i++ {
					m = append(m, a.rep[rHeader+3+4*i+3])
				}
				f.add(keys[a.i], a.rep[rGranted], m)
			}
		case <-ctx.Done():
			return
		}
	}
	if len(f.keys) > 0 {
		runEach(ctx, f.r.client, refundScript, f.keys, func(i int) []any {
			return refundArgs(f.r.nowUS(), f.pol, f.costs[i], f.marks[i])
		})
	}
}

// refundArgs lays out a refund's ARGV: now (0: Redis TIME), cost, the
// policy, then the marks of each key.
func refundArgs(now int64, p *ratelimit.Policy, cost int64, marks ...[]int64) []any {
	lp := luaParams(p)
	args := make([]any, 0, 3+len(lp)+len(marks)*(2+p.NumLimits()))
	args = append(args, now, cost, p.NumLimits())
	for _, v := range lp {
		args = append(args, v)
	}
	for _, m := range marks {
		for _, v := range m {
			args = append(args, v)
		}
	}
	return args
}

// Reset implements ratelimit.Resetter: every key's counters are emptied,
// in one round trip (one script per key, sent together). A refund of a
// charge made before the Reset then gives nothing back (lua/reset.lua).
func (r *Redis) Reset(ctx context.Context, p *ratelimit.Policy, keys ...string) error {
	if err := validateKeys(p, keys); err != nil {
		return err
	}
	rk := make([]string, len(keys))
	for i, k := range keys {
		rk[i] = redisKey(r.prefix, p.ID(), k)
	}
	// Each key is emptied by a script of its own (it keeps the epoch that
	// voids refunds of earlier charges; see lua/reset.lua), all sent in one
	// pipeline: one round trip, on a Cluster too.
	ttl := (p.TTL() + r.ttlExtra).Milliseconds() + 1
	cmds := pipeline(ctx, r.client, len(rk), func(i int) (*redis.Script, []string, []any) {
		return resetScript, rk[i : i+1], []any{ttl}
	})
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if len(rk) == 1 {
				return fmt.Errorf("ratelimit/store: redis: reset: %w", err)
			}
			return fmt.Errorf("ratelimit/store: redis: reset key %d: %w", i, err)
		}
	}
	return nil
}

// Refund implements ratelimit.Refunder: one script call (one per key on a
// Cluster, sent together), in one round trip.
func (r *Redis) Refund(ctx context.Context, rc ratelimit.Receipt) error {
	p, keys, marks, err := checkReceipt(rc)
	if err != nil || p == nil {
		return err
	}
	stride := 2 + p.NumLimits()
	rk := make([]string, len(keys))
	per := make([][]int64, len(keys))
	for i, k := range keys {
		rk[i] = redisKey(r.prefix, p.ID(), k)
		per[i] = marks[i*stride : (i+1)*stride]
	}
	if !r.cluster || len(rk) == 1 {
		if err := refundScript.Run(ctx, r.client, rk, refundArgs(r.nowUS(), p, rc.Cost(), per...)...).Err(); err != nil {
			return fmt.Errorf("ratelimit/store: redis: refund: %w", err)
		}
		return nil
	}
	for i, c := range runEach(ctx, r.client, refundScript, rk, func(i int) []any { return refundArgs(r.nowUS(), p, rc.Cost(), per[i]) }) {
		if c.Err() != nil {
			return fmt.Errorf("ratelimit/store: redis: refund key %d: %w", i, c.Err())
		}
	}
	return nil
}

// WaitRefunds waits for the refunds a Cluster store runs in the background
// (at most refundTimeout each). Tests and graceful shutdowns call it.
func (r *Redis) WaitRefunds() { r.refunds.Wait() }

// preparedTake is what a policy's Take sends besides its keys and per-call
// arguments: the script and, unless it has the policy baked in, the
// policy's arguments, boxed once so a Take does not box them again.
type preparedTake struct {
	script *redis.Script
	tail   []any
	// fast: the lean script of a baked policy, for calls on one key with
	// no request ID that neither grant up to a cost nor reserve
	// (lua/fast.lua); nil for a policy that is not baked.
	fast *redis.Script
}

// luaParams lays out a policy for the scripts: 7 numbers per limit (kind,
// capacity, width, n, period, first field, log slots per chunk field), the
// fields numbered from 2 (field 1 is the time of the last charge).
func luaParams(p *ratelimit.Policy) []int64 {
	var ps [ratelimit.MaxLimits]param
	lim, _ := params(p, &ps)
	out := make([]int64, 0, 7*len(lim))
	off := int64(2)
	for _, l := range lim {
		var cs, n int64
		switch l.kind {
		case ratelimit.CounterBuckets:
			n = 1 + 2*(l.n+1)
		case ratelimit.CounterLog:
			cs = logChunk(l.capacity)
			n = 1 + (l.capacity+cs-1)/cs
		case ratelimit.CounterFixed:
			n = 2
		case ratelimit.CounterToken:
			n = 1
		case ratelimit.CounterApprox:
			n = 3
		}
		out = append(out, int64(l.kind), l.capacity, l.width, l.n, l.period, off, cs)
		off += n
	}
	return out
}

// logChunk is how many 16-digit times a log packs into one hash field: four
// (64 bytes, the most a small hash keeps in its compact encoding) for the
// small logs of SlidingWindow, 32 for the larger ones of SlidingLog.
func logChunk(rate int64) int64 {
	if rate <= ratelimit.ExactRateMax {
		return 4
	}
	return 32
}

// prepared returns the policy's prepared Take, computing it once. The
// first maxBaked policies get a script of their own with their parameters
// baked in (Redis keeps one script per distinct policy); later ones, and
// those beyond maxPrepared, use the generic script with the policy in ARGV.
func (r *Redis) prepared(pol *ratelimit.Policy) *preparedTake {
	if v, ok := r.argCache.Load(pol); ok {
		return v.(*preparedTake)
	}
	r.prepMu.Lock()
	defer r.prepMu.Unlock()
	if v, ok := r.argCache.Load(pol); ok { // prepared while this call waited
		return v.(*preparedTake)
	}
	b := lua.Baked{
		TTLMS:   (pol.TTL() + r.ttlExtra).Milliseconds(),
		BlockUS: pol.BlockFor().Microseconds(),
		IDTTLUS: pol.MaxPeriod().Microseconds(),
		Reserve: pol.Reserves(),
		P:       luaParams(pol),
	}
	n := r.argCount + 1
	var p *preparedTake
	if n <= r.maxBaked {
		p = &preparedTake{script: redis.NewScript(lua.Bake(b)), fast: redis.NewScript(lua.BakeFast(b))}
	} else {
		res := "0"
		if b.Reserve {
			res = "1"
		}
		tail := []any{b.TTLMS, len(b.P) / 7, b.BlockUS, b.IDTTLUS, res}
		for _, v := range b.P {
			tail = append(tail, v)
		}
		p = &preparedTake{script: takeScript, tail: tail}
	}
	// Policies are meant to be built once; a program that builds one per
	// request must not grow the cache without bound.
	if n <= maxPrepared {
		r.argCache.Store(pol, p)
		r.argCount = n
	}
	return p
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
