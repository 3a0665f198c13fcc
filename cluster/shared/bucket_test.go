package shared

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
)

// TestBucketsReadFromTheLeaderWhateverTheOrder opens one bucket many times
// at once, over a bucket an earlier relay made with the client library
// (direct gets on), and expects the stream to be left without direct gets
// and every handle to read what any other wrote. A handle made while
// direct gets were on reads from a subject that no server answers once
// they are off again; when nodes starting together turned them on and off,
// one node could answer 500 for the shared state until it restarted.
func TestBucketsReadFromTheLeaderWhateverTheOrder(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := jetstream.KeyValueConfig{Bucket: "order_test", History: 1, TTL: time.Minute, Storage: jetstream.MemoryStorage}
	// The client library's own bucket, with direct gets, as relays
	// before this one made them.
	if _, err := c.JetStream(0).CreateOrUpdateKeyValue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	const opens = 6
	handles := make([]jetstream.KeyValue, opens)
	errs := make([]error, opens)
	var wg sync.WaitGroup
	for i := range opens {
		wg.Go(func() { handles[i], errs[i] = openBucket(ctx, c.JetStream(0), 1, cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	stream, err := c.JetStream(0).Stream(ctx, "KV_order_test")
	if err != nil {
		t.Fatal(err)
	}
	if got := stream.CachedInfo().Config; got.AllowDirect || got.MaxAge != time.Minute || got.MaxMsgsPerSubject != 1 || got.Discard != jetstream.DiscardNew {
		t.Fatalf("stream config: %+v", got)
	}
	for i, h := range handles {
		key := fmt.Sprintf("k%d", i)
		if _, err := h.Put(ctx, key, []byte(key)); err != nil {
			t.Fatal(err)
		}
		for j, other := range handles {
			e, err := other.Get(ctx, key)
			if err != nil || string(e.Value()) != key {
				t.Fatalf("handle %d reading %s written by handle %d: %v", j, key, i, err)
			}
		}
	}
}
