package ratelimitgrpc

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// UnaryClientInterceptor paces a client's unary calls by what the server
// sent: once a response names its limit (the ratelimit-policy and
// ratelimit fields an admitted call carries in its header: quota q per
// window w), a call of that method to that target leaves only when fewer
// than q calls were admitted within the last w, counting those under way
// and timing each admission by its answer's arrival (the latest the
// server can have decided it), so that the server never has to refuse
// it; and a refusal's wait (grpc-retry-pushback-ms, else its RetryInfo)
// holds them until it has passed. A call waits within its deadline: one that would
// have to wait past it fails at once with DeadlineExceeded. It never
// retries a call: a service config's retry policy does, as the server
// says (see the package documentation).
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	p := &pacer{paces: map[string]*pace{}}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		pc := p.of(cc.Target() + method)
		if err := pc.wait(ctx); err != nil {
			return err
		}
		var header, trailer metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header), grpc.Trailer(&trailer))...)
		pc.done(header, trailer, err)
		return err
	}
}

// StreamClientInterceptor paces the opening of a client's streams as
// UnaryClientInterceptor paces unary calls: the server decides a stream
// once, when it opens, and a stream counts as under way until its header
// (or its end) says what the server decided.
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	p := &pacer{paces: map[string]*pace{}}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		pc := p.of(cc.Target() + method)
		if err := pc.wait(ctx); err != nil {
			return nil, err
		}
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			pc.done(nil, nil, err)
			return nil, err
		}
		go answered(s, pc)
		return s, nil
	}
}

// answered ends a stream's time under way when its header arrives, or
// when it ends without one (a refusal is trailers-only), and learns
// from them. Header waits for either, and leaves the messages to the
// caller.
func answered(s grpc.ClientStream, pc *pace) {
	h, err := s.Header()
	if err == nil && h != nil {
		pc.done(h, nil, nil)
		return
	}
	// Ended without a header: the status comes with the next RecvMsg,
	// the trailer is final.
	pc.done(nil, s.Trailer(), streamEnded(s.Trailer()))
}

// streamEnded is the error a stream that ended with trailer tr carries,
// as far as pacing needs it: a refusal when tr asks for a wait.
func streamEnded(tr metadata.MD) error {
	if len(tr.Get(pushbackKey)) > 0 {
		return status.Error(codes.ResourceExhausted, "refused")
	}
	return nil
}

// pacerCap bounds the methods and targets a pacer remembers.
const pacerCap = 4096

// A pacer holds the pace of each target and method.
type pacer struct {
	mu    sync.Mutex
	paces map[string]*pace
}

func (p *pacer) of(key string) *pace {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc := p.paces[key]
	if pc == nil {
		if len(p.paces) >= pacerCap {
			clear(p.paces)
		}
		pc = &pace{}
		p.paces[key] = pc
	}
	return pc
}

// A pace is the calls of one method to one target: the limit they
// learnt (quota per window), the arrival of the answers admitted within
// the last window, the calls under way, and a refusal's wait.
type pace struct {
	mu       sync.Mutex
	quota    int64         // 0: no limit known
	window   time.Duration // the limit's window
	admitted []time.Time   // answers of admitted calls, oldest first
	underWay int64
	until    time.Time     // a refusal's wait ends
	changed  chan struct{} // closed when a call ends
}

// wait holds a call until its place, or fails it when its place is past
// ctx's deadline.
func (pc *pace) wait(ctx context.Context) error {
	for {
		pc.mu.Lock()
		now := time.Now()
		at := pc.until // the earliest the call may leave; zero: now
		if pc.quota > 0 {
			from := now.Add(-pc.window)
			for len(pc.admitted) > 0 && !pc.admitted[0].After(from) {
				pc.admitted = pc.admitted[1:]
			}
			if over := int64(len(pc.admitted)) + pc.underWay - pc.quota + 1; over > 0 {
				switch {
				case over <= int64(len(pc.admitted)):
					if t := pc.admitted[over-1].Add(pc.window); t.After(at) {
						at = t
					}
				default: // only a call under way can free a place: wait for one to end
					at = now.Add(pc.window)
				}
			}
		}
		if !at.After(now) {
			pc.underWay++
			pc.mu.Unlock()
			return nil
		}
		if deadline, ok := ctx.Deadline(); ok && at.After(deadline) && (pc.until.After(deadline) || int64(len(pc.admitted)) >= pc.quota) {
			pc.mu.Unlock()
			return status.Errorf(codes.DeadlineExceeded, "ratelimit: the server's limit leaves no place before the call's deadline (%s from now)", at.Sub(now).Round(time.Millisecond))
		}
		if pc.changed == nil {
			pc.changed = make(chan struct{})
		}
		changed := pc.changed
		pc.mu.Unlock()
		t := time.NewTimer(at.Sub(now))
		select {
		case <-t.C:
		case <-changed:
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		}
		t.Stop()
	}
}

// done ends a call under way and learns from its header and trailer,
// in one step: a call woken by its end sees it counted.
func (pc *pace) done(header, trailer metadata.MD, err error) {
	quota, window := limitOf(header)
	if quota == 0 {
		quota, window = limitOf(trailer)
	}
	wait := waitOf(trailer, err)
	code := status.Code(err)
	refused := code == codes.ResourceExhausted || code == codes.Unavailable
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.underWay = max(pc.underWay-1, 0)
	if pc.changed != nil {
		close(pc.changed)
		pc.changed = nil
	}
	now := time.Now()
	if quota > 0 {
		pc.quota, pc.window = quota, window
		if int64(len(pc.admitted)) > quota {
			pc.admitted = pc.admitted[int64(len(pc.admitted))-quota:]
		}
	}
	if !refused && pc.quota > 0 {
		pc.admitted = append(pc.admitted, now)
	}
	if wait > 0 {
		if at := now.Add(wait); at.After(pc.until) {
			pc.until = at
		}
	}
}

// waitOf is the wait a refusal asks for: grpc-retry-pushback-ms, else
// its RetryInfo; 0 for none.
func waitOf(trailer metadata.MD, err error) time.Duration {
	if err == nil {
		return 0
	}
	if v := trailer.Get(pushbackKey); len(v) == 1 {
		if ms, e := strconv.ParseInt(v[0], 10, 64); e == nil && ms > 0 && ms <= maxWaitMS {
			return time.Duration(ms) * time.Millisecond
		}
		return 0
	}
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			if w := ri.GetRetryDelay().AsDuration(); w > 0 && w <= maxWaitMS*time.Millisecond {
				return w
			}
		}
	}
	return 0
}

// maxWaitMS bounds a wait a server may ask for: an hour.
const maxWaitMS = 3600 * 1000

// limitOf is the quota and window of the limit named in md's ratelimit
// field, read from the ratelimit-policy item of that name; 0 when md
// names none.
func limitOf(md metadata.MD) (int64, time.Duration) {
	name := itemName(md.Get("ratelimit"))
	if name == "" {
		return 0, 0
	}
	for _, v := range md.Get("ratelimit-policy") {
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if itemName([]string{item}) != name {
				continue
			}
			q, w := param(item, "q"), param(item, "w")
			if q <= 0 || q > maxQuota || w <= 0 || w > maxWindowSeconds {
				return 0, 0
			}
			return q, time.Duration(w) * time.Second
		}
	}
	return 0, 0
}

// The largest limit a client paces by: a server that states more is
// not paced (a quota past it would keep that many times in memory).
const (
	maxQuota         = 100_000
	maxWindowSeconds = 366 * 24 * 3600
)

// itemName is the quoted name that begins the first item of vs, or "".
func itemName(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	v := strings.TrimSpace(vs[0])
	if !strings.HasPrefix(v, `"`) {
		return ""
	}
	end := strings.IndexByte(v[1:], '"')
	if end < 0 {
		return ""
	}
	return v[1 : end+1]
}

// param is the integer parameter key of a structured-field item, or -1.
func param(item, key string) int64 {
	for _, p := range strings.Split(item, ";")[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && k == key {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}
