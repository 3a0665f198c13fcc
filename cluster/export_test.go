package cluster

import (
	"context"
	"errors"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Crash stops the node's embedded NATS server at once, as a SIGKILL of its
// process would for the other nodes: its routes drop, its subscriptions
// vanish, and it releases nothing. The relay around it keeps running,
// unable to reach the cluster, until the test closes it.
func (n *Node) Crash() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
}

// StallWatch stops the registry's watcher behind its back, as a watcher
// whose consumer was lost with a node and never recreated.
func (r *Registry) StallWatch() {
	r.mu.RLock()
	w := r.watch
	r.mu.RUnlock()
	_ = w.Stop()
}

// Rewatches is how many times the registry replaced its watcher.
func (r *Registry) Rewatches() int64 { return r.rewatches.Load() }

// JetStreamAPIRequests is how many JetStream API requests (listing a
// bucket, creating or deleting a consumer, reading an entry from a
// stream's leader, ...) the node's embedded server has answered.
func (r *Registry) JetStreamAPIRequests() uint64 {
	jsz, err := r.node.srv.Jsz(&natsserver.JSzOptions{})
	if err != nil {
		return 0
	}
	return jsz.API.Total
}

// HoldRenewals stops the registry's renewals of its leases, and its
// answers to the other nodes' pings, as a paused process's would stop.
func (r *Registry) HoldRenewals() { r.holdRenewals.Store(true) }

// AnswersUnderWay is how many forwarded calls, streams and uploads the
// node is answering.
func (r *Registry) AnswersUnderWay() int {
	r.inflight.mu.Lock()
	defer r.inflight.mu.Unlock()
	return r.inflight.n
}

// StallBucket makes the registry's bucket answer none of the node's
// requests for d, as while JetStream elects the bucket's leader after
// the server that led it died (4 to 9 s in nats-server).
func (r *Registry) StallBucket(d time.Duration) {
	r.stallUntil.Store(time.Now().Add(d).UnixNano())
}

// Intruder connects to the node's embedded NATS server as a plain client
// that got hold of its token: a client of the relays' NATS account that is
// not a node, as a rogue with --nats would be.
func (n *Node) Intruder() (*nats.Conn, error) {
	return nats.Connect(n.srv.ClientURL(), nats.Token(n.token), nats.Name("intruder"))
}

// RoutePeers names the servers at the other end of the node's routes,
// once for each route.
func (n *Node) RoutePeers() []string {
	rz, err := n.srv.Routez(nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range rz.Routes {
		out = append(out, r.RemoteName)
	}
	return out
}

// HoldTakeOvers keeps the node from taking over the worlds it follows.
func (r *Registry) HoldTakeOvers() { r.opts.Replication.holdTakeOvers.Store(true) }

// Restores is how many of its copies the node restored from a snapshot.
func (r *Registry) Restores() int64 { return r.opts.Replication.restores.Load() }

// WorldLog reads the first and last sequences of a world's log.
func (n *Node) WorldLog(ctx context.Context, clientID string) (first, last uint64, err error) {
	s, err := n.js.Stream(ctx, worldStream(clientID))
	if err != nil {
		return 0, 0, err
	}
	st := s.CachedInfo().State
	return st.FirstSeq, st.LastSeq, nil
}

// WorldSnapshots lists the records a world's stored snapshots hold,
// oldest first.
func (n *Node) WorldSnapshots(ctx context.Context, clientID string) ([]uint64, error) {
	obs, err := n.js.ObjectStore(ctx, snapshotBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rp := &Replication{node: n}
	snaps, err := rp.worldSnapshots(ctx, obs, clientID)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, s := range snaps {
		out = append(out, s.seq)
	}
	return out, nil
}
