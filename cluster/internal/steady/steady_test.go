package steady

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/world"
)

// electingKV fails its first reads as a stream without a leader does.
type electingKV struct {
	jetstream.KeyValue
	failures int
	err      error
	calls    int
}

func (k *electingKV) Bucket() string { return "electing" }

func (k *electingKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	k.calls++
	if k.calls <= k.failures {
		return nil, k.err
	}
	return nil, jetstream.ErrKeyNotFound
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("read: %w", nats.ErrNoResponders), true},
		{jetstream.ErrNoStreamResponse, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{jetstream.ErrKeyExists, false},
		{nats.ErrTimeout, false}, // only an attempt that ran out of its own time is sent again
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestKVRetriesThroughAnElection(t *testing.T) {
	kv := &electingKV{failures: 3, err: nats.ErrNoResponders}
	steady := KV(nil, kv)
	if _, err := steady.Get(context.Background(), "k"); !errors.Is(err, jetstream.ErrKeyNotFound) || kv.calls != 4 {
		t.Fatalf("Get = %v after %d calls; want ErrKeyNotFound after 4", err, kv.calls)
	}
	// Other failures come back at once, unchanged.
	kv = &electingKV{failures: 5, err: jetstream.ErrBucketNotFound}
	if _, err := KV(nil, kv).Get(context.Background(), "k"); !errors.Is(err, jetstream.ErrBucketNotFound) || kv.calls != 1 {
		t.Fatalf("Get = %v after %d calls; want ErrBucketNotFound after 1", err, kv.calls)
	}
	if KV(nil, steady) != steady {
		t.Fatal("a steady bucket is wrapped twice")
	}
}

func TestDoGivesUpAsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	calls := 0
	err := Do(ctx, nil, func(context.Context) error { calls++; return nats.ErrNoResponders })
	var werr *world.Error
	if !errors.Is(err, world.ErrUnavailable) || !errors.As(err, &werr) || !errors.Is(werr.Cause, nats.ErrNoResponders) || calls < 2 {
		t.Fatalf("Do = %#v after %d calls; want unavailable, caused by no responders", err, calls)
	}
}

// TestDoSendsAnUnansweredAttemptAgain: a request that the remaining
// copies of a stream hear while none of them leads is never answered; the
// attempt runs out and the request is sent again, and the operation gives
// up as unavailable only at the caller's deadline.
func TestDoSendsAnUnansweredAttemptAgain(t *testing.T) {
	calls := 0
	start := time.Now()
	err := Do(context.Background(), nil, func(attempt context.Context) error {
		calls++
		if calls == 1 {
			<-attempt.Done() // nobody answers
			return attempt.Err()
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("Do = %v after %d calls; want success after 2", err, calls)
	}
	t.Logf("answered after %v", time.Since(start))

	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	calls = 0
	err = Do(ctx, nil, func(attempt context.Context) error {
		calls++
		<-attempt.Done()
		return attempt.Err()
	})
	if !errors.Is(err, world.ErrUnavailable) || calls < 2 {
		t.Fatalf("Do = %v after %d calls; want unavailable after at least 2", err, calls)
	}
	if ctx.Err() == nil {
		t.Fatal("Do gave up before the caller's deadline")
	}
}

// TestDoGivesUpAtOnceWithoutAConnection: a node whose NATS server is gone
// sends nothing again until its deadline, it answers unavailable after the
// first attempt.
func TestDoGivesUpAtOnceWithoutAConnection(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	nc := c.Conn(0)
	c.Servers[0].Shutdown()
	c.Servers[0].WaitForShutdown()
	for deadline := time.Now().Add(30 * time.Second); nc.IsConnected(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connection still says it is connected to a server that shut down")
		}
	}
	calls := 0
	err := Do(context.Background(), nc, func(attempt context.Context) error {
		calls++
		<-attempt.Done()
		return attempt.Err()
	})
	if !errors.Is(err, world.ErrUnavailable) || calls != 1 {
		t.Fatalf("Do = %v after %d calls; want unavailable after 1", err, calls)
	}
}

// replicated starts a cluster of three servers and a bucket kept on all
// three, made steady.
func replicated(t *testing.T) steadyKV {
	t.Helper()
	c := jstest.Start(t, 3)
	js := c.JetStream(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var kv jetstream.KeyValue
	err := Do(ctx, js.Conn(), func(attempt context.Context) error {
		var err error
		kv, err = js.CreateOrUpdateKeyValue(attempt, jetstream.KeyValueConfig{Bucket: "steady_test", Replicas: 3, Storage: jetstream.MemoryStorage})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return KV(js, kv).(steadyKV)
}

// TestAWriteSentAgainIsStoredOnce sends each kind of write a second time
// with the same message id, as an attempt that stored it but whose answer
// was lost is sent again: the second sending is answered with the first
// one's revision and stores nothing, even when the write was conditional
// and its condition no longer holds. A write with a message id of its own
// is judged on its condition.
func TestAWriteSentAgainIsStoredOnce(t *testing.T) {
	t.Parallel()
	kv := replicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := uint64(0)

	first, err := kv.writeAs(ctx, "create-1", "k", []byte("v1"), nil, &zero)
	if err != nil {
		t.Fatal(err)
	}
	again, err := kv.writeAs(ctx, "create-1", "k", []byte("v1"), nil, &zero)
	if err != nil || again != first {
		t.Fatalf("the create sent again = %d, %v; want revision %d", again, err, first)
	}
	if _, err := kv.Create(ctx, "k", []byte("other")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("another create of k = %v; want ErrKeyExists", err)
	}

	updated, err := kv.writeAs(ctx, "update-1", "k", []byte("v2"), nil, &first)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := kv.writeAs(ctx, "update-1", "k", []byte("v2"), nil, &first); err != nil || again != updated {
		t.Fatalf("the update sent again = %d, %v; want revision %d", again, err, updated)
	}
	if _, err := kv.Update(ctx, "k", []byte("v3"), first); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("another update at an old revision = %v; want ErrKeyRevisionMismatch", err)
	}

	if err := DeleteAt(ctx, kv, "k", first); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("a deletion at an old revision = %v; want ErrKeyRevisionMismatch", err)
	}
	if err := DeleteAt(ctx, kv, "k", updated); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// k's entries are its value, its update and the deletion marker at
	// the revision after the update's: the writes sent again added none.
	if got := st.Values(); got != 1 {
		t.Fatalf("bucket holds %d values; want only k's deletion marker (history 1)", got)
	}
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("Get of a deleted key = %v; want ErrKeyNotFound", err)
	}
	hist, err := kv.KeyValue.History(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if last := hist[len(hist)-1]; last.Operation() != jetstream.KeyValueDelete || last.Revision() != updated+1 {
		t.Fatalf("k's last entry = %v at %d; want its deletion at %d", last.Operation(), last.Revision(), updated+1)
	}

	// A deleted key may be created again, a purged one too.
	recreated, err := kv.Create(ctx, "k", []byte("v4"))
	if err != nil || recreated != updated+2 {
		t.Fatalf("create of a deleted key = %d, %v; want revision %d", recreated, err, updated+2)
	}
	if err := kv.Purge(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "k", []byte("v5")); err != nil {
		t.Fatalf("create of a purged key: %v", err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v5" {
		t.Fatalf("Get = %v, %v; want v5", e, err)
	}
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v6")); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v6" {
		t.Fatalf("Get = %v, %v; want v6", e, err)
	}
	if _, err := kv.Put(ctx, "bad key", nil); !errors.Is(err, jetstream.ErrInvalidKey) {
		t.Fatalf("Put of an invalid key = %v; want ErrInvalidKey", err)
	}
}
