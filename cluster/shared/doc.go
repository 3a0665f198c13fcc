// Package shared keeps the state that every relay node of a cluster must
// see alike in JetStream key-value buckets: API keys, stream tickets,
// pairing codes, linked worlds and their connection tokens, key requests
// and pair requests. Each store implements the interface its consumer
// already uses on a single node (keys.Backend, server.TicketStore,
// link.Store, link.RequestStore), so node assembly picks
// SQLite and memory or these, and nothing above notices.
//
// Buckets are replicated min(3, servers) ways. Secrets are never stored,
// only their SHA-256 hashes, as on a single node, with one exception: an
// approved key request or pair request holds the key or pairing code its
// asker fetches, from the approval until it is fetched (at most
// link.RequestTTL), since any node may be the one that hands it over. Entries that expire
// (tickets, pairing codes) live in buckets whose entries JetStream removes
// after a maximum age; each record also carries its own deadline, which is
// what the stores check.
//
// Propagation: a node writes to its bucket and updates its own memory at
// once; the other nodes learn of the change through a watcher (typically
// within milliseconds) and, for API keys, read through to the bucket when
// a presented key is not in memory, so a key created on one node works on
// every node at once and a revoked key is refused everywhere as soon as
// the watchers deliver the revision (tested: well within a second).
// Tickets, pairing codes and tokens are read from their buckets at every
// use.
//
// Presence counts the live nodes, whose number the rate limiters divide
// their limits by (server.RateLimiter.ShareWith). Attach puts all of it,
// and the event bus (package cluster/eventbus), in place for a node; a
// single node that joins an empty cluster brings its keys and linked
// worlds along (KeyStore.Import, LinkStore.Import).
package shared

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/steady"
)

// Options configure the shared stores. The zero value works.
type Options struct {
	// Replicas is how many copies JetStream keeps of each bucket; when 0,
	// three, or one per NATS server the connection knows of when there
	// are fewer.
	Replicas int
	// Clock is the current time; time.Now when nil.
	Clock func() time.Time
	// TicketRenewEvery is how often a stream open with a ticket renews
	// the ticket's deadline; a third of the reconnect window when 0.
	TicketRenewEvery time.Duration
}

func (o Options) now() time.Time {
	if o.Clock == nil {
		return time.Now()
	}
	return o.Clock()
}

// opTimeout bounds each bucket operation a store makes on its own
// (watchers, background renewals), when no caller's context bounds it.
const opTimeout = 5 * time.Second

// stopTimeout bounds each courtesy a store does as it stops (withdrawing
// the node's presence, a last renewal, deleting its watchers' consumers):
// a node whose cluster lost its quorum must still stop in a moment, and
// what it could not do runs out on its own (entries expire, ephemeral
// consumers are removed by the servers).
const stopTimeout = 500 * time.Millisecond

// within runs fn and waits at most d for it to return. An fn still
// running then goes on in the background: it is blocked on a NATS
// request, which ends at the latest when the node closes its connection.
func within(d time.Duration, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// openBucket creates the bucket, or updates its configuration to cfg.
func openBucket(ctx context.Context, js jetstream.JetStream, replicas int, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if replicas <= 0 {
		replicas = max(1, min(3, len(js.Conn().Servers())))
	}
	cfg.Replicas = replicas
	// A cluster that is still forming answers late or has too few
	// servers to place the copies on: ask again, each attempt bounded,
	// until StartWait or the caller's context ends.
	wait, cancel := context.WithTimeout(ctx, StartWait)
	defer cancel()
	for {
		attempt, cancelAttempt := context.WithTimeout(wait, attemptTimeout)
		_, err := js.CreateOrUpdateStream(attempt, leaderReadStream(cfg))
		var kv jetstream.KeyValue
		if err == nil {
			kv, err = js.KeyValue(attempt, cfg.Bucket)
		}
		cancelAttempt()
		if err == nil {
			return steady.KV(js, kv), nil
		}
		select {
		case <-wait.Done():
			return nil, fmt.Errorf("shared: open bucket %s: %w", cfg.Bucket, err)
		case <-time.After(placementRetry):
		}
	}
}

// leaderReadStream is the stream of a key-value bucket whose reads all go
// to the stream's leader: the stream the client library makes for cfg,
// but without direct gets. With direct gets any copy may answer a read,
// and a copy may not have applied a write yet: a token just stored on one
// node would be refused by another, a key just created unknown. The
// leader answers with every acknowledged write.
//
// The stream is made here rather than by the library, because the library
// turns direct gets on whenever it creates or updates a bucket. A bucket
// handle decides how it reads when it is made: a node whose handle was
// made while another node's start had turned direct gets on would read
// from a subject no server answers once they were turned off again.
func leaderReadStream(cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	history := max(int64(cfg.History), 1)
	// The duplicate window is two minutes, or the bucket's age limit when
	// shorter, as the library sets it.
	duplicates := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < duplicates {
		duplicates = cfg.TTL
	}
	return jetstream.StreamConfig{
		Name:              "KV_" + cfg.Bucket,
		Description:       cfg.Description,
		Subjects:          []string{"$KV." + cfg.Bucket + ".>"},
		MaxMsgsPerSubject: history,
		MaxBytes:          -1,
		MaxAge:            cfg.TTL,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           cfg.Storage,
		Replicas:          max(cfg.Replicas, 1),
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        duplicates,
		Discard:           jetstream.DiscardNew,
		AllowDirect:       false,
	}
}

// StartWait bounds how long a store waits for JetStream to create its
// bucket at start, as the cluster's own start does.
const StartWait = 60 * time.Second

// attemptTimeout bounds one attempt to open a bucket. A request to a
// stream without a leader (JetStream elects one again seconds after the
// node that led it was killed) is never answered: a short attempt asks
// again soon after the election, so a restarting node waits for the
// election and not for an attempt's time-out on top of it. Asking again
// is harmless: opening a bucket that exists changes nothing.
const attemptTimeout = 500 * time.Millisecond

// placementRetry is how often a bucket is asked for again while the
// cluster has too few servers for its copies.
const placementRetry = 200 * time.Millisecond

// removeFile removes a file written by a step that failed later.
func removeFile(path string) error { return os.Remove(path) }
