package server

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/wire"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestRateLimiterTokenBucket(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	l := NewRateLimiter(60, 3, clock.Now) // one a second, bursts of three
	for i := range 3 {
		if ok, _ := l.Allow("k1"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("k1")
	if ok || wait != time.Second {
		t.Fatalf("fourth request: ok=%v wait=%v, want refused with 1s", ok, wait)
	}
	// Another key has its own bucket.
	if ok, _ := l.Allow("k2"); !ok {
		t.Fatal("another key was refused")
	}
	clock.Add(400 * time.Millisecond)
	if ok, wait := l.Allow("k1"); ok || wait != 600*time.Millisecond {
		t.Fatalf("after 0.4 s: ok=%v wait=%v, want refused with 600ms", ok, wait)
	}
	clock.Add(600 * time.Millisecond)
	if ok, _ := l.Allow("k1"); !ok {
		t.Fatal("refused after a token came back")
	}
	// A long pause refills the bucket up to the burst, not beyond.
	clock.Add(time.Hour)
	for i := range 3 {
		if ok, _ := l.Allow("k1"); !ok {
			t.Fatalf("request %d after a pause refused", i+1)
		}
	}
	if ok, _ := l.Allow("k1"); ok {
		t.Fatal("the bucket grew past its burst")
	}
}

func TestRateLimiterOffAndDefaults(t *testing.T) {
	t.Parallel()
	if l := NewRateLimiter(0, 10, nil); l != nil {
		t.Fatal("a zero rate made a limiter")
	}
	var off *RateLimiter
	for range 1000 {
		if ok, _ := off.Allow("k"); !ok {
			t.Fatal("a nil limiter refused")
		}
	}
	clock := &fakeClock{now: time.Unix(0, 0)}
	l := NewRateLimiter(120, 0, clock.Now) // burst defaults to the rate
	n := 0
	for {
		if ok, _ := l.Allow("k"); !ok {
			break
		}
		n++
	}
	if n != 120 {
		t.Fatalf("default burst = %d, want 120", n)
	}
}

func TestRateLimiterSweepForgetsIdleKeys(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(0, 0)}
	l := NewRateLimiter(60, 1, clock.Now)
	for i := range sweepEvery - 1 {
		l.Allow(string(rune('a'+i%26)) + string(rune(i)))
	}
	clock.Add(2 * time.Second)
	l.Allow("last") // the sweep runs on this call
	l.mu.Lock()
	n := len(l.buckets)
	l.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d buckets kept after the sweep, want 1", n)
	}
}

func TestRateLimitInChain(t *testing.T) {
	t.Parallel()
	c := testChain(t, fakeWorlds{"a": newWorld("a")})
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c.RateLimit = NewRateLimiter(30, 2, clock.Now)
	req := &relayv1.GetDocumentRequest{}
	for i := range 2 {
		if _, err := invoke(t, c, getMethod, "all", req); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	_, err := invoke(t, c, getMethod, "all", req)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third request: %v, want ResourceExhausted", err)
	}
	var reason string
	var delay time.Duration
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			delay = d.GetRetryDelay().AsDuration()
		}
	}
	if reason != wire.ReasonRateLimited || delay != 2*time.Second {
		t.Fatalf("details: reason %q, retry %v; want %q, 2s (%s)", reason, delay, wire.ReasonRateLimited, st.Message())
	}
	// Unauthenticated calls are refused before the limiter and do not
	// spend the key's tokens; another key is not affected.
	if _, err := invoke(t, c, getMethod, "readonly", req); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if _, err := invoke(t, c, getMethod, "", req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}
	// Health checks are never limited.
	for range 5 {
		if _, err := invoke(t, c, "/grpc.health.v1.Health/Check", "", req); err != nil {
			t.Fatalf("health: %v", err)
		}
	}
	clock.Add(2 * time.Second)
	if _, err := invoke(t, c, getMethod, "all", req); err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
}

// BenchmarkRateLimiterAllow measures the limiter's cost per request, with
// every goroutine on its own key as under a load of many clients.
func BenchmarkRateLimiterAllow(b *testing.B) {
	l := NewRateLimiter(1<<30, 0, nil)
	var n atomic.Int32
	b.RunParallel(func(pb *testing.PB) {
		key := "key-" + string(rune('a'+n.Add(1)%26))
		for pb.Next() {
			l.Allow(key)
		}
	})
}

func TestRateLimiterBlockedTakesNothing(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	l := NewRateLimiter(60, 2, clock.Now)
	for range 5 {
		if blocked, _ := l.Blocked("a"); blocked {
			t.Fatal("a fresh address is blocked")
		}
	}
	l.Allow("a")
	if blocked, _ := l.Blocked("a"); blocked {
		t.Fatal("blocked with a token left")
	}
	l.Allow("a")
	blocked, wait := l.Blocked("a")
	if !blocked || wait != time.Second {
		t.Fatalf("empty bucket: blocked=%v wait=%v, want true 1s", blocked, wait)
	}
	clock.Add(time.Second)
	if blocked, _ := l.Blocked("a"); blocked {
		t.Fatal("still blocked once a token came back")
	}
	var off *RateLimiter
	if blocked, _ := off.Blocked("a"); blocked {
		t.Fatal("a nil limiter blocks")
	}
}

// TestRateLimiterShared checks the cluster's approximation: with three live
// nodes each node allows a third of the rate and of the burst, and goes
// back to the whole limit when it is alone again.
func TestRateLimiterShared(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	l := NewRateLimiter(60, 6, clock.Now) // one a second, bursts of six
	var nodes atomic.Int64
	nodes.Store(3)
	l.ShareWith(func() int { return int(nodes.Load()) })
	for i := range 2 {
		if ok, _ := l.Allow("k1"); !ok {
			t.Fatalf("request %d of a third of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("k1")
	if ok || wait != 3*time.Second {
		t.Fatalf("third request: %v, wait %v; want refused for 3 s (three tokens at one a second)", ok, wait)
	}
	if blocked, _ := l.Blocked("k1"); !blocked {
		t.Fatal("Blocked = false with an empty share")
	}
	clock.Add(3 * time.Second)
	if ok, _ := l.Allow("k1"); !ok {
		t.Fatal("refused after the share's interval")
	}
	// More nodes than the burst: the bucket still holds one request.
	nodes.Store(10)
	clock.Add(time.Minute)
	if ok, _ := l.Allow("k2"); !ok {
		t.Fatal("first request with ten nodes and a burst of six refused")
	}
	// Alone again: the whole limit.
	nodes.Store(1)
	clock.Add(time.Minute)
	for i := range 6 {
		if ok, _ := l.Allow("k3"); !ok {
			t.Fatalf("request %d of the burst refused on a lone node", i+1)
		}
	}
	if ok, _ := l.Allow("k3"); ok {
		t.Fatal("request over the burst allowed on a lone node")
	}
}
