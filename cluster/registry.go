package cluster

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/steady"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/world"
)

// RegistryBucket is the JetStream key-value bucket of the world registry:
// one key per client id, whose value is an [Entry].
const RegistryBucket = "relay_worlds"

// Entry is a world's record in the registry: which node hosts it, and
// until when its lease holds unless renewed.
type Entry struct {
	// Node is the host node's name.
	Node string `json:"node"`
	// Kind is world.KindEmbedded or world.KindLinked.
	Kind string `json:"kind"`
	// Title is the world's title, for listings on other nodes.
	Title string `json:"title,omitempty"`
	// Expires is when the lease ends unless renewed, on the host's clock:
	// for people to read. Other nodes judge the lease by their own clock
	// instead (Lease from when they saw the entry written).
	Expires time.Time `json:"expires"`
	// Lease is how long the lease lasts from each write.
	Lease time.Duration `json:"lease"`
	// Released is set by a host that stopped hosting the world (a
	// stopping node, a linked world whose socket closed).
	Released bool `json:"released,omitempty"`
}

// seenEntry is an entry as this node saw it: its revision, and when it
// was written, on this node's clock as well as it knows.
type seenEntry struct {
	Entry
	rev  uint64
	seen time.Time
}

// live reports whether the entry's host still holds the world, judged on
// this node's clock: the lease runs from when this node saw the entry
// written, so the nodes' clocks need not agree.
func (e seenEntry) live(ttl time.Duration) bool {
	if e.Released {
		return false
	}
	if e.Lease > 0 {
		ttl = e.Lease
	}
	return time.Since(e.seen) < ttl
}

// LocalWorlds is what the registry needs of the node's own worlds: the
// relay's registry of embedded and linked worlds (link.Registry).
type LocalWorlds interface {
	World(ctx context.Context, clientID string) (world.World, error)
	List(ctx context.Context) ([]world.Info, error)
	IDs(ctx context.Context) ([]string, error)
}

// RegistryOptions configure a [Registry].
type RegistryOptions struct {
	// Local resolves the worlds this node can serve itself.
	Local LocalWorlds
	// EmbeddedIDs lists the embedded worlds of the node's data directory,
	// which the node claims at start and whenever new ones appear.
	EmbeddedIDs func(ctx context.Context) ([]string, error)
	// Linked lists the linked worlds whose socket this node holds, with
	// their titles: each round of renewals claims those the node does not
	// hold (a connect hook whose claim was overtaken by a disconnect's
	// release, say).
	Linked func() []LinkedWorld
	// Serve answers the calls other nodes forward here
	// (server.Server.ServeForwarded); without it the node forwards but
	// serves no forwarded call.
	Serve func(ctx context.Context, call *server.ForwardedCall) *server.ForwardedReply
	// ServeStream answers the server streams (file downloads) other
	// nodes forward here (server.Server.ServeForwardedStream).
	ServeStream func(ctx context.Context, call *server.ForwardedCall, send func([]byte) error) *server.ForwardedReply
	// ServeUpload answers the client streams (file uploads) other nodes
	// forward here (server.Server.ServeForwardedUpload).
	ServeUpload func(ctx context.Context, call *server.ForwardedCall, next func() ([]byte, error)) *server.ForwardedReply
	// Events serves on this node the event streams of a world of the
	// given kind that another node hosts (the cluster's event bus,
	// shared.Attached.Events); the node also answers other nodes'
	// questions about the users of its worlds, which their streams'
	// read rules need (events.go). Without it an event stream for a
	// world hosted elsewhere is refused, naming the host.
	Events func(clientID, kind string) world.Events
	// Replication, when set, replicates the node's embedded worlds and
	// follows the other nodes' (replicate.go).
	Replication *Replication
}

// Registry is the cluster's world registry as one node sees it, and the
// node's [server.Worlds]: a world this node holds the lease of resolves to
// the local world; a world another live node holds resolves to a remote
// world whose calls are forwarded there; a world whose host is gone is
// Unavailable (503) naming it; anything else is the local registry's
// answer (ErrNotFound for an unknown world).
//
// Leases: every lease lasts Config.LeaseTTL and is renewed every quarter
// of it (renewQuarters). A node holds a world only while its last renewal is recent enough;
// one that cannot renew (cut off from the cluster) answers 503 for its
// worlds once its lease ran out, rather than serve a world that another
// node might serve too; only a replicated world whose renewals get no
// answer while the cluster still answers is served a while longer
// (renewGrace). An embedded world found in the registry under a
// live lease of another node is a duplicate client id: this node refuses
// to host it, says so in its log and in the cluster's status, and
// forwards its calls to the holder.
type Registry struct {
	node  *Node
	log   *slog.Logger
	kv    jetstream.KeyValue
	opts  RegistryOptions
	ttl   time.Duration
	watch jetstream.KeyWatcher
	// nodes is the bucket of node records (status.go); started is when
	// this node joined.
	nodes   jetstream.KeyValue
	started time.Time

	mu      sync.RWMutex
	entries map[string]seenEntry // the bucket as last seen, by client id
	owned   map[string]*lease    // the worlds this node holds
	refused map[string]string    // embedded worlds held by another node: their holder
	// remotes caches the remote worlds handed out, by client id.
	remotes map[string]*remoteWorld
	// rechecked is when this node last read from the bucket a world
	// whose lease looked expired (recheck).
	rechecked map[string]time.Time
	// answering is set by Answer once the node may tell the others it
	// hosts its worlds (events.go).
	answering atomic.Bool
	// rewatched is when the registry last replaced its watcher (rewatch;
	// mu guards it); rewatches counts the replacements.
	rewatched time.Time
	rewatches atomic.Int64

	stop chan struct{}
	done chan struct{}

	// answerSubs are the subscriptions on which this node answers the
	// others (mu guards it), and inflight counts the answers under way.
	answerSubs []*nats.Subscription
	inflight   inflight
	// stopping is cancelled when Close begins: it ends a round of renewals
	// under way, and from then on the node claims no world.
	stopping context.Context
	cancel   context.CancelFunc
	// now is the clock (tests may shift it).
	now func() time.Time
	// holdRenewals, set by tests, stops the renewals as a paused process
	// would.
	holdRenewals atomic.Bool
	// stallUntil, set by tests, is until when (Unix nanoseconds) the
	// registry's bucket answers nothing, as while it elects a leader.
	stallUntil atomic.Int64
	// takingOver holds the worlds this node is taking over from a host
	// that is gone (replicate.go): they answer 503 until they are ready.
	takingOver map[string]bool
	// handingOff is set while a stopping node lets the writes under way
	// on its replicated worlds finish before it releases them (handOff).
	handingOff atomic.Bool
	// declining is set once a stopping node takes no more forwarded
	// calls (StopAnswering).
	declining atomic.Bool
	// peerSeen is when (Unix nanoseconds) another node last answered a
	// ping of this node's about its renewals (reachPeers).
	peerSeen atomic.Int64
	// hostSeen caches, by node name, the last ping about a lease that
	// looks lapsed (hostAnswers); mu guards it.
	hostSeen map[string]pingAnswer
}

// lease is a world this node holds.
type lease struct {
	kind, title string
	rev         uint64
	// validUntil is when this node stops serving the world unless the
	// lease is renewed first: the start of the last successful write
	// plus nine tenths of the lease, on the monotonic clock, so that it
	// stops before any other node may see the lease as expired.
	validUntil time.Time
	// renewed is when the last successful write of the lease started,
	// and unanswered when the last renewal that got no answer (the
	// bucket electing a leader, say) started: they bound how long a
	// replicated world may be served past validUntil (servable).
	renewed, unanswered time.Time
}

// renewGrace is how much longer than its lease the host of a replicated
// embedded world may go on serving it while its renewals get no answer at
// all (the registry bucket is electing a leader, which takes nats-server
// up to 9 s after the node that led it died) and the other nodes still
// answer it, and how much longer than the lease a follower leaves such a
// world to its host while the host answers its pings. Without it a lease
// shorter than an election ran out on a healthy host, and a follower took
// its world over although nothing had failed.
//
// It cannot let two nodes write the world: the host appends every write
// to the world's log expecting the log's last sequence, and a follower
// that takes the world over appends a marker first, so that the host's
// next append is refused and the host stops serving.
const renewGrace = 10 * time.Second

// servable reports whether this node may serve a world whose lease l it
// holds, at now: the lease was renewed in time, or it is a replicated
// embedded world whose renewals get no answer while the node still
// reaches the cluster (see renewGrace). A paused or cut-off node makes no
// renewal, or reaches no other node, and stops at validUntil.
func (r *Registry) servable(l *lease, now time.Time) bool {
	if now.Before(l.validUntil) {
		return true
	}
	if l.kind != world.KindEmbedded || r.opts.Replication == nil || l.renewed.IsZero() {
		return false
	}
	graceUntil := l.renewed.Add((r.ttl + renewGrace) * 9 / 10)
	return now.Before(graceUntil) && now.Sub(l.unanswered) < r.ttl && now.Sub(r.peerAnswered()) < r.ttl
}

// peerAnswered is when another node last answered one of this node's
// pings about its renewals (reachPeers).
func (r *Registry) peerAnswered() time.Time {
	return time.Unix(0, r.peerSeen.Load())
}

// reachPeers pings the other live nodes, one after the other, until one
// answers, and records when one did: a node whose renewals get no answer
// learns so whether it is cut off from the cluster or the registry is
// merely electing a leader. It pings at most once per quarter lease.
func (r *Registry) reachPeers(ctx context.Context) {
	rp := r.opts.Replication
	if rp == nil || time.Since(r.peerAnswered()) < r.ttl/4 {
		return
	}
	for _, name := range rp.liveNodes() {
		if name == r.node.Name() {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := r.ping(pctx, name)
		cancel()
		if err == nil {
			r.peerSeen.Store(time.Now().UnixNano())
			return
		}
	}
}

// ErrHeldElsewhere is returned by claims of worlds another live node
// holds.
var ErrHeldElsewhere = errors.New("held by another node")

// errStopping is returned by claims once the registry is closing.
var errStopping = errors.New("the node is stopping")

// NewRegistry opens the registry bucket, follows it, claims the node's
// embedded worlds and renews its leases until Close.
func NewRegistry(ctx context.Context, node *Node, opts RegistryOptions) (*Registry, error) {
	r := &Registry{
		node: node, log: node.log, opts: opts, ttl: node.cfg.LeaseTTL,
		entries: map[string]seenEntry{}, owned: map[string]*lease{}, refused: map[string]string{}, rechecked: map[string]time.Time{},
		remotes: map[string]*remoteWorld{}, takingOver: map[string]bool{}, hostSeen: map[string]pingAnswer{},
		stop: make(chan struct{}), done: make(chan struct{}), now: time.Now,
		started: time.Now().UTC(),
	}
	r.stopping, r.cancel = context.WithCancel(context.Background())
	kv, err := node.KeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      RegistryBucket,
		Description: "relay world registry: client id -> host node and lease",
		History:     1,
		Replicas:    node.Replicas(),
	})
	if err != nil {
		return nil, err
	}
	r.kv = kv
	if r.nodes, err = node.KeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      NodesBucket,
		Description: "relay nodes: name -> when it started, until when it runs",
		History:     1,
		Replicas:    node.Replicas(),
	}); err != nil {
		return nil, err
	}
	r.recordNode(ctx, false)
	if r.watch, err = node.watchAll(ctx, kv); err != nil {
		return nil, fmt.Errorf("cluster: watch the world registry: %w", err)
	}
	// The watcher first replays every key, then a nil marks the present.
	for up := range r.watch.Updates() {
		if up == nil {
			break
		}
		// Entries written before this node watched were written when the
		// server says, the best this node can know.
		r.apply(up, up.Created())
	}
	go r.follow(r.watch)
	// The subjects on which this node answers the others: forwarded calls,
	// streams and uploads, and questions about its worlds' users.
	self := r.node.Name()
	for _, s := range []struct {
		on      bool
		subject string
		answer  func(*nats.Msg)
	}{
		{opts.Serve != nil, callSubject(self), r.answer},
		{opts.ServeStream != nil, streamSubject(self), r.answerStream},
		{opts.ServeUpload != nil, uploadSubject(self), r.answerUpload},
		{opts.Events != nil, usersSubject(self), r.answerUsers},
	} {
		if !s.on {
			continue
		}
		if err := r.serveSubject(s.subject, s.answer); err != nil {
			r.watch.Stop()
			return nil, err
		}
	}
	if err := r.answerPings(); err != nil {
		r.watch.Stop()
		return nil, err
	}
	if opts.Replication != nil {
		if err := opts.Replication.start(ctx, r); err != nil {
			r.watch.Stop()
			return nil, err
		}
	}
	r.claimEmbedded(ctx)
	go r.renewLoop()
	return r, nil
}

// KeyValue creates (or updates) a key-value bucket and returns it,
// retrying until the node's start time-out while JetStream cannot place it
// yet: in a new cluster, a bucket kept three ways can be placed only once
// three nodes are up. Set cfg.Replicas to [Node.Replicas] for state the
// cluster shares.
func (node *Node) KeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	wait, cancel := context.WithTimeout(ctx, node.cfg.StartTimeout)
	defer cancel()
	for {
		// A short attempt: a bucket whose stream is electing a leader
		// answers nothing, and asking again is harmless.
		attempt, cancelAttempt := context.WithTimeout(wait, 500*time.Millisecond)
		kv, err := node.js.CreateOrUpdateKeyValue(attempt, cfg)
		cancelAttempt()
		if err == nil {
			return steady.KV(node.js, kv), nil
		}
		select {
		case <-wait.Done():
			return nil, fmt.Errorf("cluster: create the %s bucket: %w", cfg.Bucket, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchAll opens a watcher of every key of kv for the life of ctx. At start
// a bucket may have been created a moment ago, its stream still electing a
// leader, or a loaded machine may answer the creation of the watcher's
// consumer after the client library's time-out of five seconds: the node
// asks again, within its start time-out, rather than fail to start.
func (node *Node) watchAll(ctx context.Context, kv jetstream.KeyValue) (w jetstream.KeyWatcher, err error) {
	err = steady.AskAgain(ctx, node.cfg.StartTimeout, func(err error) {
		node.log.Debug("could not watch a bucket yet; trying again", "error", err)
	}, func() (err error) {
		w, err = kv.WatchAll(ctx)
		return err
	})
	return w, err
}

// follow applies the bucket's changes until the watcher w stops.
func (r *Registry) follow(w jetstream.KeyWatcher) {
	for up := range w.Updates() {
		if up != nil {
			r.apply(up, time.Now())
		}
	}
}

// rewatch replaces the registry's watcher with a new one, which replays
// the bucket and then follows it, at most once a lease. recheck calls it
// when it found a write the watcher had not delivered a lease after the
// write before: the watcher fell behind, or stopped for good (its
// consumer lost with a node and not recreated), and the node would judge
// live hosts' worlds by rechecks alone, which fail while JetStream elects
// the bucket's leader.
func (r *Registry) rewatch() {
	r.mu.Lock()
	if r.stopping.Err() != nil || time.Since(r.rewatched) < r.ttl {
		r.mu.Unlock()
		return
	}
	r.rewatched = time.Now()
	r.mu.Unlock()
	w, err := r.kv.WatchAll(r.stopping)
	if err != nil {
		r.log.Warn("the world registry's watcher fell behind, and a new one could not start", "error", err)
		return
	}
	r.mu.Lock()
	old := r.watch
	r.watch = w
	r.mu.Unlock()
	r.rewatches.Add(1)
	go r.follow(w)
	go func() { _ = old.Stop() }()
	r.log.Warn("the world registry's watcher fell behind: following the registry with a new one")
}

// apply records one change of the bucket, written at seen.
func (r *Registry) apply(up jetstream.KeyValueEntry, seen time.Time) {
	r.applyValue(up.Key(), up.Operation() == jetstream.KeyValuePut, up.Value(), up.Revision(), seen)
}

// applyValue records a world's entry at revision rev, written at seen;
// put is false for a deleted key.
func (r *Registry) applyValue(id string, put bool, value []byte, rev uint64, seen time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.entries[id]; ok && cur.rev > rev {
		return // an older read (lookup) than what the watcher delivered
	}
	if !put {
		delete(r.entries, id)
		delete(r.remotes, id)
		return
	}
	var e Entry
	if err := json.Unmarshal(value, &e); err != nil {
		r.log.Warn("ignoring a bad world registry entry", "clientId", id, "error", err)
		return
	}
	if seen.After(time.Now()) {
		seen = time.Now()
	}
	r.entries[id] = seenEntry{Entry: e, rev: rev, seen: seen}
	if rw := r.remotes[id]; rw != nil && rw.entry != e {
		delete(r.remotes, id)
	}
	// Another node took a world this node holds (a linked world that
	// reconnected elsewhere): it is no longer ours.
	if l := r.owned[id]; l != nil && e.Node != r.node.Name() {
		delete(r.owned, id)
		r.log.Info("world moved to another node", "clientId", id, "host", e.Node)
	}
}

// claimEmbedded claims the embedded worlds of the data directory not yet
// held or refused.
func (r *Registry) claimEmbedded(ctx context.Context) {
	if r.opts.EmbeddedIDs == nil {
		return
	}
	ids, err := r.opts.EmbeddedIDs(ctx)
	if err != nil {
		r.log.Warn("could not list the embedded worlds to claim them", "error", err)
		return
	}
	for _, id := range ids {
		r.mu.RLock()
		_, held := r.owned[id]
		_, refused := r.refused[id]
		r.mu.RUnlock()
		if held || refused {
			continue
		}
		rp := r.opts.Replication
		if rp != nil && (rp.isDemoting(id) || !rp.prepareHost(ctx, id)) {
			continue
		}
		w, err := r.opts.Local.World(ctx, id)
		if err != nil {
			// Gone since it was listed (moved aside to follow it, or
			// removed): nothing to claim.
			continue
		}
		err = r.Claim(ctx, id, world.KindEmbedded, w.Info().Title, false)
		if err != nil && !errors.Is(err, ErrHeldElsewhere) {
			r.log.Warn("could not claim a world", "clientId", id, "error", err)
		}
		if err == nil && rp != nil {
			go rp.hosted(id)
		}
	}
}

// LinkedWorld is a linked world whose socket a node holds.
type LinkedWorld struct{ ClientID, Title string }

// claimLinked claims the linked worlds connected here that this node does
// not hold, unless another node took them since they connected (their
// tabletop reconnected there: the newer socket wins).
func (r *Registry) claimLinked(ctx context.Context) {
	if r.opts.Linked == nil {
		return
	}
	self := r.node.Name()
	for _, lw := range r.opts.Linked() {
		r.mu.RLock()
		_, held := r.owned[lw.ClientID]
		e, known := r.entries[lw.ClientID]
		r.mu.RUnlock()
		if held || (known && e.Node != self && e.live(r.ttl)) {
			continue
		}
		if err := r.Claim(ctx, lw.ClientID, world.KindLinked, lw.Title, false); err != nil && !errors.Is(err, ErrHeldElsewhere) {
			r.log.Warn("could not claim a linked world", "clientId", lw.ClientID, "error", err)
		}
	}
}

// Claim takes the lease of a world for this node: a world no one holds,
// this node's own (after a restart), or one whose lease expired; with
// force (a linked world whose tabletop connected here), whoever holds it.
// A world another live node holds is ErrHeldElsewhere, and an embedded
// one is then refused for good: the same client id on two nodes' disks
// is two different worlds, never one world to serve from either.
func (r *Registry) Claim(ctx context.Context, clientID, kind, title string, force bool) error {
	return r.claim(ctx, clientID, kind, title, force, false)
}

// claim is Claim; with takeOver (a follower taking a replicated world
// over, replicate.go) a world another live node holds is only
// ErrHeldElsewhere: two followers raced, the same world won.
func (r *Registry) claim(ctx context.Context, clientID, kind, title string, force, takeOver bool) error {
	if r.stopping.Err() != nil {
		// A stopping node released its worlds: it must not take them
		// back for a call that arrived meanwhile.
		return fmt.Errorf("claim world %s: %w", clientID, errStopping)
	}
	self := r.node.Name()
	start := time.Now()
	e := Entry{Node: self, Kind: kind, Title: title, Expires: r.now().Add(r.ttl), Lease: r.ttl}
	val, _ := json.Marshal(e)
	var rev uint64
	cur, err := r.leaderGet(ctx, clientID)
	switch {
	case err != nil:
	case !cur.found:
		rev, err = r.kv.Create(ctx, clientID, val)
	default:
		old := seenEntry{rev: cur.rev, seen: cur.created}
		_ = json.Unmarshal(cur.value, &old.Entry)
		r.mu.RLock()
		if known, ok := r.entries[clientID]; ok && known.rev == old.rev {
			old.seen = known.seen
		}
		r.mu.RUnlock()
		if old.Node != self && old.live(r.ttl) && !force {
			r.mu.Lock()
			// Remember the holder, so that this node resolves the world
			// to it even before its watcher delivers the entry.
			if known, ok := r.entries[clientID]; !ok || known.rev < old.rev {
				r.entries[clientID] = old
			}
			if kind == world.KindEmbedded && !takeOver {
				r.refused[clientID] = old.Node
			}
			r.mu.Unlock()
			if kind == world.KindEmbedded && !takeOver {
				r.log.Error("refusing to host a world another node hosts: the same client id is in two nodes' data directories", "clientId", clientID, "host", old.Node)
			}
			return fmt.Errorf("world %s: %w (%s)", clientID, ErrHeldElsewhere, old.Node)
		}
		rev, err = r.kv.Update(ctx, clientID, val, cur.rev)
	}
	if err != nil {
		return fmt.Errorf("claim world %s: %w", clientID, err)
	}
	r.mu.Lock()
	r.owned[clientID] = &lease{kind: kind, title: title, rev: rev, validUntil: start.Add(r.ttl * 9 / 10), renewed: start}
	r.entries[clientID] = seenEntry{Entry: e, rev: rev, seen: start}
	delete(r.remotes, clientID)
	r.mu.Unlock()
	r.log.Debug("hosting world", "clientId", clientID, "kind", kind)
	return nil
}

// Release gives up this node's lease of a world (a linked world whose
// socket closed, a stopping node): the world is unavailable until a node
// claims it again.
func (r *Registry) Release(ctx context.Context, clientID string) {
	r.mu.Lock()
	l := r.owned[clientID]
	delete(r.owned, clientID)
	var rev uint64
	if l != nil {
		rev = l.rev
	}
	r.mu.Unlock()
	if l == nil {
		return
	}
	val, _ := json.Marshal(Entry{Node: r.node.Name(), Kind: l.kind, Title: l.title, Expires: r.now(), Released: true})
	err := r.stalled()
	if err == nil {
		_, err = r.kv.Update(ctx, clientID, val, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		// A renewal whose answer did not come in time (a loaded machine)
		// may have been written all the same: the key is still this
		// node's at a later revision, and the release goes on from there.
		// Another node's hold is left alone.
		if cur, gerr := r.leaderGet(ctx, clientID); gerr == nil && cur.found && cur.rev != rev && r.ownEntry(cur.value) {
			_, err = r.kv.Update(ctx, clientID, val, cur.rev)
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		r.log.Debug("could not release a world's lease (another node may hold it now)", "clientId", clientID, "error", err)
	}
}

// Forget removes a world this node held and has removed (an embedded world
// deleted through the API): its lease ends and its entry leaves the
// registry, so that the other nodes answer 404 for it and its followers
// stop following it and drop their copies. The node's worlds must no
// longer hold it, or the next round would claim it again.
func (r *Registry) Forget(ctx context.Context, clientID string) error {
	r.mu.Lock()
	_, held := r.owned[clientID]
	delete(r.owned, clientID)
	delete(r.remotes, clientID)
	r.mu.Unlock()
	if !held {
		return nil
	}
	// A renewal in flight for the old revision fails once the key is
	// deleted (its revision is no longer the last).
	if err := r.kv.Delete(ctx, clientID); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("cluster: remove world %s from the registry: %w", clientID, err)
	}
	return nil
}

// renewLoop renews the leases every quarter of their length, and claims
// embedded worlds created since the last round.
//
// A host serves for nine tenths of a lease after its last renewal, so a
// renewal that JetStream cannot take (the bucket's leader died with
// another node, and a new one is being elected) leaves it 0.9 − 0.25 =
// 0.65 of a lease: at the default 15 s, 9.75 s, more than nats-server's
// longest election time-out (9 s). A third of the lease left elections
// longer than 5.7 s of the former 10 s lease making live hosts' worlds
// unavailable.
func (r *Registry) renewLoop() {
	defer close(r.done)
	t := time.NewTicker(r.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		// A round may take up to half a lease: a slow write still renews
		// in time, and the next round starts on time. Close ends it at
		// once.
		if r.holdRenewals.Load() {
			continue
		}
		// The node's record goes first, on a time of its own: renewals
		// that get no answer use up their round's time, and the other
		// nodes would take a node whose record they do not see renewed
		// for gone.
		nctx, ncancel := context.WithTimeout(r.stopping, r.ttl/4)
		r.recordNode(nctx, false)
		ncancel()
		ctx, cancel := context.WithTimeout(r.stopping, r.ttl/2)
		r.renew(ctx)
		r.claimEmbedded(ctx)
		r.claimLinked(ctx)
		cancel()
	}
}

// renew renews every lease this node holds. A lease another node took
// meanwhile is dropped; one that could not be written stays, and runs
// out unless a later round succeeds.
func (r *Registry) renew(ctx context.Context) {
	r.mu.RLock()
	ids := make([]string, 0, len(r.owned))
	for id := range r.owned {
		ids = append(ids, id)
	}
	r.mu.RUnlock()
	// A node may host thousands of worlds: their renewals go out a few at
	// a time, so that a round fits well within its half lease.
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for _, id := range ids {
		r.mu.RLock()
		l := r.owned[id]
		var rev uint64
		if l != nil {
			rev = l.rev
		}
		r.mu.RUnlock()
		if l == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r.renewOne(ctx, id, l, rev)
		})
	}
	wg.Wait()
}

// renewParallel is how many lease renewals a node has in flight at once.
const renewParallel = 16

// renewRetry is how soon a renewal that failed (a stream without a
// leader, NATS briefly unreachable) is tried again within its round.
const renewRetry = 250 * time.Millisecond

// renewOne renews one lease, written last at revision rev. A write that
// fails is tried again every renewRetry until the round's context ends:
// JetStream elects a new leader for the bucket in a few seconds after a
// node died, and waiting for the next round instead would let the lease
// run out meanwhile.
func (r *Registry) renewOne(ctx context.Context, id string, l *lease, rev uint64) {
	for {
		start := time.Now()
		e := Entry{Node: r.node.Name(), Kind: l.kind, Title: l.title, Expires: r.now().Add(r.ttl), Lease: r.ttl}
		val, _ := json.Marshal(e)
		next, err := uint64(0), r.stalled()
		if err == nil {
			next, err = r.kv.Update(ctx, id, val, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			// An earlier write whose answer was lost may have renewed the
			// lease already: the key is still this node's then.
			if cur, gerr := r.leaderGet(ctx, id); gerr == nil && cur.found && cur.rev != rev && r.ownEntry(cur.value) {
				rev = cur.rev
				continue
			}
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			// No answer, rather than a refusal: the bucket may be
			// electing a leader, and the world may go on being served
			// a while if the cluster is still there (servable).
			r.mu.Lock()
			if r.owned[id] == l {
				l.unanswered = start
			}
			r.mu.Unlock()
			if l.kind == world.KindEmbedded {
				r.reachPeers(ctx)
			}
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(renewRetry):
				continue
			}
		}
		r.mu.Lock()
		switch {
		case err == nil:
			if r.owned[id] == l {
				l.rev, l.validUntil, l.renewed = next, start.Add(r.ttl*9/10), start
			}
		case errors.Is(err, jetstream.ErrKeyExists):
			// Someone else wrote the key: the world is theirs now. A
			// replicated world's copy becomes a follower's.
			if r.owned[id] == l {
				delete(r.owned, id)
				if rp := r.opts.Replication; rp != nil && l.kind == world.KindEmbedded {
					rp.mu.Lock()
					marked := !rp.demoting[id]
					rp.demoting[id] = true // not followed before it moved aside
					rp.mu.Unlock()
					if marked {
						go rp.demoteMarked(id)
					}
				}
			}
			r.log.Warn("lost the lease of a world to another node", "clientId", id)
		default:
			r.log.Warn("cannot renew the lease of a world", "clientId", id, "error", err, "serving", r.servable(l, time.Now()))
		}
		r.mu.Unlock()
		return
	}
}

// ownEntry reports whether a registry value is a live hold of this node.
func (r *Registry) ownEntry(value []byte) bool {
	var e Entry
	return json.Unmarshal(value, &e) == nil && e.Node == r.node.Name() && !e.Released
}

// Close releases the node's leases, so that the other nodes answer 503 at
// once for its worlds rather than forward to a node that is gone, and
// stops following the registry.
func (r *Registry) Close(ctx context.Context) {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	r.cancel()
	<-r.done
	if r.opts.Replication != nil {
		r.handOff(ctx)
		r.opts.Replication.Close()
	}
	// A cluster that lost its quorum cannot take the releases: the leases
	// then run out on their own, and the node stops all the same.
	ctx, cancel := context.WithTimeout(ctx, min(time.Second, r.ttl/2))
	defer cancel()
	r.mu.RLock()
	ids := make([]string, 0, len(r.owned))
	for id := range r.owned {
		ids = append(ids, id)
	}
	r.mu.RUnlock()
	connected := r.node.nc.IsConnected()
	if !connected {
		// Cut off from NATS: the releases could not be sent, and the
		// leases run out on their own.
		ids = nil
	}
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r.Release(ctx, id)
		})
	}
	wg.Wait()
	if connected {
		r.recordNode(ctx, true)
	}
	// Stopping the watcher deletes its consumer with a request of its
	// own, which a cluster without quorum leaves unanswered for seconds;
	// the servers remove the consumer anyway once the node is gone.
	stopped := make(chan struct{})
	r.mu.RLock()
	watch := r.watch
	r.mu.RUnlock()
	go func() {
		defer close(stopped)
		_ = watch.Stop()
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
	}
}

// handOffMessage answers the calls that reach a stopping node's
// replicated world once it hands the world over (its client id, then the
// node's name).
const handOffMessage = "World %s is unavailable: node %s is stopping and hands it over to another node; the call was not carried out: try again in a moment"

// handOffLimit bounds how long a stopping node waits for the writes under
// way on its replicated worlds; a write still waiting for its append
// afterwards (a log without a leader) is answered by the append's own
// error, which says whether it was applied.
const handOffLimit = 2 * time.Second

// handOff lets the writes under way on the node's replicated worlds
// finish before a stop releases them: were the lease released first, a
// follower would take the world over at once and the log would refuse
// those writes' appends. New calls for these worlds are answered with a
// 503 saying that they were not carried out, and each world's engine
// closes once its writes under way are committed (and appended).
func (r *Registry) handOff(ctx context.Context) {
	r.handingOff.Store(true)
	r.mu.RLock()
	var ids []string
	for id, l := range r.owned {
		if l.kind == world.KindEmbedded {
			ids = append(ids, id)
		}
	}
	r.mu.RUnlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, handOffLimit)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				r.opts.Replication.opts.Worlds.Handoff(id, fmt.Sprintf(handOffMessage, id, r.node.Name()))
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.log.Warn("stopping with writes still under way on a replicated world", "limit", handOffLimit)
	}
}

// World implements server.Worlds.
func (r *Registry) World(ctx context.Context, clientID string) (world.World, error) {
	self := r.node.Name()
	now := time.Now()
	r.mu.RLock()
	l := r.owned[clientID]
	// Renewals move the lease's times under the lock: judge it while
	// holding it.
	servable := l != nil && r.servable(l, now)
	e, known := r.entries[clientID]
	rw := r.remotes[clientID]
	r.mu.RUnlock()
	switch {
	case l != nil:
		if r.isTakingOver(clientID) {
			// The take-over is a few appends and a file move away:
			// calls wait for it rather than fail.
			wait, cancel := context.WithTimeout(ctx, takeOverWait)
			defer cancel()
			for r.isTakingOver(clientID) {
				select {
				case <-wait.Done():
					return nil, world.Errorf(world.ErrUnavailable, "World %s is unavailable: node %s is taking it over from its former host", clientID, self)
				case <-time.After(20 * time.Millisecond):
				}
			}
			return r.World(ctx, clientID)
		}
		if !servable {
			return nil, world.Errorf(world.ErrUnavailable, "World %s is unavailable: node %s could not renew its hosting lease", clientID, self)
		}
		if r.handingOff.Load() && l.kind == world.KindEmbedded && r.opts.Replication != nil {
			return nil, world.Errorf(world.ErrUnavailable, handOffMessage, clientID, self)
		}
		return r.opts.Local.World(ctx, clientID)
	case r.handingOff.Load() && known && e.Node == self && r.opts.Replication != nil:
		// Released by this stopping node: another node takes it over.
		return nil, world.Errorf(world.ErrUnavailable, handOffMessage, clientID, self)
	case known && e.Node != self:
		if e.live(r.ttl) {
			if rw != nil {
				return rw, nil
			}
			return r.remote(clientID, e.Entry), nil
		}
		if e.Released {
			return nil, world.Errorf(world.ErrUnavailable, "World %s is unavailable: its host node %s stopped hosting it", clientID, e.Node)
		}
		if r.recheck(ctx, clientID, e.rev) {
			return r.World(ctx, clientID)
		}
		if r.hostAnswers(ctx, clientID) {
			// The host is there, and serves the world while its
			// renewals get no answer (renewGrace); were it no longer
			// serving it, it says so itself.
			return r.remote(clientID, e.Entry), nil
		}
		return nil, world.Errorf(world.ErrUnavailable, "World %s is unavailable: its host node %s stopped renewing its lease", clientID, e.Node)
	}
	w, err := r.opts.Local.World(ctx, clientID)
	if err != nil && known && e.Node == self && r.opts.Replication != nil && errors.Is(err, world.ErrNotFound) {
		// This node held the world before it restarted and now follows
		// it until its copy holds the whole replicated log.
		return nil, world.Errorf(world.ErrUnavailable, "World %s is unavailable: node %s is bringing its copy up to date", clientID, self)
	}
	if err != nil {
		// Unknown here and not seen in the registry: the host may have
		// claimed it a moment ago, before this node's watcher delivered
		// the entry. Ask the bucket itself before saying 404.
		if !known && errors.Is(err, world.ErrNotFound) && r.lookup(ctx, clientID) {
			return r.World(ctx, clientID)
		}
		return nil, err
	}
	// A world of this node that it does not hold yet (created since the
	// last round, or a linked world whose claim is under way): claim it
	// before serving it.
	info := w.Info()
	kind := cmp.Or(info.Kind, world.KindEmbedded)
	rp := r.opts.Replication
	if kind == world.KindEmbedded && rp != nil && !rp.prepareHost(ctx, clientID) {
		return nil, world.Errorf(world.ErrUnavailable, "World %s is unavailable: node %s is bringing its copy up to date", clientID, self)
	}
	if err := r.Claim(ctx, clientID, kind, info.Title, kind == world.KindLinked); err != nil {
		if errors.Is(err, ErrHeldElsewhere) {
			return r.World(ctx, clientID)
		}
		if errors.Is(err, errStopping) {
			return nil, world.Errorf(world.ErrUnavailable, "World %s is unavailable: node %s is stopping", clientID, self)
		}
		return nil, world.Wrapf(world.ErrUnavailable, err, "World %s is unavailable: the cluster's registry cannot be reached", clientID)
	}
	if kind == world.KindEmbedded && rp != nil {
		go rp.hosted(clientID)
	}
	return w, nil
}

// takeOverWait bounds how long a call waits for this node to finish
// taking its world over.
const takeOverWait = 5 * time.Second

// hostAnswers reports whether the host of a world whose lease looks
// lapsed to this node is still there: a replicated embedded world whose
// entry this node saw written less than a lease and renewGrace ago, and
// whose host answers a ping. A dead host has no one answering its pings,
// and a paused or cut-off one does not answer in time. Each host is
// pinged at most once per recheckEvery, whatever the answer.
func (r *Registry) hostAnswers(ctx context.Context, clientID string) bool {
	r.mu.RLock()
	e, known := r.entries[clientID]
	r.mu.RUnlock()
	if !known || e.Released || e.Kind != world.KindEmbedded || r.opts.Replication == nil || e.Node == r.node.Name() {
		return false
	}
	lease := cmp.Or(e.Lease, r.ttl)
	if time.Since(e.seen) >= lease+renewGrace {
		return false
	}
	r.mu.RLock()
	last, pinged := r.hostSeen[e.Node]
	r.mu.RUnlock()
	if pinged && time.Since(last.at) < recheckEvery {
		return last.answered
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	answered := r.ping(pctx, e.Node) == nil
	if ctx.Err() == nil {
		r.mu.Lock()
		r.hostSeen[e.Node] = pingAnswer{at: time.Now(), answered: answered}
		r.mu.Unlock()
	}
	return answered
}

// pingAnswer is what a host's last ping told (hostAnswers).
type pingAnswer struct {
	at       time.Time
	answered bool
}

// recheckEvery is how often a node reads from the bucket a world whose
// lease looks expired.
const recheckEvery = 250 * time.Millisecond

// recheck reads from the bucket a world whose lease looks expired, seen
// at revision rev, and reports whether the bucket holds a later write.
// The watcher that feeds the registry can fall seconds behind while
// JetStream moves a stream's leader (after a node was killed), and the
// renewals it did not deliver would make a live host's worlds look
// abandoned. A host that really stopped renewing costs one read per
// recheckEvery.
func (r *Registry) recheck(ctx context.Context, clientID string, rev uint64) bool {
	r.mu.Lock()
	if time.Since(r.rechecked[clientID]) < recheckEvery {
		r.mu.Unlock()
		return false
	}
	r.rechecked[clientID] = time.Now()
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	e, err := r.leaderGet(ctx, clientID)
	if err != nil || !e.found || e.rev <= rev {
		return false
	}
	// Written when the bucket's leader says: the best this node can know
	// of a write its watcher has not delivered.
	r.applyValue(clientID, true, e.value, e.rev, e.created)
	go r.rewatch()
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.entries[clientID].rev == e.rev
}

// lookup reads a world's entry from the bucket, records it, and reports
// whether another node holds (or held) the world.
func (r *Registry) lookup(ctx context.Context, clientID string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	e, err := r.leaderGet(ctx, clientID)
	if err != nil || !e.found {
		return false
	}
	r.applyValue(clientID, true, e.value, e.rev, e.created)
	r.mu.RLock()
	defer r.mu.RUnlock()
	known, ok := r.entries[clientID]
	return ok && known.Node != r.node.Name()
}

// latest is a key's last value in the registry bucket, as its stream's
// leader has it.
type latest struct {
	found   bool
	value   []byte
	rev     uint64
	created time.Time
}

// stalled is the error of a request to the registry's bucket while a test
// holds it as if it were electing a leader, or nil.
func (r *Registry) stalled() error {
	if until := r.stallUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return fmt.Errorf("the world registry: %w", nats.ErrNoResponders)
	}
	return nil
}

// leaderGet reads a key's last value from the bucket's stream leader.
// The key-value Get may be answered by any replica (direct get), which
// may not have the latest write yet: a claim must see it, or it would try
// to create a key that exists, and a lookup would call a world that was
// just claimed unknown.
func (r *Registry) leaderGet(ctx context.Context, clientID string) (latest, error) {
	if err := r.stalled(); err != nil {
		return latest{}, err
	}
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + RegistryBucket + "." + clientID})
	var msg *nats.Msg
	err := steady.Do(ctx, r.node.nc, func(attempt context.Context) error {
		var err error
		msg, err = r.node.nc.RequestWithContext(attempt, "$JS.API.STREAM.MSG.GET.KV_"+RegistryBucket, req)
		return err
	})
	if err != nil {
		return latest{}, err
	}
	var resp struct {
		Message *struct {
			Seq  uint64    `json:"seq"`
			Hdrs []byte    `json:"hdrs"`
			Data []byte    `json:"data"`
			Time time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return latest{}, err
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return latest{}, nil
	case resp.Error != nil:
		return latest{}, fmt.Errorf("read the world registry: %s", resp.Error.Description)
	case resp.Message == nil:
		return latest{}, errors.New("read the world registry: empty answer")
	}
	m := resp.Message
	// A deleted or purged key is a marker with the KV-Operation header.
	if bytes.Contains(m.Hdrs, []byte("KV-Operation")) {
		return latest{rev: m.Seq}, nil
	}
	return latest{found: true, value: m.Data, rev: m.Seq, created: m.Time}, nil
}

// remote returns the remote world of an entry, made once per entry.
func (r *Registry) remote(clientID string, e Entry) *remoteWorld {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rw := r.remotes[clientID]; rw != nil && rw.entry == e {
		return rw
	}
	rw := &remoteWorld{reg: r, id: clientID, entry: e}
	r.remotes[clientID] = rw
	return rw
}

// List implements server.Worlds: this node's worlds and the other nodes',
// by client id; a world another node hosts is described from the registry.
func (r *Registry) List(ctx context.Context) ([]world.Info, error) {
	infos, err := r.opts.Local.List(ctx)
	if err != nil {
		return nil, err
	}
	self := r.node.Name()
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := map[string]bool{}
	out := infos[:0]
	for _, info := range infos {
		if e, ok := r.entries[info.ClientID]; ok && e.Node != self && e.live(r.ttl) {
			continue // described below, from its host's entry
		}
		seen[info.ClientID] = true
		out = append(out, info)
	}
	for id, e := range r.entries {
		if seen[id] || e.Node == self || (e.Released && e.Kind == world.KindLinked) {
			continue
		}
		out = append(out, world.Info{ClientID: id, Kind: e.Kind, Title: e.Title, Name: e.Title, Online: e.live(r.ttl)})
	}
	slices.SortFunc(out, func(a, b world.Info) int { return cmp.Compare(a.ClientID, b.ClientID) })
	return out, nil
}

// IDs implements server.Worlds: the client ids of this node's worlds and
// of every world in the registry.
func (r *Registry) IDs(ctx context.Context) ([]string, error) {
	ids, err := r.opts.Local.IDs(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.entries) == 0 {
		return ids, nil
	}
	// A set of the local ids keeps this linear in the number of worlds:
	// it runs on every call that names no world.
	local := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		local[id] = struct{}{}
	}
	for id := range r.entries {
		if _, ok := local[id]; !ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// HostedEmbedded lists the embedded worlds whose lease this node holds.
func (r *Registry) HostedEmbedded() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for id, l := range r.owned {
		if l.kind == world.KindEmbedded {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Hosted is one world in [Registry.Snapshot].
type Hosted struct {
	ClientID string
	Entry
	// Live is true while the host's lease holds, as this node judges it.
	Live bool
	// Refused is set on this node's embedded worlds that another node
	// holds under the same client id.
	Refused bool
}

// Snapshot returns the registry as this node sees it, by client id, with
// the duplicates this node refused.
func (r *Registry) Snapshot() []Hosted {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Hosted, 0, len(r.entries)+len(r.refused))
	for id, e := range r.entries {
		out = append(out, Hosted{ClientID: id, Entry: e.Entry, Live: e.live(r.ttl)})
	}
	for id := range r.refused {
		out = append(out, Hosted{ClientID: id, Entry: Entry{Node: r.node.Name(), Kind: world.KindEmbedded}, Refused: true})
	}
	slices.SortFunc(out, func(a, b Hosted) int {
		return cmp.Or(cmp.Compare(a.ClientID, b.ClientID), cmp.Compare(a.Node, b.Node))
	})
	return out
}

// holds reports whether this node holds the lease of a world and may
// serve it: the lease was renewed recently enough.
func (r *Registry) holds(clientID string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l := r.owned[clientID]
	return l != nil && r.servable(l, time.Now())
}

// setTakingOver marks a world this node is taking over, or no longer.
func (r *Registry) setTakingOver(clientID string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.takingOver[clientID] = true
	} else {
		delete(r.takingOver, clientID)
	}
}

// isTakingOver reports whether this node is taking a world over.
func (r *Registry) isTakingOver(clientID string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.takingOver[clientID]
}

// owns reports whether this node holds the lease of a world, renewed in
// time or not.
func (r *Registry) owns(clientID string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.owned[clientID] != nil
}
