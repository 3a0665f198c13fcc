package shared

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/steady"
)

// StreamsBucket is the bucket where each node tells how many event
// streams each account has open on it.
const StreamsBucket = "relay_streams"

// streamTallyDelay gathers the changes of a burst of streams opening or
// closing into one write of the node's entry.
const streamTallyDelay = 20 * time.Millisecond

// StreamTally shares the accounts' open event streams among the nodes
// (server.StreamTally): each node writes its counts in an entry of its
// own, "n.<node>", soon after they change and again every
// DefaultPresenceEvery, and every node follows the bucket and keeps the
// other nodes' latest counts in memory. A node not heard from for
// DefaultPresenceTimeout counts for nothing, as for Presence.
//
// Two nodes opening an account's streams at the same moment may together
// pass its quota by what they open before hearing from each other (about
// streamTallyDelay plus a write's round trip); the check of a new stream
// reads memory only.
type StreamTally struct {
	kv      jetstream.KeyValue
	name    string
	timeout time.Duration

	mu     sync.Mutex
	others map[string]nodeStreams // node name → its latest counts
	source func() map[string]int64

	wake     chan struct{}
	stop     context.CancelFunc
	follower *steady.Follower
	done     sync.WaitGroup
}

// nodeStreams is a node's counts, as seen at some time by this node's
// clock.
type nodeStreams struct {
	counts map[string]int64
	seen   time.Time
}

// StartStreamTally opens the bucket, follows it and starts publishing the
// node's counts, which it reads with the function given to SetSource
// (none until then). Stop withdraws the node's entry.
func StartStreamTally(ctx context.Context, js jetstream.JetStream, name string, opts Options) (*StreamTally, error) {
	if !validSubjectToken(name) {
		return nil, fmt.Errorf("shared: stream tally: node name %q must be letters, digits, '-' and '_'", name)
	}
	kv, err := openBucket(ctx, js, opts.Replicas, jetstream.KeyValueConfig{
		Bucket:      StreamsBucket,
		Description: "relay open event streams per account, per node",
		History:     1,
		TTL:         DefaultPresenceTimeout,
		Storage:     jetstream.MemoryStorage,
	})
	if err != nil {
		return nil, err
	}
	t := &StreamTally{kv: kv, name: name, timeout: DefaultPresenceTimeout, others: map[string]nodeStreams{}, wake: make(chan struct{}, 1)}
	t.follower, err = steady.Follow(ctx, kv, []string{"n.>"}, steady.FollowOptions{}, t.apply)
	if err != nil {
		return nil, fmt.Errorf("shared: stream tally: %w", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	t.stop = stop
	t.done.Add(1)
	go t.publish(wctx)
	return t, nil
}

// apply records a node's entry.
func (t *StreamTally) apply(e jetstream.KeyValueEntry) {
	node := strings.TrimPrefix(e.Key(), "n.")
	if node == t.name {
		return
	}
	var counts map[string]int64
	if e.Operation() == jetstream.KeyValuePut {
		if err := json.Unmarshal(e.Value(), &counts); err != nil {
			counts = nil
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(t.others, node)
		return
	}
	t.others[node] = nodeStreams{counts: counts, seen: time.Now()}
}

// SetSource gives the tally this node's counts (server.Server.OpenStreams).
func (t *StreamTally) SetSource(counts func() map[string]int64) {
	t.mu.Lock()
	t.source = counts
	t.mu.Unlock()
	t.Changed()
}

// Elsewhere implements server.StreamTally: the account's streams on the
// other nodes heard from within the time-out.
func (t *StreamTally) Elsewhere(account string) int64 {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, o := range t.others {
		if now.Sub(o.seen) < t.timeout {
			n += o.counts[account]
		}
	}
	return n
}

// Changed implements server.StreamTally: the node's entry is written
// again soon.
func (t *StreamTally) Changed() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// publish writes the node's entry after each change (gathering a burst
// of them) and every DefaultPresenceEvery, until ctx ends.
func (t *StreamTally) publish(ctx context.Context) {
	defer t.done.Done()
	tick := time.NewTicker(DefaultPresenceEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
			select {
			case <-ctx.Done():
				return
			case <-time.After(streamTallyDelay):
			}
		case <-tick.C:
		}
		t.mu.Lock()
		source := t.source
		t.mu.Unlock()
		counts := map[string]int64{}
		if source != nil {
			counts = source()
		}
		data, _ := json.Marshal(counts)
		wctx, cancel := context.WithTimeout(ctx, opTimeout)
		_, _ = t.kv.Put(wctx, "n."+t.name, data)
		cancel()
	}
}

// Stop stops publishing and following, and withdraws the node's entry so
// that the others stop counting its streams at once.
func (t *StreamTally) Stop() {
	t.stop()
	within(stopTimeout, t.done.Wait)
	t.follower.Close(stopTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = t.kv.Delete(ctx, "n."+t.name)
}
