package steady

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
)

// silenced forwards a watcher's current entries and its end-of-load
// marker, then nothing: a watcher whose consumer the client library gave
// up recreating.
type silenced struct {
	jetstream.KeyWatcher
	out chan jetstream.KeyValueEntry
}

func silence(w jetstream.KeyWatcher) *silenced {
	s := &silenced{KeyWatcher: w, out: make(chan jetstream.KeyValueEntry, 64)}
	go func() {
		for e := range w.Updates() {
			s.out <- e
			if e == nil {
				return
			}
		}
	}()
	return s
}

func (s *silenced) Updates() <-chan jetstream.KeyValueEntry { return s.out }

// seen records what a follower applied, by key.
type seen struct {
	mu   sync.Mutex
	vals map[string]string
}

func (s *seen) apply(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vals[e.Key()] = string(e.Value())
}

func (s *seen) get(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vals[key]
}

func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	c := jstest.Start(t, 1)
	kv, err := c.JetStream(0).CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "follow_test", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return KV(c.JetStream(0), kv)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowerReplacesASilentWatcher gives a follower a watcher that goes
// silent after loading, and expects a later change to arrive anyway,
// through a replacement.
func TestFollowerReplacesASilentWatcher(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	ctx := context.Background()
	if _, err := kv.Put(ctx, "k.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	got := &seen{vals: map[string]string{}}
	calls := 0
	opts := FollowOptions{Beat: 50 * time.Millisecond, Stale: 300 * time.Millisecond,
		watch: func(ctx context.Context, kv jetstream.KeyValue, filters []string) (jetstream.KeyWatcher, error) {
			calls++
			w, err := kv.WatchFiltered(ctx, filters)
			if err != nil || calls > 1 {
				return w, err
			}
			return silence(w), nil
		}}
	f, err := Follow(ctx, kv, []string{"k.>"}, opts, got.apply)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(time.Second)
	if got.get("k.a") != "1" {
		t.Fatalf("current entry not loaded: %v", got.vals)
	}
	if _, err := kv.Put(ctx, "k.a", []byte("2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change through a new watcher", func() bool { return got.get("k.a") == "2" })
	if f.Replaced() < 1 {
		t.Fatalf("the change arrived without a replacement: %d", f.Replaced())
	}
	if got.get(BeatKey) != "" {
		t.Fatal("beats reached the caller")
	}
}

// TestFollowerKeepsAWorkingWatcher checks that beats coming back keep the
// watcher in place.
func TestFollowerKeepsAWorkingWatcher(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	ctx := context.Background()
	got := &seen{vals: map[string]string{}}
	f, err := Follow(ctx, kv, []string{"k.>"}, FollowOptions{Beat: 50 * time.Millisecond, Stale: 300 * time.Millisecond}, got.apply)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(time.Second)
	for i := range 10 {
		v := string(rune('0' + i))
		if _, err := kv.Put(ctx, "k.b", []byte(v)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "change "+v, func() bool { return got.get("k.b") == v })
		time.Sleep(60 * time.Millisecond)
	}
	if n := f.Replaced(); n != 0 {
		t.Fatalf("a working watcher was replaced %d times", n)
	}
}

// TestFollowerOpensAfterAFailedWatch gives a follower a first watcher that
// fails to open, as one whose consumer a loaded or leaderless server did
// not make in time, and expects Follow to open another and load the
// current entries.
func TestFollowerOpensAfterAFailedWatch(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	ctx := context.Background()
	if _, err := kv.Put(ctx, "k.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	got := &seen{vals: map[string]string{}}
	calls := 0
	opts := FollowOptions{Beat: 50 * time.Millisecond, Stale: 300 * time.Millisecond,
		watch: func(ctx context.Context, kv jetstream.KeyValue, filters []string) (jetstream.KeyWatcher, error) {
			calls++
			if calls == 1 {
				return nil, context.DeadlineExceeded
			}
			return kv.WatchFiltered(ctx, filters)
		}}
	f, err := Follow(ctx, kv, []string{"k.>"}, opts, got.apply)
	if err != nil {
		t.Fatalf("Follow after one failed watch: %v", err)
	}
	defer f.Close(time.Second)
	if got.get("k.a") != "1" || calls != 2 {
		t.Fatalf("after one failed watch: entries %v, watches opened %d", got.vals, calls)
	}
}
