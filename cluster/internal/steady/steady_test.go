package steady

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/world"
)

// electingKV fails its first calls as a stream without a leader does.
type electingKV struct {
	jetstream.KeyValue
	failures int
	err      error
	calls    int
}

func (k *electingKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	k.calls++
	if k.calls <= k.failures {
		return nil, k.err
	}
	return nil, jetstream.ErrKeyNotFound
}

func (k *electingKV) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	k.calls++
	if k.calls <= k.failures {
		return 0, k.err
	}
	return 7, nil
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
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{jetstream.ErrKeyExists, false},
		{nats.ErrTimeout, false}, // a write that timed out may have been made
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
	steady := KV(kv)
	rev, err := steady.Create(context.Background(), "k", []byte("v"))
	if err != nil || rev != 7 || kv.calls != 4 {
		t.Fatalf("Create = %d, %v after %d calls; want 7 after 4", rev, err, kv.calls)
	}
	// Other failures come back at once, unchanged.
	kv = &electingKV{failures: 5, err: jetstream.ErrKeyExists}
	if _, err := KV(kv).Create(context.Background(), "k", nil); !errors.Is(err, jetstream.ErrKeyExists) || kv.calls != 1 {
		t.Fatalf("Create = %v after %d calls; want ErrKeyExists after 1", err, kv.calls)
	}
	kv = &electingKV{failures: 1, err: nats.ErrNoResponders}
	if _, err := KV(kv).Get(context.Background(), "k"); !errors.Is(err, jetstream.ErrKeyNotFound) || kv.calls != 2 {
		t.Fatalf("Get = %v after %d calls; want ErrKeyNotFound after 2", err, kv.calls)
	}
	if KV(steady) != steady {
		t.Fatal("a steady bucket is wrapped twice")
	}
}

func TestDoGivesUpAsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	calls := 0
	err := Do(ctx, func() error { calls++; return nats.ErrNoResponders })
	var werr *world.Error
	if !errors.Is(err, world.ErrUnavailable) || !errors.As(err, &werr) || !errors.Is(werr.Cause, nats.ErrNoResponders) || calls < 2 {
		t.Fatalf("Do = %#v after %d calls; want unavailable, caused by no responders", err, calls)
	}
}
