package shared

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PresenceBucket is the bucket where each node says it is alive.
const PresenceBucket = "relay_presence"

// Defaults of a Presence.
const (
	// DefaultPresenceEvery is how often a node renews its entry.
	DefaultPresenceEvery = 2 * time.Second
	// DefaultPresenceTimeout is how long a node counts as alive after its
	// last renewal was seen.
	DefaultPresenceTimeout = 6 * time.Second
)

// Presence counts the live nodes of a cluster, for the limits they share
// (see server.RateLimiter.ShareWith): each node renews an entry of its own
// in a bucket, and every node watches the bucket and counts the nodes it
// heard from lately. The count is local and cheap to read.
type Presence struct {
	kv      jetstream.KeyValue
	name    string
	timeout time.Duration

	mu   sync.Mutex
	seen map[string]time.Time // node name → when its renewal was seen

	stop context.CancelFunc
	done sync.WaitGroup
}

// PresenceOptions tune a Presence; the zero value takes the defaults.
type PresenceOptions struct {
	Every, Timeout time.Duration
}

// StartPresence announces the node name and starts counting the nodes.
// Stop withdraws it.
func StartPresence(ctx context.Context, js jetstream.JetStream, name string, opts Options, popts PresenceOptions) (*Presence, error) {
	if !validSubjectToken(name) {
		return nil, fmt.Errorf("shared: presence: node name %q must be letters, digits, '-' and '_'", name)
	}
	if popts.Every <= 0 {
		popts.Every = DefaultPresenceEvery
	}
	if popts.Timeout <= 0 {
		popts.Timeout = DefaultPresenceTimeout
	}
	kv, err := openBucket(ctx, js, opts.Replicas, jetstream.KeyValueConfig{
		Bucket:      PresenceBucket,
		Description: "relay nodes alive",
		History:     1,
		TTL:         popts.Timeout,
		Storage:     jetstream.MemoryStorage,
	})
	if err != nil {
		return nil, err
	}
	p := &Presence{kv: kv, name: name, timeout: popts.Timeout, seen: map[string]time.Time{}}
	// The bucket's stream, just made, may not answer its first write at
	// once: ask again, each attempt bounded, until StartWait (a second
	// write of the node's entry changes nothing).
	wait, cancelWait := context.WithTimeout(ctx, StartWait)
	defer cancelWait()
	for {
		attempt, cancelAttempt := context.WithTimeout(wait, time.Second)
		_, err := kv.PutString(attempt, "n."+name, time.Now().UTC().Format(time.RFC3339Nano))
		cancelAttempt()
		if err == nil {
			break
		}
		select {
		case <-wait.Done():
			return nil, fmt.Errorf("shared: presence: %w", err)
		case <-time.After(placementRetry):
		}
	}
	wctx, stop := context.WithCancel(context.Background())
	p.stop = stop
	w, err := kv.Watch(wctx, "n.>")
	if err != nil {
		stop()
		return nil, fmt.Errorf("shared: presence: %w", err)
	}
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			node := strings.TrimPrefix(e.Key(), "n.")
			p.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				// When this node saw the renewal, by its own clock: the
				// nodes' clocks need not agree. A node that died just
				// before this one started is counted for one time-out
				// too many, which only makes the shared limits stricter.
				p.seen[node] = time.Now()
			} else {
				delete(p.seen, node)
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		defer p.done.Done()
		defer w.Stop()
		t := time.NewTicker(popts.Every)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(wctx, opTimeout)
				_, _ = kv.PutString(rctx, "n."+name, time.Now().UTC().Format(time.RFC3339Nano))
				cancel()
			}
		}
	}()
	return p, nil
}

// Count returns how many nodes renewed their entry within the time-out,
// this one included; at least one.
func (p *Presence) Count() int {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for node, at := range p.seen {
		if node == p.name || now.Sub(at) < p.timeout {
			n++
		}
	}
	return max(n, 1)
}

// Stop stops renewing and counting, and withdraws the node's entry so that
// the others stop counting it at once. Withdrawing is a courtesy (the
// entry expires by itself), so a node cut off from NATS stops all the same.
func (p *Presence) Stop() error {
	// One stopTimeout for the whole stop.
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	p.stop()
	within(stopTimeout, p.done.Wait)
	defer cancel()
	_ = p.kv.Delete(ctx, "n."+p.name)
	return nil
}
