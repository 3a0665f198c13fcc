package steady

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestFollowWaitsOutASlowStart checks that a follower whose first
// watcher cannot be made in time (JetStream answers the consumer's
// creation too late, as on a loaded machine while the cluster starts)
// tries again and starts, with the current entries loaded, rather than
// failing its node's start.
func TestFollowWaitsOutASlowStart(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	ctx := context.Background()
	if _, err := kv.Put(ctx, "k.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	got := &seen{vals: map[string]string{}}
	calls := 0
	opts := FollowOptions{watch: func(ctx context.Context, kv jetstream.KeyValue, filters []string) (jetstream.KeyWatcher, error) {
		calls++
		if calls <= 2 {
			return nil, fmt.Errorf("create the watcher's consumer: %w", context.DeadlineExceeded)
		}
		return kv.WatchFiltered(ctx, filters)
	}}
	f, err := Follow(ctx, kv, []string{"k.>"}, opts, got.apply)
	if err != nil {
		t.Fatalf("follow after two slow answers: %v", err)
	}
	defer f.Close(time.Second)
	if calls != 3 || got.get("k.a") != "1" {
		t.Fatalf("%d attempts, entries %v; want 3 attempts and k.a=1", calls, got.vals)
	}
}

// TestFollowFailsAtOnceForOtherErrors checks that an error other than a
// late answer ends Follow at once, and that a caller's deadline ends the
// attempts.
func TestFollowFailsAtOnceForOtherErrors(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	calls := 0
	refused := func(context.Context, jetstream.KeyValue, []string) (jetstream.KeyWatcher, error) {
		calls++
		return nil, jetstream.ErrBucketNotFound
	}
	if _, err := Follow(context.Background(), kv, []string{"k.>"}, FollowOptions{watch: refused}, func(jetstream.KeyValueEntry) {}); err == nil || calls != 1 {
		t.Fatalf("a refused watcher: %v after %d attempts, want an error after 1", err, calls)
	}
	slow := func(context.Context, jetstream.KeyValue, []string) (jetstream.KeyWatcher, error) {
		return nil, context.DeadlineExceeded
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	if _, err := Follow(ctx, kv, []string{"k.>"}, FollowOptions{watch: slow}, func(jetstream.KeyValueEntry) {}); err == nil {
		t.Fatal("a watcher that never opens: no error")
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Fatalf("Follow gave up %v after its caller's deadline of 300ms", took)
	}
}
