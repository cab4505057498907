package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

var _ storekit.Complete = (*Store)(nil)
var _ storekit.Leaser = (*Store)(nil)

// Store is a ratelimit.Store whose counters live in Redis, shared by every server
// that uses the same Redis and key prefix. Each Take is one script call
// that checks every limit of every key and charges all or nothing, using
// Redis's own clock (TIME), so app servers' clocks do not matter.
//
// With a single Redis or Sentinel (*goredis.Client, *goredis.FailoverClient)
// all keys go to one script: one round trip. With Redis Cluster
// (*goredis.ClusterClient) each key's slot comes from its own identity, so
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
// The store runs one script (lua/script.lua). The first 64 policies a store
// sees each get a copy of it with the policy's numbers given as data, so a
// call carries only its own arguments; Redis keeps one such copy per
// distinct policy. Later policies share the generic copy, which takes the
// policy as arguments. Within the script, the common call (a plain Take
// with no request ID, on one key or several) takes a leaner path that
// reads fewer fields.
//
// Redis ≥ 5 is required (scripts replicated by effects). A Redis is safe
// to share with other data: keys are namespaced by the prefix.
type Store struct {
	client      goredis.UniversalClient
	owned       bool   // NewFromURL made client: Close closes it
	fleetShare  bool   // WithFleetShare
	fleet       *fleet // the heartbeat of WithFleetShare (fleet.go)
	cluster     bool
	ctxHonored  bool // the client enforces context deadlines itself
	prefix      string
	now         func() time.Time // WithClock: replaces Redis TIME
	ttlExtra    time.Duration    // WithClock: added to every key's TTL
	noResendIDs bool             // tests only: calls carry no resend ID
	ridHook     func() *resendID // tests only: the resend ID of each call
	runs        bool             // tests only: every common call goes as a batch's run of one (multi.go)
	general     bool             // tests only: every take by the script's general path
	denied      *deniedKeys      // keys whose plain Takes go by the general path for now (denied_keys.go)
	batch       *batcher         // nil: one call per Take (WithBatching(0)), or a Cluster or Ring
	// nodeBatching is WithBatching's inFlight on a Cluster or Ring (0:
	// off); nodeBatches holds each node's batcher by address (nodebatch.go).
	nodeBatching int
	nodeBatches  sync.Map
	batchSet     bool           // WithBatching was given
	refunds      sync.WaitGroup // Cluster refunds of late answers, running in the background

	nodes        sync.Map // Cluster master address → *nodeCircuit
	nodeFailures int
	nodeCooldown time.Duration
	nodeClock    func() time.Time // tests only: the node circuits' clock
	scripts      scripts          // the script of each policy (script.go)

	diag *diagnostics // causes seen below the commands (diagnose.go)

	fallback func() ratelimit.Store // the memory store of Fallback, made once (fallback.go)
}

// Take implements ratelimit.Store.
func (r *Store) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return r.do(ctx, req, verdict.Call{Cost: req.Cost})
}

// Reserve implements storekit.Reserver. On a Cluster (or Ring), a request
// whose keys live on several masters cannot reserve, since each master
// would reserve its own time: it is a plain Take.
func (r *Store) Reserve(ctx context.Context, req ratelimit.Request, maxDelay time.Duration) (ratelimit.Decision, error) {
	o := verdict.Call{Cost: req.Cost, MaxDelay: verdict.ReserveUS(maxDelay)}
	if r.cluster && len(req.Keys) > 1 {
		o.MaxDelay = 0 // each master would reserve its own time
	}
	return r.do(ctx, req, o)
}

// TakeUpTo implements storekit.Granter. On a Cluster (or Ring), each key
// grants what fits on its master and the excess over the smallest grant is
// refunded before the call returns.
func (r *Store) TakeUpTo(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return r.do(ctx, req, verdict.Call{Cost: req.Cost, UpTo: true})
}

// Lease implements storekit.Leaser: TakeUpTo, recorded hold ahead. On a
// Cluster (or Ring), as TakeUpTo.
func (r *Store) Lease(ctx context.Context, req ratelimit.Request, hold time.Duration) (ratelimit.Decision, error) {
	return r.do(ctx, req, verdict.Call{Cost: req.Cost, UpTo: true, Hold: verdict.HoldUS(hold)})
}

// do runs one request within ctx's deadline (see NewRedis on timeouts).
func (r *Store) do(ctx context.Context, req ratelimit.Request, o verdict.Call) (_ ratelimit.Decision, err error) {
	defer r.diag.explainErr(&err) // a timeout's error names its cause (diagnose.go)
	if err := verdict.Validate(req, o); err != nil {
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
