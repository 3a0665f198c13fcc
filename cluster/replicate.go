package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/world"
)

// Replicated embedded worlds.
//
// Each embedded world of a cluster has a JetStream stream of its own,
// RELAY_WORLD_<clientId> (subject relay.world.<clientId>, kept in
// Node.Replicas copies): the world's log. The host's engine appends every
// committed group to it before any of the group's writes is acknowledged
// (world.Replicator), with the sequence of the last record it knows as
// the expected last sequence, so that the stream refuses any append of a
// host that another node has replaced. A host whose append fails stops
// serving the world, gives up its lease and follows the world instead.
//
// Up to Config.WorldReplicas other live nodes, chosen per world by a hash
// of the world and the node names, follow the stream: each applies it, in
// order, to a copy of its own in <data>/replicas/<clientId>/world.db. When
// the host's lease lapses (or the host released it), a follower that has
// applied the whole stream claims the lease, appends a marker record (so
// that the former host, were it still running, can no longer append),
// moves its copy into <data>/worlds and serves the world.

// worldStreamPrefix starts the names of the worlds' streams.
const worldStreamPrefix = "RELAY_WORLD_"

// worldStream is the name of a world's stream, and worldSubject its
// subject.
func worldStream(clientID string) string  { return worldStreamPrefix + clientID }
func worldSubject(clientID string) string { return "relay.world." + clientID }

// ReplicatedWorlds is what replication needs of the node's embedded
// worlds (world.Host).
type ReplicatedWorlds interface {
	World(ctx context.Context, clientID string) (*world.Engine, error)
	WorldPath(clientID string) string
	Adopt(clientID, dir string) error
	Evict(clientID, dir string) error
	Handoff(clientID, reason string)
}

// ReplicationOptions configure a [Replication].
type ReplicationOptions struct {
	// Worlds are the node's embedded worlds.
	Worlds ReplicatedWorlds
	// DataDir is the node's data directory; followers keep their copies
	// in its replicas directory.
	DataDir string
	// TookOver, when set, is called once the node serves a world it took
	// over, before any call reaches it (the node publishes the events the
	// former host journaled but could not publish).
	TookOver func(ctx context.Context, clientID string, eng *world.Engine)
	// Demoted, when set, is called once the node no longer serves a world
	// it hosted (another node took it over): the node ends the event
	// streams it fed from its own engine, whose subscribers then resume
	// (with Last-Event-ID) from the events the cluster's bus brings.
	Demoted func(clientID string)
}

// Replication replicates the node's embedded worlds and follows the other
// nodes' (see above). It is the node's world.Replicator.
type Replication struct {
	node   *Node
	log    *slog.Logger
	opts   ReplicationOptions
	copies int
	// nonce makes this process's message ids unique: an append retried
	// after a lost answer is stored once.
	nonce string

	reg atomic.Pointer[Registry]

	mu        sync.Mutex
	streams   map[string]bool      // the worlds whose stream this node made sure of
	followers map[string]*follower // the worlds this node follows
	demoting  map[string]bool      // the worlds whose copy is moving aside (demote)
	nodes     map[string]time.Time // node name -> when its record was last written (as seen here)
	watch     jetstream.KeyWatcher
	objects   jetstream.ObjectStore // the snapshots' bucket, once made (snapshot.go)
	// restores counts the copies restored from a snapshot.
	restores atomic.Int64
	// holdTakeOvers, set by tests, keeps this node from taking worlds
	// over, so that another follower does.
	holdTakeOvers atomic.Bool
	// holdSnapshots, set by tests, keeps this node's snapshots from being
	// stored until it is cleared, as a slow upload would.
	holdSnapshots atomic.Bool
	// fileStores keeps the worlds' object stores (files.go), by client id.
	fileStores sync.Map

	stop chan struct{}
	done chan struct{}
}

// NewReplication returns the replication of the node's embedded worlds, or
// nil when the cluster keeps no copies (Config.WorldReplicas is 0, or the
// cluster has one node). It starts once [NewRegistry] is given it.
func NewReplication(node *Node, opts ReplicationOptions) *Replication {
	copies := min(node.cfg.WorldReplicas, node.size-1)
	if copies <= 0 {
		return nil
	}
	return &Replication{
		node: node, log: node.log, opts: opts, copies: copies, nonce: rand.Text()[:10],
		streams: map[string]bool{}, followers: map[string]*follower{}, demoting: map[string]bool{}, nodes: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// start follows the nodes bucket and starts the loop that follows and
// takes over the other nodes' worlds; the registry calls it.
func (rp *Replication) start(ctx context.Context, r *Registry) error {
	rp.reg.Store(r)
	w, err := rp.node.watchAll(ctx, r.nodes)
	if err != nil {
		return fmt.Errorf("cluster: watch the nodes: %w", err)
	}
	rp.watch = w
	go func() {
		for up := range w.Updates() {
			if up == nil {
				continue
			}
			rp.mu.Lock()
			var rec NodeRecord
			if up.Operation() == jetstream.KeyValuePut && json.Unmarshal(up.Value(), &rec) == nil && !rec.Stopped {
				rp.nodes[up.Key()] = time.Now()
			} else {
				delete(rp.nodes, up.Key())
			}
			rp.mu.Unlock()
		}
	}()
	go rp.loop()
	return nil
}

// Close stops following worlds; the node's own worlds are closed with its
// world host.
func (rp *Replication) Close() {
	select {
	case <-rp.stop:
		return
	default:
	}
	close(rp.stop)
	<-rp.done
	if rp.watch != nil {
		_ = rp.watch.Stop()
	}
	rp.mu.Lock()
	fs := rp.followers
	rp.followers = map[string]*follower{}
	rp.mu.Unlock()
	for _, f := range fs {
		f.halt()
		_ = f.rep.Close()
	}
}

// ensureStream makes sure the world's stream exists.
func (rp *Replication) ensureStream(ctx context.Context, clientID string) error {
	rp.mu.Lock()
	known := rp.streams[clientID]
	rp.mu.Unlock()
	if known {
		return nil
	}
	_, err := rp.node.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        worldStream(clientID),
		Description: "relay: the replicated log of embedded world " + clientID,
		Subjects:    []string{worldSubject(clientID)},
		Replicas:    rp.node.Replicas(),
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
	})
	if err != nil {
		return err
	}
	rp.mu.Lock()
	rp.streams[clientID] = true
	rp.mu.Unlock()
	return nil
}

// Forget removes the replicated log of a world this node hosted and has
// removed. The followers stop once the world leaves the registry (see
// Registry.Forget), and remove their copies then.
func (rp *Replication) Forget(ctx context.Context, clientID string) error {
	rp.mu.Lock()
	delete(rp.streams, clientID)
	rp.mu.Unlock()
	err := rp.node.js.DeleteStream(ctx, worldStream(clientID))
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("cluster: remove the replicated log of world %s: %w", clientID, err)
	}
	return rp.forgetSnapshots(ctx, clientID)
}

// appendTimeout bounds one append, retries included: long enough for
// JetStream to elect a new leader for the world's stream (nats-server
// waits up to 9 s).
const appendTimeout = 12 * time.Second

// errLeaseLost is the answer to an append of a world whose lease this
// node no longer holds.
var errLeaseLost = errors.New("this node no longer holds the world's lease")

// Append implements world.Replicator: it appends a record to the world's
// stream, expecting last as the stream's last sequence, while this node
// holds the world's lease. A request no server answered (the stream is
// electing a leader) is sent again, with the same message id, so that it
// is stored once.
//
// Its errors tell the caller what became of the record: a world.Error of
// kind ErrUnavailable saying that the write was not applied (the lease was
// gone before the append, or the stream refused it), or that whether it
// was applied is unknown (the lease ran out while no answer came).
func (rp *Replication) Append(clientID string, last uint64, record []byte) (uint64, error) {
	r := rp.reg.Load()
	if r == nil || !r.holds(clientID) {
		return 0, world.Wrapf(world.ErrUnavailable, errLeaseLost, "World %s is unavailable: node %s no longer hosts it, and the write was not applied: try again", clientID, rp.node.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: worldSubject(clientID), Data: record}
	if sig := rp.node.signer.signRecord(msg.Subject, last, record); sig != "" {
		msg.Header = nats.Header{hdrSignature: []string{sig}}
	}
	id := fmt.Sprintf("%s-%s-%d", rp.node.Name(), rp.nonce, last)
	for {
		err := rp.ensureStream(ctx, clientID)
		if err == nil {
			attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
			var ack *jetstream.PubAck
			ack, err = rp.node.js.PublishMsg(attempt, msg, jetstream.WithExpectLastSequence(last), jetstream.WithMsgID(id), jetstream.WithExpectStream(worldStream(clientID)))
			cancelAttempt()
			if err == nil {
				return ack.Sequence, nil
			}
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
				// The stream refused it (another node appended): final.
				// Any other refusal (the stream moving its leader, say)
				// is tried again while the lease holds.
				return 0, world.Wrapf(world.ErrUnavailable, err, "World %s is unavailable: another node took it over from node %s, and the write was not applied: try again", clientID, rp.node.Name())
			}
		}
		if !r.holds(clientID) {
			return 0, world.Wrapf(world.ErrUnavailable, errors.Join(errLeaseLost, err), "World %s: node %s lost its lease while the write was under way, so whether it was applied is unknown: read the world before trying again", clientID, rp.node.Name())
		}
		select {
		case <-ctx.Done():
			return 0, world.Wrapf(world.ErrUnavailable, err, "World %s: its replicated log did not answer in time, so whether the write was applied is unknown: read the world before trying again", clientID)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Fenced implements world.Replicator: the engine of a world stopped
// serving it. The node gives up the lease (another node takes the world
// over at once) and follows the world.
func (rp *Replication) Fenced(clientID string, err error) {
	rp.log.Warn("stopped serving a world whose replicated log refused a write; following it instead", "clientId", clientID, "error", err)
	go rp.demote(clientID)
}

// demote stops hosting a world here and makes the node's copy a
// follower's.
//
// It also serves a node that learns from a renewal that another node holds
// the lease (it was paused or cut off past its lease): its engine may not
// have been written since, so nothing fenced it. The world's copy is not
// followed until it has moved aside.
func (rp *Replication) demote(clientID string) {
	rp.mu.Lock()
	if rp.demoting[clientID] {
		rp.mu.Unlock()
		return
	}
	rp.demoting[clientID] = true
	rp.mu.Unlock()
	rp.demoteMarked(clientID)
}

// demoteMarked is demote for a world already marked as demoting.
func (rp *Replication) demoteMarked(clientID string) {
	defer func() {
		rp.mu.Lock()
		delete(rp.demoting, clientID)
		rp.mu.Unlock()
	}()
	if r := rp.reg.Load(); r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r.Release(ctx, clientID)
		cancel()
	}
	if err := rp.opts.Worlds.Evict(clientID, rp.copyDir(clientID)); err != nil {
		rp.log.Warn("could not move a world's copy aside to follow it", "clientId", clientID, "error", err)
	}
	if r := rp.reg.Load(); r != nil {
		// A claim round that listed the world before it moved aside may
		// have claimed it again meanwhile: this node no longer has it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r.Release(ctx, clientID)
		cancel()
	}
	if rp.opts.Demoted != nil {
		rp.opts.Demoted(clientID)
	}
}

// isDemoting reports whether the node is giving up a world it hosted.
func (rp *Replication) isDemoting(clientID string) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.demoting[clientID]
}

// copyDir is where this node keeps its copy of a world it follows.
func (rp *Replication) copyDir(clientID string) string {
	return filepath.Join(rp.opts.DataDir, "replicas", clientID)
}

// prepareHost decides whether the node may claim an embedded world of its
// data directory. A copy that was replicated before and whose stream holds
// records is brought back as a follower's copy (the node then follows the
// world, and takes it back once it has applied the whole stream and no
// other node holds it); anything else (a world never replicated) may be
// claimed, as without replication.
func (rp *Replication) prepareHost(ctx context.Context, clientID string) bool {
	_, base, _, err := world.ReplicaState(rp.opts.Worlds.WorldPath(clientID))
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := rp.node.js.Stream(ctx, worldStream(clientID))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return true
	}
	// A log that ever held a record keeps its last sequence when it is
	// trimmed, so LastSeq (not the count of records) tells a world never
	// replicated.
	if err != nil || s.CachedInfo().State.LastSeq == 0 {
		return err == nil
	}
	if base == "" {
		// A world that was never replicated, while the cluster holds a log
		// of that client id: a world created afresh (the demo world of a
		// node that returned with an empty data directory) or copied in.
		// The cluster's world wins; the local one is set aside, untouched.
		return !rp.setAside(clientID)
	}
	if err := rp.opts.Worlds.Evict(clientID, rp.copyDir(clientID)); err != nil {
		rp.log.Warn("could not move a world's copy aside to follow it", "clientId", clientID, "error", err)
		return false
	}
	rp.log.Info("following a world of the data directory, which its replicated log may have moved past", "clientId", clientID)
	return false
}

// setAside moves a world of the data directory that the cluster's log of
// its client id does not know out of the node's worlds, into
// <data>/set-aside, and reports whether it did.
func (rp *Replication) setAside(clientID string) bool {
	dir := filepath.Join(rp.opts.DataDir, "set-aside", fmt.Sprintf("%s-%d", clientID, time.Now().UnixNano()))
	if err := rp.opts.Worlds.Evict(clientID, dir); err != nil {
		rp.log.Warn("could not set aside a world the cluster holds another copy of", "clientId", clientID, "error", err)
		return false
	}
	rp.log.Warn("set aside a world of the data directory that was never replicated, since the cluster holds a replicated world of that client id; following the cluster's", "clientId", clientID, "dir", dir)
	return true
}

// hosted starts the replication of a world this node just claimed: its
// stream receives the world's base now, so that followers hold the world
// before its first write.
func (rp *Replication) hosted(clientID string) {
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	defer cancel()
	eng, err := rp.opts.Worlds.World(ctx, clientID)
	if errors.Is(err, world.ErrNotFound) {
		// The world left this node's worlds since it was claimed (its
		// copy moved aside to follow the world): a lease kept for it
		// would hold the world on a node that answers 404 for it, and
		// keep the followers from taking it over.
		rp.log.Warn("gave up the lease of a world this node no longer has", "clientId", clientID)
		if r := rp.reg.Load(); r != nil {
			r.Release(ctx, clientID)
		}
		return
	}
	if err == nil {
		err = eng.StartReplication(ctx)
	}
	if err != nil {
		rp.log.Warn("could not start replicating a world", "clientId", clientID, "error", err)
		return
	}
	rp.placeLeader(ctx, clientID)
	rp.syncFiles(clientID)
}

// Stream leaders.
//
// JetStream elects a leader for each world's stream among the servers
// that keep it, wherever it likes. A stream led by another node's server
// stalls when that node dies: while its group elects a new leader (4 to
// 9 s in nats-server), the host of a healthy world could not append. Once
// a node serves a world (it claimed it, or took it over), it asks
// JetStream to move the stream's leader to its own server (a stepdown with
// a preferred placement), so that the death of a node stalls only the
// streams of the worlds it hosted, which fail over anyway, and appends
// need no hop to another server.

// placeLeader asks JetStream to make the server this node is connected to
// the leader of a world's stream, unless it leads it already.
func (rp *Replication) placeLeader(ctx context.Context, clientID string) {
	server := rp.node.nc.ConnectedServerName()
	if server == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := rp.node.js.Stream(ctx, worldStream(clientID))
	if err != nil {
		rp.log.Debug("could not read a world's stream to place its leader", "clientId", clientID, "error", err)
		return
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == server || info.Cluster.Leader == "" {
		// Led here already, or electing a leader, which a stepdown
		// would only disturb: the next check places it.
		return
	}
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	res, err := rp.node.nc.RequestWithContext(ctx, fmt.Sprintf("$JS.API.STREAM.LEADER.STEPDOWN.%s", worldStream(clientID)), req)
	if err == nil {
		var ans struct {
			Success bool `json:"success"`
			Error   *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err = json.Unmarshal(res.Data, &ans); err == nil && ans.Error != nil {
			err = errors.New(ans.Error.Description)
		}
	}
	if err != nil {
		rp.log.Debug("could not move a world's stream leader to its host", "clientId", clientID, "from", info.Cluster.Leader, "error", err)
		return
	}
	rp.log.Debug("moved a world's stream leader to its host", "clientId", clientID, "from", info.Cluster.Leader, "to", server)
}

// placeEvery is how often a node checks that it leads the streams of the
// worlds it hosts (a leader can move when a server restarts), and
// placeBatch how many worlds it checks each time, one after the other,
// so that a node with many worlds spreads the checks out.
const (
	placeEvery = 5 * time.Second
	placeBatch = 32
)

// placeLeaders checks the next placeBatch worlds this node hosts, from
// after the one checked last, and moves their streams' leaders here.
func (rp *Replication) placeLeaders(after string) string {
	r := rp.reg.Load()
	ids := r.HostedEmbedded()
	start, _ := slices.BinarySearch(ids, after)
	if start < len(ids) && ids[start] == after {
		start++
	}
	ids = append(ids[start:], ids[:start]...)
	ids = ids[:min(placeBatch, len(ids))]
	last := after
	for _, id := range ids {
		select {
		case <-rp.stop:
			return last
		default:
		}
		rp.placeLeader(context.Background(), id)
		last = id
	}
	return last
}

// followEvery is how often the node reviews the worlds it follows.
const followEvery = 250 * time.Millisecond

// loop follows the worlds this node should follow, and takes over those
// whose host is gone.
func (rp *Replication) loop() {
	defer close(rp.done)
	t := time.NewTicker(followEvery)
	defer t.Stop()
	placed := time.Now()
	placing := make(chan string, 1)
	placing <- ""
	for {
		select {
		case <-rp.stop:
			// Wait for the check of the leaders under way, if any.
			<-placing
			return
		case <-t.C:
		}
		rp.review()
		if time.Since(placed) < placeEvery {
			continue
		}
		select {
		case after := <-placing:
			placed = time.Now()
			go func() { placing <- rp.placeLeaders(after) }()
		default:
			// The last check is still under way.
		}
	}
}

// review starts and stops followers, and takes over worlds.
func (rp *Replication) review() {
	r := rp.reg.Load()
	self := rp.node.Name()
	live := rp.liveNodes()
	want := map[string]Hosted{}
	known := map[string]bool{}
	for _, h := range r.Snapshot() {
		known[h.ClientID] = true
		if h.Refused || h.Kind != world.KindEmbedded || r.owns(h.ClientID) {
			continue
		}
		if rp.chosen(h, live) {
			want[h.ClientID] = h
		}
	}
	rp.mu.Lock()
	for id := range rp.demoting {
		delete(want, id)
	}
	var stale []*follower
	for id, f := range rp.followers {
		if _, ok := want[id]; !ok {
			stale = append(stale, f)
			delete(rp.followers, id)
		}
	}
	var starts []string
	for id := range want {
		if rp.followers[id] == nil {
			starts = append(starts, id)
		}
	}
	rp.mu.Unlock()
	for _, f := range stale {
		f.halt()
		_ = f.rep.Close()
		if !known[f.id] {
			// The world left the registry: it was removed, and its copy
			// goes too.
			if err := os.RemoveAll(rp.copyDir(f.id)); err != nil {
				rp.log.Warn("could not remove the copy of a removed world", "clientId", f.id, "error", err)
			}
		}
	}
	for _, id := range starts {
		rep, err := world.OpenReplica(filepath.Join(rp.copyDir(id), "world.db"))
		if err != nil {
			rp.log.Warn("could not open the copy of a world to follow it", "clientId", id, "error", err)
			continue
		}
		f := rp.newFollower(id, rep)
		rp.mu.Lock()
		rp.followers[id] = f
		rp.mu.Unlock()
		go f.run()
	}
	// The first live follower by rank snapshots a world whose host is
	// live (snapshot.go).
	rp.mu.Lock()
	for id, f := range rp.followers {
		h := want[id]
		ranked := rp.ranked(h, live)
		f.snap.taker.Store(h.Live && h.Node != self && len(ranked) > 0 && ranked[0] == self)
	}
	rp.mu.Unlock()
	for id, h := range want {
		if h.Node == self || !h.Live {
			rp.takeOver(id, h)
		}
	}
}

// liveNodes lists the nodes whose record was written within a lease.
func (rp *Replication) liveNodes() []string {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	out := make([]string, 0, len(rp.nodes))
	for name, seen := range rp.nodes {
		if time.Since(seen) < rp.node.cfg.LeaseTTL {
			out = append(out, name)
		}
	}
	if !slices.Contains(out, rp.node.Name()) {
		out = append(out, rp.node.Name())
	}
	return out
}

// chosen reports whether this node is one of the world's followers: the
// live nodes other than its live host, ranked by a hash of the world and
// the node's name, first Replication.copies of them, and the node named
// by the lease if it does not hold it (it restarted). A world whose host
// is gone keeps its followers, and the host itself may follow it then.
func (rp *Replication) chosen(h Hosted, live []string) bool {
	if h.Node == rp.node.Name() {
		// The lease is in this node's name but not held: it restarted,
		// and takes the world back once its copy is up to date.
		return true
	}
	candidates := rp.ranked(h, live)
	n := rp.copies
	if !h.Live {
		// The host is gone: every follower may take over, the host too
		// when it returns.
		n++
	}
	return slices.Contains(candidates[:min(n, len(candidates))], rp.node.Name())
}

// ranked lists the live nodes that may follow a world, other than its
// live host, in the order of a hash of the world's and the node's names.
func (rp *Replication) ranked(h Hosted, live []string) []string {
	rank := func(name string) uint64 {
		f := fnv.New64a()
		f.Write([]byte(h.ClientID + "/" + name))
		return f.Sum64()
	}
	var candidates []string
	for _, name := range live {
		if h.Live && name == h.Node {
			continue
		}
		candidates = append(candidates, name)
	}
	slices.SortFunc(candidates, func(a, b string) int {
		ra, rb := rank(a), rank(b)
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	return candidates
}

// takeOver serves a world whose host is gone, if this node's copy holds
// the whole stream: it claims the lease, appends the marker record that
// fences the former host off, and moves its copy among its worlds.
func (rp *Replication) takeOver(clientID string, h Hosted) {
	rp.mu.Lock()
	f := rp.followers[clientID]
	rp.mu.Unlock()
	if f == nil || !f.caughtUp() || rp.holdTakeOvers.Load() {
		return
	}
	r := rp.reg.Load()
	if h.Node != rp.node.Name() && r.hostAnswers(context.Background(), clientID) {
		// The host is there, and its renewals merely get no answer
		// (the registry electing a leader): it keeps the world a while
		// (renewGrace).
		return
	}
	// The copy is this goroutine's from here on: the follower stops
	// applying, and starts again if the world cannot be taken now.
	f.halt()
	resume := func() {
		g := rp.newFollower(clientID, f.rep)
		rp.mu.Lock()
		rp.followers[clientID] = g
		rp.mu.Unlock()
		go g.run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	s, err := rp.node.js.Stream(sctx, worldStream(clientID))
	scancel()
	if err != nil || s.CachedInfo().State.LastSeq != f.rep.Seq() || !f.rep.Complete() {
		resume()
		return
	}
	rp.mu.Lock()
	delete(rp.followers, clientID)
	rp.mu.Unlock()
	r.setTakingOver(clientID, true)
	defer r.setTakingOver(clientID, false)
	giveUp := func(what string, err error) {
		rp.log.Warn("could not take over a world", "clientId", clientID, "step", what, "error", err)
		_ = f.rep.Close()
	}
	if err := r.claim(ctx, clientID, world.KindEmbedded, h.Title, false, true); err != nil {
		if !errors.Is(err, ErrHeldElsewhere) {
			giveUp("claim", err)
		} else {
			_ = f.rep.Close()
		}
		return
	}
	seq, err := rp.Append(clientID, f.rep.Seq(), world.MarkerRecord())
	if err == nil {
		err = f.rep.Apply(seq, world.MarkerRecord())
	}
	if err != nil {
		giveUp("fence", err)
		r.Release(ctx, clientID)
		return
	}
	if err := f.rep.Close(); err != nil {
		giveUp("close", err)
		r.Release(ctx, clientID)
		return
	}
	if err := rp.opts.Worlds.Adopt(clientID, rp.copyDir(clientID)); err != nil {
		giveUp("adopt", err)
		r.Release(ctx, clientID)
		return
	}
	eng, err := rp.opts.Worlds.World(ctx, clientID)
	if err != nil {
		giveUp("open", err)
		r.Release(ctx, clientID)
		return
	}
	if rp.opts.TookOver != nil {
		rp.opts.TookOver(ctx, clientID, eng)
	}
	go rp.syncFiles(clientID)
	rp.log.Info("took over a world whose host is gone", "clientId", clientID, "formerHost", h.Node, "seq", seq)
	go rp.placeLeader(context.Background(), clientID)
}

// followResetAttempts bounds the attempts of a follower's consumer to
// make itself again after a failure, about a second apart.
const followResetAttempts = 2

// follower applies a world's stream to this node's copy.
type follower struct {
	rp  *Replication
	id  string
	rep *world.Replica

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// upToDate is set while the last record the consumer delivered was
	// the stream's last.
	upToDate bool
	// reported is set once the follower logged that it caught up.
	reported bool

	snap snapState
}

func (rp *Replication) newFollower(id string, rep *world.Replica) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	return &follower{rp: rp, id: id, rep: rep, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// halt stops the follower, and a snapshot it is storing, and waits for
// them; its copy stays open.
func (f *follower) halt() {
	f.cancel()
	<-f.done
	f.snap.bg.Wait()
}

// caughtUp reports whether the follower applied every record its
// consumer knew of.
func (f *follower) caughtUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.upToDate
}

// run applies the stream from the copy's next record on, with an ordered
// consumer, made again whenever it stops delivering while the stream holds
// more.
func (f *follower) run() {
	defer close(f.done)
	for f.ctx.Err() == nil {
		err := f.consume()
		if f.ctx.Err() != nil {
			return
		}
		if err != nil {
			f.rp.log.Debug("following a world's log", "clientId", f.id, "error", err)
		}
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// consume runs one ordered consumer until it fails or falls silent.
func (f *follower) consume() error {
	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
	s, err := f.rp.node.js.Stream(ctx, worldStream(f.id))
	cancel()
	if err != nil {
		return err
	}
	if err := f.catchUp(s.CachedInfo()); err != nil {
		return err
	}
	if s.CachedInfo().State.LastSeq == f.rep.Seq() {
		f.setUpToDate(true)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if f.rep.Seq() > 0 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: f.rep.Seq() + 1}
	}
	// The consumer's own resets are bounded: one that cannot be made
	// again (the stream was removed with its world) ends this consumer,
	// and run makes a new one or stops; unbounded, they would hold Next
	// and keep the follower from halting.
	cfg.MaxResetAttempts = followResetAttempts
	ctx, cancel = context.WithTimeout(f.ctx, 2*time.Second)
	cons, err := s.OrderedConsumer(ctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	// A halt stops the iterator, which ends a wait in Next.
	consumed := make(chan struct{})
	defer close(consumed)
	go func() {
		select {
		case <-f.ctx.Done():
			it.Stop()
		case <-consumed:
		}
	}()
	quiet := 0
	for f.ctx.Err() == nil {
		msg, err := it.Next(jetstream.NextMaxWait(time.Second))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			// Nothing new for a while: make sure the consumer is not
			// silent while the stream holds more (after a leader
			// change, say).
			quiet++
			if quiet >= 3 {
				ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
				info, ierr := s.Info(ctx)
				cancel()
				if ierr == nil && info.State.LastSeq > f.rep.Seq() {
					return errors.New("the consumer fell silent")
				}
				quiet = 0
			}
			f.snapshotIfDue()
			continue
		}
		if err != nil {
			return err
		}
		quiet = 0
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		seq := md.Sequence.Stream
		if seq > f.rep.Seq()+1 {
			return fmt.Errorf("the log skips from %d to %d: its records were trimmed", f.rep.Seq(), seq)
		}
		if seq <= f.rep.Seq() {
			continue // applied before (a redelivery)
		}
		if err := f.rp.node.signer.verifyRecord(msg.Subject(), seq-1, msg.Data(), msg.Headers().Get(hdrSignature)); err != nil {
			// Not written by a node of the cluster: passed over, so that
			// the records after it still follow.
			f.rp.log.Warn("skipped a record of a world's log without a valid cluster signature", "clientId", f.id, "seq", seq, "reason", err)
			if err := f.rep.Skip(seq); err != nil {
				return fmt.Errorf("skip record %d: %w", seq, err)
			}
			f.setUpToDate(md.NumPending == 0)
			continue
		}
		if err := f.applyFiles(msg.Data()); err != nil {
			return fmt.Errorf("apply the files of record %d: %w", seq, err)
		}
		if err := f.rep.Apply(seq, msg.Data()); err != nil {
			return fmt.Errorf("apply record %d: %w", seq, err)
		}
		f.setUpToDate(md.NumPending == 0)
		f.afterApply(len(msg.Data()))
	}
	return nil
}

// setUpToDate records whether the copy holds the whole stream, and logs
// the first time it does: from then on the node can take the world over
// (operators and the fault script read how long a returning node took to
// follow again).
func (f *follower) setUpToDate(up bool) {
	f.mu.Lock()
	first := up && !f.reported
	f.upToDate = up
	f.reported = f.reported || up
	f.mu.Unlock()
	if first {
		f.rp.log.Info("following a world: the copy holds its whole log", "clientId", f.id, "seq", f.rep.Seq())
	}
}
