package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// A shareStore is the fallback of a store WithFleetShare: the memory
// store, asked with each limit divided by the instances that shared the
// Redis when it was last seen (rounded up), so that a client whose
// requests spread over the fleet gets about the limit fleet-wide during
// an outage, not the limit times the fleet.
type shareStore struct {
	inner     *memory.Store
	instances func() int64
	policies  sync.Map // shareKey → *ratelimit.Policy
	cached    atomic.Int64
}

var _ storekit.Complete = (*shareStore)(nil)

// shareKey names a policy's share among n instances.
type shareKey struct {
	p *ratelimit.Policy
	n int64
}

// maxShares bounds the shares a shareStore keeps built; past it, it
// forgets them all and builds again.
const maxShares = 4096

// share returns p with each limit's rate (and burst) divided by the
// instances, rounded up; p itself for one instance, a leased policy (its
// grants already spread the quota) or a share NewPolicy would refuse.
func (s *shareStore) share(p *ratelimit.Policy) *ratelimit.Policy {
	n := s.instances()
	if p == nil || n <= 1 {
		return p
	}
	if chunk, _ := p.Lease(); chunk > 0 {
		return p
	}
	k := shareKey{p, n}
	if q, ok := s.policies.Load(k); ok {
		return q.(*ratelimit.Policy)
	}
	limits := p.Limits()
	for i := range limits {
		limits[i].Rate = (limits[i].Rate + n - 1) / n
		if limits[i].Burst > 0 {
			limits[i].Burst = (limits[i].Burst + n - 1) / n
		}
	}
	q, err := ratelimit.NewPolicy(p.Name(), p.Algorithm(), limits...)
	if err == nil && p.BlockFor() > 0 {
		q, err = q.With(ratelimit.BlockFor(p.BlockFor()))
	}
	if err != nil {
		return p
	}
	if s.cached.Add(1) > maxShares {
		s.policies.Clear()
		s.cached.Store(1)
	}
	s.policies.Store(k, q)
	return q
}

func (s *shareStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	req.Policy = s.share(req.Policy)
	return s.inner.Take(ctx, req)
}

func (s *shareStore) Reserve(ctx context.Context, req ratelimit.Request, maxDelay time.Duration) (ratelimit.Decision, error) {
	req.Policy = s.share(req.Policy)
	return s.inner.Reserve(ctx, req, maxDelay)
}

func (s *shareStore) TakeUpTo(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	req.Policy = s.share(req.Policy)
	return s.inner.TakeUpTo(ctx, req)
}

func (s *shareStore) Lease(ctx context.Context, req ratelimit.Request, hold time.Duration) (ratelimit.Decision, error) {
	return s.inner.Lease(ctx, req, hold) // a leased policy is never shared: see share
}

func (s *shareStore) Reset(ctx context.Context, p *ratelimit.Policy, keys ...string) error {
	return s.inner.Reset(ctx, s.share(p), keys...)
}

// A charge's receipt names the policy it was made under (the share), so
// what follows a charge goes to the memory store as it is.

func (s *shareStore) Refund(ctx context.Context, r ratelimit.Receipt) error {
	return s.inner.Refund(ctx, r)
}

func (s *shareStore) Settle(ctx context.Context, r ratelimit.Receipt, actual int64) error {
	return s.inner.Settle(ctx, r, actual)
}

func (s *shareStore) Release(ctx context.Context, r ratelimit.Receipt) error {
	return s.inner.Release(ctx, r)
}

func (s *shareStore) Renew(ctx context.Context, r ratelimit.Receipt) (ratelimit.Receipt, error) {
	return s.inner.Renew(ctx, r)
}

// Local marks the share as a store that does no I/O, as its memory store.
func (s *shareStore) Local() {}
