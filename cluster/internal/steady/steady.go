// Package steady carries the cluster's key-value operations over
// JetStream's leader elections.
//
// The buckets the cluster shares are read from their streams' leaders, and
// writes go to the leaders too. While JetStream elects a stream's leader (a
// cluster just formed, a server lost, a leader moved), a request finds no
// one to answer it, and the server says so at once. Such a request was
// never carried out, so it is safe to send again, write or read; any other
// failure is returned as it came. After [Wait] without an answer, the error
// is a [world.ErrUnavailable] that callers show as 503.
package steady

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/world"
)

// Wait bounds how long one operation waits for a leader. An election
// after a clean start or a leader's step-down takes well under a second;
// after a lost server, JetStream's election time-outs are a few seconds.
const Wait = 5 * time.Second

// pause is the time between attempts.
const pause = 50 * time.Millisecond

// clusterUnavailable is JetStream's error code for a request it cannot
// place while the cluster has no quorum or no leader.
const clusterUnavailable jetstream.ErrorCode = 10008

// Transient reports whether err says no server took the request: no
// responders on the subject, or JetStream saying it has no leader now.
func Transient(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == clusterUnavailable
}

// Do runs op until it succeeds or fails for a reason other than an
// election, for at most [Wait] and never past ctx.
func Do(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(Wait)
	for {
		err := op()
		if !Transient(err) {
			return err
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return world.Wrapf(world.ErrUnavailable, err, "The cluster's shared state has no leader at the moment: try again")
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// KV returns kv with every request-answer operation run through [Do].
// Watchers are left as they are: they resume by themselves.
func KV(kv jetstream.KeyValue) jetstream.KeyValue {
	if s, ok := kv.(steadyKV); ok {
		return s
	}
	return steadyKV{kv}
}

type steadyKV struct{ jetstream.KeyValue }

// do1 runs an operation with one result through [Do].
func do1[T any](ctx context.Context, op func() (T, error)) (T, error) {
	var out T
	err := Do(ctx, func() error {
		var err error
		out, err = op()
		return err
	})
	return out, err
}

func (s steadyKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return do1(ctx, func() (jetstream.KeyValueEntry, error) { return s.KeyValue.Get(ctx, key) })
}

func (s steadyKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	return do1(ctx, func() (jetstream.KeyValueEntry, error) { return s.KeyValue.GetRevision(ctx, key, revision) })
}

func (s steadyKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return do1(ctx, func() (uint64, error) { return s.KeyValue.Put(ctx, key, value) })
}

func (s steadyKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return do1(ctx, func() (uint64, error) { return s.KeyValue.PutString(ctx, key, value) })
}

func (s steadyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return do1(ctx, func() (uint64, error) { return s.KeyValue.Create(ctx, key, value, opts...) })
}

func (s steadyKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	return do1(ctx, func() (uint64, error) { return s.KeyValue.Update(ctx, key, value, revision) })
}

func (s steadyKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return Do(ctx, func() error { return s.KeyValue.Delete(ctx, key, opts...) })
}

func (s steadyKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return Do(ctx, func() error { return s.KeyValue.Purge(ctx, key, opts...) })
}

func (s steadyKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	return do1(ctx, func() ([]string, error) { return s.KeyValue.Keys(ctx, opts...) })
}

func (s steadyKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return do1(ctx, func() (jetstream.KeyLister, error) { return s.KeyValue.ListKeys(ctx, opts...) })
}

func (s steadyKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	return do1(ctx, func() (jetstream.KeyLister, error) { return s.KeyValue.ListKeysFiltered(ctx, filters...) })
}

func (s steadyKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return do1(ctx, func() ([]jetstream.KeyValueEntry, error) { return s.KeyValue.History(ctx, key, opts...) })
}

func (s steadyKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	return do1(ctx, func() (jetstream.KeyValueStatus, error) { return s.KeyValue.Status(ctx) })
}
