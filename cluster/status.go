package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// NodesBucket is the JetStream key-value bucket where each node records
// that it runs: one key per node name, whose value is a [NodeRecord],
// renewed with the node's leases.
const NodesBucket = "relay_nodes"

// NodeRecord is a node's record in [NodesBucket].
type NodeRecord struct {
	// Started is when the node joined the cluster.
	Started time.Time `json:"started"`
	// Expires is when the record ends unless renewed.
	Expires time.Time `json:"expires"`
	// Stopped is set by a node that stopped.
	Stopped bool `json:"stopped,omitempty"`
}

// Status is the cluster as one node sees it: GET /cluster and `relay
// cluster status`.
type Status struct {
	// Enabled is false for a relay alone; nothing else is set then.
	Enabled bool `json:"enabled"`
	// Node is the answering node's name.
	Node      string          `json:"node"`
	NATS      NATSStatus      `json:"nats"`
	JetStream JetStreamStatus `json:"jetstream"`
	// Nodes are the nodes known to the cluster, by name, each with the
	// worlds it hosts.
	Nodes []NodeStatus `json:"nodes"`
}

// NATSStatus is the answering node's connection to NATS.
type NATSStatus struct {
	// Embedded is true when the node runs its own NATS server.
	Embedded  bool `json:"embedded"`
	Connected bool `json:"connected"`
	// Routes is how many route connections the embedded server has to
	// its peers.
	Routes int `json:"routes"`
	// RTT is the round trip to the NATS server the node is connected to.
	RTT string `json:"rtt,omitempty"`
}

// JetStreamStatus is JetStream's health as the answering node sees it.
type JetStreamStatus struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Replicas is how many copies the shared state is kept in.
	Replicas int `json:"replicas"`
	// MetaLeader is the server that leads the JetStream cluster, and
	// Peers its servers ("name (offline)" for one not seen lately), as
	// the embedded server knows them.
	MetaLeader string   `json:"metaLeader,omitempty"`
	Peers      []string `json:"peers,omitempty"`
}

// NodeStatus is one node of the cluster.
type NodeStatus struct {
	Name string `json:"name"`
	// Live is true while the node renews its record.
	Live    bool      `json:"live"`
	Started time.Time `json:"started,omitzero"`
	// Worlds are the worlds the node holds (or held, when their lease
	// ran out), by client id.
	Worlds []WorldStatus `json:"worlds"`
}

// WorldStatus is one world in [NodeStatus].
type WorldStatus struct {
	ClientID string `json:"clientId"`
	Kind     string `json:"kind"`
	Title    string `json:"title,omitempty"`
	// Live is true while the node's lease on the world holds.
	Live    bool      `json:"live"`
	Expires time.Time `json:"expires"`
	// Refused is set on a world of the node's data directory that the
	// node does not host because another node holds its client id.
	Refused bool `json:"refused,omitempty"`
}

// Ready reports whether the node may take traffic: it is connected to
// NATS, so that it can forward calls and renew its leases.
func (r *Registry) Ready() bool { return r.node.nc.IsConnected() }

// recordNode writes the node's record in the nodes bucket.
func (r *Registry) recordNode(ctx context.Context, stopped bool) {
	if r.nodes == nil {
		return
	}
	// The clock is read under the lock, where the rest of the registry
	// reads it (a test shifts it).
	r.mu.Lock()
	now := r.now()
	r.mu.Unlock()
	rec := NodeRecord{Started: r.started, Expires: now.Add(r.ttl), Stopped: stopped}
	val, _ := json.Marshal(rec)
	if _, err := r.nodes.Put(ctx, r.node.Name(), val); err != nil && !stopped {
		r.log.Debug("could not record the node in the cluster", "error", err)
	}
}

// metaPeers lists the servers of the JetStream meta group once each:
// the answering server itself and the others the server reports. The
// server's replicas are every peer but itself, the leader among them when
// another server leads; listing the leader besides them, as if it were
// never a replica, named it twice and left out the answering server.
func metaPeers(self string, replicas []*natsserver.PeerInfo) []string {
	peers := []string{self}
	seen := map[string]bool{self: true}
	for _, p := range replicas {
		if p == nil || seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		name := p.Name
		if p.Offline {
			name += " (offline)"
		}
		peers = append(peers, name)
	}
	slices.Sort(peers)
	return peers
}

// Status describes the cluster as this node sees it. It asks JetStream
// for its health, within ctx.
func (r *Registry) Status(ctx context.Context) Status {
	st := Status{Enabled: true, Node: r.node.Name()}
	nc := r.node.nc
	st.NATS = NATSStatus{Embedded: r.node.srv != nil, Connected: nc.IsConnected()}
	if r.node.srv != nil {
		st.NATS.Routes = r.node.srv.NumRoutes()
		// A node without peers runs JetStream alone, and its server has no
		// cluster to ask about.
		if r.node.srv.JetStreamIsClustered() {
			if jsz, err := r.node.srv.Jsz(&natsserver.JSzOptions{}); err == nil && jsz.Meta != nil {
				st.JetStream.MetaLeader = jsz.Meta.Leader
				st.JetStream.Peers = metaPeers(r.node.srv.Name(), jsz.Meta.Replicas)
			}
		}
	}
	if rtt, err := nc.RTT(); err == nil {
		st.NATS.RTT = rtt.String()
	}
	st.JetStream.Replicas = r.node.replicas
	jctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := r.node.js.AccountInfo(jctx); err != nil {
		st.JetStream.Error = err.Error()
	} else {
		st.JetStream.OK = true
	}

	now := r.now()
	byName := map[string]*NodeStatus{}
	get := func(name string) *NodeStatus {
		if n := byName[name]; n != nil {
			return n
		}
		n := &NodeStatus{Name: name, Worlds: []WorldStatus{}}
		byName[name] = n
		return n
	}
	if r.nodes != nil {
		if keys, err := r.nodes.ListKeys(jctx); err == nil {
			for name := range keys.Keys() {
				e, err := r.nodes.Get(jctx, name)
				if err != nil {
					// A record that could not be read in time (a loaded
					// machine) leaves the node's liveness unknown: the
					// status says it is incomplete rather than call the
					// node gone.
					if !errors.Is(err, jetstream.ErrKeyNotFound) {
						st.JetStream.Error = cmp.Or(st.JetStream.Error, fmt.Sprintf("the record of node %s could not be read: %v", name, err))
					}
					continue
				}
				var rec NodeRecord
				if json.Unmarshal(e.Value(), &rec) == nil {
					n := get(name)
					n.Started = rec.Started
					n.Live = !rec.Stopped && now.Before(rec.Expires)
				}
			}
		} else if !errors.Is(err, jetstream.ErrNoKeysFound) {
			st.JetStream.Error = cmp.Or(st.JetStream.Error, err.Error())
		}
	}
	self := get(r.node.Name())
	self.Live = st.NATS.Connected
	for _, h := range r.Snapshot() {
		if h.Released && !h.Refused {
			continue
		}
		n := get(h.Node)
		n.Worlds = append(n.Worlds, WorldStatus{ClientID: h.ClientID, Kind: h.Kind, Title: h.Title, Live: h.Live && !h.Refused, Expires: h.Expires, Refused: h.Refused})
	}
	for _, n := range byName {
		st.Nodes = append(st.Nodes, *n)
	}
	slices.SortFunc(st.Nodes, func(a, b NodeStatus) int { return cmp.Compare(a.Name, b.Name) })
	return st
}
