package node

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/shared"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// SharedState makes a node one of the nodes of a cluster (Config.Shared,
// or the cluster it joins with Config.Cluster):
// its API keys, stream tickets, pairing codes, linked worlds and their
// connection tokens live in the cluster's JetStream key-value buckets
// instead of relay.db and memory, its rate limits are shared with the live
// nodes, and the events of the worlds it hosts go to the other nodes
// (package cluster/shared, whose Attach does this). A node that joins a
// cluster (Config.Cluster) gets it from the cluster's NATS connection;
// tests may give it directly. A node without it is one node alone,
// exactly as before.
type SharedState struct {
	// JetStream is the cluster's JetStream, over the node's connection.
	JetStream jetstream.JetStream
	// NodeName names the node among the live nodes.
	NodeName string
	// Replicas is how many copies JetStream keeps; min(3, servers) when 0.
	Replicas int
}

// attachShared attaches the node to the cluster's shared state. The keys
// of relay.db come along when the cluster has none yet (the first node to
// join brings its own); local is closed either way, since the node uses
// the cluster's keys from now on.
func attachShared(ctx context.Context, st *SharedState, hub *events.Hub, ringSize int, ringBytes int64, local *keys.Store, log *slog.Logger) (*shared.Attached, error) {
	defer local.Close()
	a, err := shared.Attach(ctx, st.JetStream, shared.AttachConfig{
		NodeName:  st.NodeName,
		Replicas:  st.Replicas,
		Hub:       hub,
		RingSize:  ringSize,
		RingBytes: ringBytes,
		Log:       log,
	})
	if err != nil {
		return nil, fmt.Errorf("attach to the cluster's shared state: %w", err)
	}
	exported, err := local.Export(ctx)
	if err == nil {
		var n int
		n, err = a.Keys.Import(ctx, exported)
		switch {
		case n > 0:
			log.Info("brought this node's API keys into the cluster", "keys", n)
		case err == nil:
			// After a restart the keys this node brought are the
			// cluster's; only the others are worth a warning.
			missing := 0
			for _, e := range exported {
				if _, gerr := a.Keys.Get(ctx, e.Key.ID); gerr != nil {
					missing++
				}
			}
			if missing > 0 {
				log.Warn("some of this node's own API keys are not used: the cluster had keys already, and the node uses those", "keys", missing)
			}
		}
	}
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("bring this node's API keys into the cluster: %w", err)
	}
	return a, nil
}

// Shared is the node's part of the cluster's shared state, or nil for a
// node alone. Its Events serves the event streams of worlds hosted by
// other nodes: Events.Events(clientID) is the world.Events of an embedded
// world hosted elsewhere, Events.LinkedEvents(clientID) that of a linked
// world connected elsewhere.
func (r *Node) Shared() *shared.Attached { return r.shared }

// remoteEvents returns how the node serves the event streams of a world
// another node hosts: through the cluster's event bus, by the world's
// kind; nil for a node without the bus, whose registry then refuses such
// streams.
func (r *Node) remoteEvents() func(clientID, kind string) world.Events {
	if r.shared == nil || r.shared.Events == nil {
		return nil
	}
	bus := r.shared.Events
	return func(clientID, kind string) world.Events {
		if kind == world.KindLinked {
			return bus.LinkedEvents(clientID)
		}
		return bus.Events(clientID)
	}
}

// importLinks brings the linked worlds of relay.db, with their tokens, into
// the cluster when it has none yet (the first node to join brings its
// own), so that their tabletops keep their clientIds and tokens.
func importLinks(ctx context.Context, a *shared.Attached, local *link.SQLiteStore, log *slog.Logger) error {
	exported, err := local.Export(ctx)
	if err != nil {
		return err
	}
	n, err := a.Links.Import(ctx, exported)
	switch {
	case n > 0:
		log.Info("brought this node's linked worlds into the cluster", "worlds", n)
	case err == nil:
		missing := 0
		for _, p := range exported {
			if _, werr := a.Links.World(ctx, p.World.ClientID); werr != nil {
				missing++
			}
		}
		if missing > 0 {
			log.Warn("some of this node's own linked worlds are not used: the cluster had linked worlds already; pair them again", "worlds", missing)
		}
	}
	return err
}

// sharedStores returns the stores of the linked worlds and of the stream
// tickets: relay.db's and memory (nil) for a node alone; in a cluster the
// cluster's, after the node's linked worlds came along (importLinks), the
// limiters took their share of the live nodes and the linked worlds'
// events were connected to the other nodes (their numbering continues
// across nodes, their subscribers follow them wherever their socket is,
// and the cluster's events stream, not relay.db, keeps them).
func (r *Node) sharedStores(ctx context.Context, linkEvents *link.Events, log *slog.Logger, limiters ...*server.RateLimiter) (link.Store, server.TicketStore, error) {
	if r.shared == nil {
		return r.linkDB, nil, nil
	}
	r.shared.ShareLimits(limiters...)
	if err := importLinks(ctx, r.shared, r.linkDB, log); err != nil {
		return nil, nil, fmt.Errorf("bring this node's linked worlds into the cluster: %w", err)
	}
	// The cluster's events stream keeps the linked worlds' events, for
	// every node: relay.db's journal would only know what happened while
	// the world's socket was here, and a resume from it could skip what
	// another node numbered meanwhile.
	linkEvents.SetJournal(nil)
	r.shared.Events.AttachLinked(linkEvents)
	return r.shared.Links, r.shared.Tickets, nil
}

// requestStore is where the key requests and pair requests are kept: in
// memory on a node alone, in the cluster's shared state in a cluster.
func (r *Node) requestStore() link.RequestStore {
	if r.shared != nil {
		return r.shared.Requests
	}
	return link.NewMemoryRequests(0, nil)
}

// watchUnpaired makes a world unpaired on another node lose its socket
// here too (in a cluster; a node alone closes it as it unpairs).
func (r *Node) watchUnpaired(ctx context.Context) error {
	if r.shared == nil {
		return nil
	}
	return r.shared.DisconnectUnpaired(ctx, func(clientID string) {
		r.links.Hub().Disconnect(clientID, link.CloseAuthFailed, "Unpaired: the connection token was revoked")
		if r.shared.Events != nil {
			// Its events leave the cluster's events stream, but the last,
			// which the world's numbering goes on from should it be
			// paired again.
			r.shared.Events.ForgetLinked(clientID)
		}
	})
}

// sharedState is the cluster's shared state for the node to attach to:
// Config.Shared when set, else, for a node that joined a cluster
// (Config.Cluster), the cluster's own NATS connection; nil for a node
// alone.
func sharedState(cfg Config, c *cluster.Node) *SharedState {
	if cfg.Shared != nil {
		return cfg.Shared
	}
	if c == nil {
		return nil
	}
	return &SharedState{JetStream: c.JetStream(), NodeName: c.Name(), Replicas: c.Replicas()}
}
