package server

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tabletop-relay/relay/wire"
)

// RateLimiter limits the requests of each API key with a token bucket: a
// key may spend up to Burst requests at once, and its bucket refills at
// PerMinute tokens a minute. A unary call takes one token; an event stream
// takes one when it is opened, however long it then stays open.
//
// In a cluster the limits hold across the nodes approximately: each node
// takes the limiter's share of the live nodes (see [RateLimiter.ShareWith])
// and a request then costs as many tokens as there are nodes, so each node
// allows 1/N of the rate and of the burst. With a load balancer spreading
// a key's requests over the nodes, the key gets about its limit in all; a
// key whose requests all reach one node gets 1/N of it.
//
// A nil *RateLimiter allows everything.
type RateLimiter struct {
	perMinute int
	burst     float64
	perToken  time.Duration // the time one token takes to come back
	now       func() time.Time
	// nodes, when set, counts the live nodes that share the limit.
	nodes atomic.Pointer[func() int]

	mu      sync.Mutex
	buckets map[string]*bucket
	calls   int // since the last sweep of idle buckets

	// refused counts the refusals: Allow's false answers and Blocked's
	// true ones (for the metrics endpoint).
	refused atomic.Uint64
}

// Refused counts the requests the limiter refused since it was made (0 for
// a nil limiter).
func (l *RateLimiter) Refused() uint64 {
	if l == nil {
		return 0
	}
	return l.refused.Load()
}

// bucket is one key's tokens as of last.
type bucket struct {
	tokens float64
	last   time.Time
}

// sweepEvery is how many calls pass between sweeps that forget the buckets
// of keys that have been idle long enough to be full again.
const sweepEvery = 4096

// NewRateLimiter returns a limiter allowing perMinute requests a minute per
// key, with bursts of up to burst requests (perMinute when burst <= 0). It
// returns nil, which allows everything, when perMinute <= 0. now is the
// clock (time.Now when nil).
func NewRateLimiter(perMinute, burst int, now func() time.Time) *RateLimiter {
	if perMinute <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = perMinute
	}
	if now == nil {
		now = time.Now
	}
	return &RateLimiter{
		perMinute: perMinute,
		burst:     float64(burst),
		perToken:  time.Minute / time.Duration(perMinute),
		now:       now,
		buckets:   map[string]*bucket{},
	}
}

// ShareWith makes the limiter one of the nodes of a cluster that share
// its limits: nodes counts the live nodes (itself included) each time a
// request is judged, and a request costs that many tokens. A count below
// one counts as one. It must be cheap: it runs on every request.
func (l *RateLimiter) ShareWith(nodes func() int) {
	if l != nil {
		l.nodes.Store(&nodes)
	}
}

// cost is the tokens one request takes and the capacity of a bucket: one
// and the burst on a single node; the number of live nodes in a cluster,
// in a bucket large enough to ever hold that many.
func (l *RateLimiter) cost() (cost, capacity float64) {
	f := l.nodes.Load()
	if f == nil {
		return 1, l.burst
	}
	n := float64(max((*f)(), 1))
	return n, math.Max(l.burst, n)
}

// Allow takes a token from the key's bucket. When there is none it returns
// false and how long until there is one.
func (l *RateLimiter) Allow(keyID string) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	cost, capacity := l.cost()
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.calls >= sweepEvery {
		l.calls = 0
		l.sweep(now, capacity)
	}
	b := l.buckets[keyID]
	if b == nil {
		b = &bucket{tokens: capacity, last: now}
		l.buckets[keyID] = b
	}
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = math.Min(capacity, b.tokens+float64(elapsed)/float64(l.perToken))
		b.last = now
	}
	if b.tokens >= cost {
		b.tokens -= cost
		return true, 0
	}
	wait := time.Duration((cost - b.tokens) * float64(l.perToken))
	l.refused.Add(1)
	return false, wait
}

// Blocked reports, without taking a token, whether the key's bucket is
// empty, and how long until it has a token again. Callers that count only
// failures use it to refuse a blocked caller before doing any work for it.
func (l *RateLimiter) Blocked(keyID string) (bool, time.Duration) {
	if l == nil {
		return false, 0
	}
	cost, capacity := l.cost()
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[keyID]
	if b == nil {
		return false, 0
	}
	tokens := math.Min(capacity, b.tokens+float64(now.Sub(b.last))/float64(l.perToken))
	if tokens >= cost {
		return false, 0
	}
	l.refused.Add(1)
	return true, time.Duration((cost - tokens) * float64(l.perToken))
}

// sweep forgets buckets that would be full (hold capacity) by now: a
// fresh bucket is the same. l.mu must be held.
func (l *RateLimiter) sweep(now time.Time, capacity float64) {
	for id, b := range l.buckets {
		if b.tokens+float64(now.Sub(b.last))/float64(l.perToken) >= capacity {
			delete(l.buckets, id)
		}
	}
}

// rateLimited is the refusal of a request over the limit (see
// retryLater).
func (l *RateLimiter) rateLimited(wait time.Duration) error {
	return retryLater(wait, func(seconds int) string {
		return fmt.Sprintf("Rate limit exceeded: this API key may make %d requests per minute; retry in %d s", l.perMinute, seconds)
	})
}

// retryLater is a refusal to come back after wait: ResourceExhausted with
// the RATE_LIMITED reason (429 over REST) and a RetryInfo detail (the
// gateway's Retry-After header). message builds the text from the wait in
// whole seconds (at least one).
func retryLater(wait time.Duration, message func(seconds int) string) error {
	seconds := max(int(math.Ceil(wait.Seconds())), 1)
	st := status.New(codes.ResourceExhausted, message(seconds))
	if detailed, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: wire.ReasonRateLimited, Domain: wire.ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(seconds) * time.Second)},
	); err == nil {
		st = detailed
	}
	return st.Err()
}

// rateLimit is the chain's step after authentication: the authenticated key
// spends a token. Public methods (health, reflection) have no key and are
// not limited.
func (c *Chain) rateLimit(_ context.Context, call *Call, _ any) error {
	if c.RateLimit == nil || isPublic(call.Method) || call.forwarded {
		// A forwarded call spent its token on the edge node.
		return nil
	}
	if ok, wait := c.RateLimit.Allow(call.Key.ID); !ok {
		return c.RateLimit.rateLimited(wait)
	}
	return nil
}
