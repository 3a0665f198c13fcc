package shared

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/eventbus"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/world/events"
)

// AttachConfig is what a node of a cluster gives Attach.
type AttachConfig struct {
	// NodeName names the node among the live nodes (letters, digits, '-'
	// and '_').
	NodeName string
	// Replicas is how many copies JetStream keeps of the shared state and
	// the events; min(3, servers) when 0.
	Replicas int
	// Hub is the node's event hub: it publishes the events of the worlds
	// the node hosts and is fed those of other nodes' worlds.
	Hub *events.Hub
	// RingSize is the hub's ring size (--event-ring-size), which the
	// events stream keeps per world too.
	RingSize int
	// RingBytes is the hub's byte budget per world (--event-ring-bytes),
	// which the events stream keeps per world too.
	RingBytes int64
	// Log receives the event bus's warnings.
	Log *slog.Logger
}

// Attached is a node's part of the cluster's shared state: the stores
// node assembly uses instead of the single node's, and the event bus.
type Attached struct {
	// Keys replaces the SQLite key store (keys.Backend): give it to
	// server.Config.Keys and use it for the admin key's bootstrap.
	Keys *KeyStore
	// Tickets is server.Config.TicketStore.
	Tickets *TicketStore
	// Links is link.Config.Store.
	Links *LinkStore
	// Requests is link.Config.Requests.
	Requests *RequestStore
	// Signin is signin.Config.KV: passwords, console sessions, invites.
	Signin *SigninStore
	// Presence counts the live nodes.
	Presence *Presence
	// Streams shares the accounts' open event streams among the nodes
	// (server.Config.StreamTally); give it the server's counts with
	// SetSource.
	Streams *StreamTally
	// Events carries the worlds' events between the nodes; a world hosted
	// elsewhere serves its streams here with Events.Events(clientID).
	Events *eventbus.Bus

	// stopWatching stops the watcher of DisconnectUnpaired.
	stopWatching func()
	// js and replicas open the stores a node opens later (OpenAudit).
	js       jetstream.JetStream
	replicas int
}

// JetStream is the cluster's JetStream the shared state lives in.
func (a *Attached) JetStream() jetstream.JetStream { return a.js }

// Replicas is the number of copies the shared state was opened with (0:
// the default).
func (a *Attached) Replicas() int { return a.replicas }

// DisconnectUnpaired makes the node close the socket of a linked world it
// holds when any node unpairs the world: disconnect is called with its
// clientId (give it the link hub's Disconnect).
func (a *Attached) DisconnectUnpaired(ctx context.Context, disconnect func(clientID string)) error {
	stop, err := a.Links.WatchUnpaired(ctx, disconnect)
	if err != nil {
		return err
	}
	a.stopWatching = stop
	return nil
}

// Attach opens the cluster's shared stores over js, announces the node and
// starts the event bus on the hub. On a single node with clustering off, none of this
// runs: node assembly keeps SQLite and memory.
func Attach(ctx context.Context, js jetstream.JetStream, cfg AttachConfig) (a *Attached, err error) {
	opts := Options{Replicas: cfg.Replicas}
	a = &Attached{js: js, replicas: cfg.Replicas}
	defer func() {
		if err != nil {
			_ = a.Close()
			a = nil
		}
	}()
	// The stores open one after the other: a bucket's stream just made
	// may take a moment to answer its first writes and watchers, and each
	// store's start gives the others that moment.
	if a.Keys, err = OpenKeys(ctx, js, opts); err != nil {
		return a, err
	}
	if a.Tickets, err = OpenTickets(ctx, js, opts); err != nil {
		return a, err
	}
	if a.Links, err = OpenLinks(ctx, js, opts); err != nil {
		return a, err
	}
	if a.Requests, err = OpenRequests(ctx, js, opts); err != nil {
		return a, err
	}
	if a.Signin, err = OpenSignin(ctx, js, opts); err != nil {
		return a, err
	}
	if a.Presence, err = StartPresence(ctx, js, cfg.NodeName, opts, PresenceOptions{}); err != nil {
		return a, err
	}
	if a.Streams, err = StartStreamTally(ctx, js, cfg.NodeName, opts); err != nil {
		return a, err
	}
	if cfg.Hub != nil {
		if a.Events, err = eventbus.New(ctx, js, cfg.Hub, eventbus.Options{Replicas: cfg.Replicas, RingSize: cfg.RingSize, RingBytes: cfg.RingBytes, Log: cfg.Log}); err != nil {
			return a, err
		}
	}
	return a, nil
}

// ShareLimits makes each of the node's rate limiters (per key, per
// address) take its share of the live nodes (see
// server.RateLimiter.ShareWith); nil ones are skipped.
func (a *Attached) ShareLimits(limiters ...*server.RateLimiter) {
	for _, l := range limiters {
		l.ShareWith(a.Presence.Count)
	}
}

// Close stops the event bus, withdraws the node and stops watching the
// keys and the linked worlds. Call it before closing the NATS connection.
func (a *Attached) Close() error {
	// The parts stop side by side: each may wait up to stopTimeout for a
	// cluster that does not answer, and the node's stop should not add
	// those waits up.
	var wg sync.WaitGroup
	var presenceErr, keysErr error
	if a.stopWatching != nil {
		wg.Go(a.stopWatching)
	}
	if a.Events != nil {
		wg.Go(a.Events.Close)
	}
	if a.Presence != nil {
		wg.Go(func() { presenceErr = a.Presence.Stop() })
	}
	if a.Streams != nil {
		wg.Go(a.Streams.Stop)
	}
	if a.Keys != nil {
		wg.Go(func() { keysErr = a.Keys.Close() })
	}
	if a.Links != nil {
		wg.Go(a.Links.Close)
	}
	wg.Wait()
	return errors.Join(presenceErr, keysErr)
}
