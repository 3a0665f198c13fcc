// Package eventbus carries the event streams of a relay cluster between
// its nodes over NATS JetStream.
//
// The host node of a world publishes each of the world's events once, as
// its hub numbered and encoded them (events.Hub.OnPublish), to the subject
// relay.events.<clientId> of one JetStream stream that keeps, per world,
// as many events as a hub's ring (the newest ones), and no more bytes of
// them than a hub's ring: the publishing node purges a world's oldest
// events past that budget (see budget.go). A node with
// subscribers for a world hosted elsewhere runs one feed for that world:
// an ordered consumer of its subject that first reads the kept events (so
// that a subscriber arriving from another node can resume) and then
// follows new ones, feeding them to the node's own hub (events.Hub.Feed).
// The node's subscribers are the hub's subscriptions, so fan-out, event
// ids, filters, read rules, overflow and resume with Last-Event-ID are
// exactly those of a local world; a resume from before the kept events, or
// across events lost between the nodes, gets the documented reset event.
// A feed stops a while (Options.Linger) after the world's last subscriber
// on the node left.
//
// A host that was killed may have committed events it never published (or
// whose publication was being retried): when it takes its worlds back it
// publishes what the stream lacks from their journals (Bus.Backfill),
// before it serves them. A feed whose consumer goes silent while the stream
// holds newer events of its world is started again after the last event
// it delivered (Options.StallAfter), and a resume from an event this node
// has not received yet, but the stream holds, is Unavailable (try again)
// rather than a reset.
//
// Publication is asynchronous and never holds a world's writer up; an
// event JetStream does not acknowledge (while a stream elects a leader
// after a lost server, say) is sent again with the same message id, so it
// is stored once, perhaps after later ones: a feed puts events back in
// order, waiting up to Options.GapWait for a missing one before its
// subscribers get the reset.
//
// Linked worlds' events travel the same way (subject
// relay.linkevents.<clientId>, encoded by package link) once
// Bus.AttachLinked connected the node's link.Events: the node holding a
// tabletop's socket publishes its events, other nodes feed their own
// link.Events, and a node the tabletop reconnects to continues the
// world's numbering after the cluster's last event, so ids never repeat.
// Every subscription to a linked world, on its host too, follows it
// through the bus, so it keeps receiving the world's events when the
// tabletop moves.
// The modules send every channel's events in a cluster
// (link.HubOptions.AllChannels), since no node knows the subscribers of
// the others.
package eventbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// StreamName is the JetStream stream of the worlds' events.
const StreamName = "RELAY_EVENTS"

// subjectToken reports whether a clientId may be a subject's last token:
// letters, digits, '-' and '_', as every client id is (keys.ValidClientID
// and linked worlds' ids); anything else (dots, wildcards) would reach
// other subjects.
func subjectToken(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Subject prefixes: each embedded world's events (as a hub encodes them)
// and each linked world's (as package link encodes them) go to the prefix
// and the world's clientId.
const (
	subjectPrefix       = "relay.events."
	linkedSubjectPrefix = "relay.linkevents."
)

// seqHeader carries an event's sequence number.
const seqHeader = "Relay-Seq"

// Defaults of Options.
const (
	DefaultLinger       = time.Minute
	DefaultCatchUp      = 2 * time.Second
	DefaultPublishQueue = 1 << 16
	DefaultGapWait      = 10 * time.Second
	DefaultStallAfter   = 5 * time.Second
)

// DefaultPublishQueueBytes bounds the bytes of the events waiting to be
// published: a few worlds' rings' worth (events.DefaultRingBytes).
const DefaultPublishQueueBytes = 256 << 20

// Options configure a Bus. The zero value works.
type Options struct {
	// Replicas is how many copies JetStream keeps of the events; one per
	// server the connection knows of, at most three, when 0.
	Replicas int
	// RingSize is how many events of each world the stream keeps, as a
	// hub's ring does; events.DefaultRingSize when 0. Give the hub's.
	RingSize int
	// RingBytes bounds the stored bytes of each world's events in the
	// stream (subject, headers and payload, as JetStream counts them), as
	// a hub's ring bounds its memory; the oldest leave first.
	// events.DefaultRingBytes when 0. Give the hub's (--event-ring-bytes).
	RingBytes int64
	// Linger is how long a feed keeps running after the last subscriber
	// of its world on this node left, so that a reconnecting subscriber
	// finds it running; DefaultLinger when 0.
	Linger time.Duration
	// CatchUp is how long a subscriber resuming from an event this node
	// has not received yet (it came to the subscriber through a faster
	// node) waits for it before getting what the node has;
	// DefaultCatchUp when 0.
	CatchUp time.Duration
	// PublishQueue is how many events may wait to be published; when it
	// is full (NATS unreachable) further events are dropped and counted,
	// and the other nodes' subscribers get the reset event.
	// DefaultPublishQueue when 0.
	PublishQueue int
	// PublishQueueBytes bounds the bytes of those events alike, so that
	// large events waiting for an unreachable NATS cannot grow the node's
	// memory without bound; DefaultPublishQueueBytes when 0.
	PublishQueueBytes int64
	// GapWait is how long a feed holds events that arrived after a
	// missing one, for the missing one to arrive (a publication retried
	// after later ones was stored after them); then the events are lost,
	// and the node's subscribers get the reset event. DefaultGapWait
	// when 0.
	GapWait time.Duration
	// StallAfter is how long a feed may go without an event before the
	// bus asks the events stream whether the world has newer ones; when it
	// has, the feed's consumer is started again after the last event it
	// delivered. An ordered consumer whose stream lost its leader (a
	// killed node) can stay silent for good, and the node's subscribers
	// with it. DefaultStallAfter when 0.
	StallAfter time.Duration
	// Log receives warnings; discarded when nil.
	Log *slog.Logger
}

// Bus publishes the events of the worlds this node hosts and feeds the
// node's hub with those of worlds hosted elsewhere that have subscribers
// here.
type Bus struct {
	js   jetstream.JetStream
	hub  *events.Hub
	opts Options

	queue chan outgoing
	// acks are the published events whose acknowledgements watchAcks
	// awaits, in the order they were published.
	acks chan pendingAck
	// queued is the bytes of the records in queue.
	queued  atomic.Int64
	dropped atomic.Uint64
	retries atomic.Uint64
	// budget keeps each world's events in the stream within
	// Options.RingBytes.
	budget *budget
	stop   chan struct{}
	wg     sync.WaitGroup

	mu sync.Mutex
	// linked is the node's linked worlds' events (AttachLinked).
	linked    *link.Events
	feeds     map[string]*feed // by subject
	closed    bool
	closeOnce sync.Once
}

// outgoing is one event waiting to be published.
type outgoing struct {
	subject  string // the world's subject
	clientID string
	record   world.JournalRecord
}

// sink is where a feed puts a world's events and its subscriptions come
// from: the node's hub for embedded worlds, its link.Events for linked
// ones.
type sink interface {
	Feed(clientID string, records []world.JournalRecord)
	Head(clientID string) uint64
	SubscribeFed(ctx context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error)
}

// hubSink is the hub as a sink.
type hubSink struct{ *events.Hub }

func (h hubSink) SubscribeFed(_ context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	return h.Hub.SubscribeFed(clientID, events.Request{EventRequest: req, User: user})
}

// New creates (or updates) the events stream, makes hub publish the events
// of the worlds it hosts to it, and returns the bus. Close stops it.
func New(ctx context.Context, js jetstream.JetStream, hub *events.Hub, opts Options) (*Bus, error) {
	if opts.RingSize <= 0 {
		opts.RingSize = events.DefaultRingSize
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = events.DefaultRingBytes
	}
	if opts.Linger <= 0 {
		opts.Linger = DefaultLinger
	}
	if opts.CatchUp <= 0 {
		opts.CatchUp = DefaultCatchUp
	}
	if opts.PublishQueue <= 0 {
		opts.PublishQueue = DefaultPublishQueue
	}
	if opts.PublishQueueBytes <= 0 {
		opts.PublishQueueBytes = DefaultPublishQueueBytes
	}
	if opts.GapWait <= 0 {
		opts.GapWait = DefaultGapWait
	}
	if opts.StallAfter <= 0 {
		opts.StallAfter = DefaultStallAfter
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Replicas <= 0 {
		opts.Replicas = max(1, min(3, len(js.Conn().Servers())))
	}
	cfg := jetstream.StreamConfig{
		Name:              StreamName,
		Description:       "relay world events, per world the newest as a hub's ring keeps them",
		Subjects:          []string{subjectPrefix + "*", linkedSubjectPrefix + "*"},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: int64(opts.RingSize),
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.FileStorage,
		Replicas:          opts.Replicas,
		Duplicates:        2 * time.Minute,
	}
	// A cluster that is still forming answers late or has too few servers
	// for the copies: ask again, each attempt bounded, for up to a minute
	// (the cluster's own start time-out) or until ctx ends.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		// A short attempt: a stream that is electing a leader answers
		// nothing, and asking again soon after the election is harmless.
		attempt, cancelAttempt := context.WithTimeout(wait, 500*time.Millisecond)
		_, err := js.CreateOrUpdateStream(attempt, cfg)
		cancelAttempt()
		if err == nil {
			break
		}
		select {
		case <-wait.Done():
			return nil, fmt.Errorf("eventbus: create stream %s: %w", StreamName, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	b := &Bus{js: js, hub: hub, opts: opts, queue: make(chan outgoing, opts.PublishQueue), acks: make(chan pendingAck, maxPendingAcks),
		stop: make(chan struct{}), feeds: map[string]*feed{}}
	b.budget = newBudget(js, opts.RingBytes, opts.RingSize, opts.Log.Warn)
	b.wg.Add(4)
	go b.publish()
	go b.watchAcks()
	go b.watchFeeds()
	go func() {
		defer b.wg.Done()
		b.budget.run(b.stop)
	}()
	hub.OnPublish(func(clientID string, records []world.JournalRecord) { b.enqueue(subjectPrefix, clientID, records) })
	return b, nil
}

// AttachLinked connects the node's linked worlds' events to the cluster:
// the events of the worlds connected here are published, each world's
// numbering continues after the cluster's last event of it when it
// connects here, and every subscription to a linked world's events, here
// or elsewhere, follows the world through the bus (LinkedEvents). Call it
// before any linked world connects.
func (b *Bus) AttachLinked(e *link.Events) {
	b.mu.Lock()
	b.linked = e
	b.mu.Unlock()
	e.OnPublish(func(clientID string, records []world.JournalRecord) {
		b.enqueue(linkedSubjectPrefix, clientID, records)
	})
	// Even the subscribers of a world connected here follow it through
	// the bus: when the tabletop moves to another node they keep
	// receiving its events, and a resume finds the events this node
	// never saw.
	e.Via(func(ctx context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
		return b.LinkedEvents(clientID).Subscribe(ctx, user, req)
	})
	e.ContinueFrom(func(clientID string) uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.CatchUp)
		defer cancel()
		// The node the tabletop left may still be publishing its last
		// events: the last one is taken once it stays the same for a
		// moment (a number taken twice would be stored once, the second
		// event lost).
		seq, err := b.lastSeq(ctx, linkedSubjectPrefix+clientID)
		for err == nil {
			select {
			case <-time.After(settleWait):
			case <-ctx.Done():
				return seq
			}
			var again uint64
			if again, err = b.lastSeq(ctx, linkedSubjectPrefix+clientID); err == nil && again == seq {
				return seq
			}
			seq = max(seq, again)
		}
		b.opts.Log.Warn("could not read the cluster's last event of a linked world; its numbering starts from what this node has", "world", clientID, "error", err)
		return seq
	})
}

// lastSeq returns the sequence of the last event kept on subject (0 when
// none).
func (b *Bus) lastSeq(ctx context.Context, subject string) (uint64, error) {
	stream, err := b.js.Stream(ctx, StreamName)
	if err != nil {
		return 0, err
	}
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(msg.Header.Get(seqHeader), 10, 64)
}

// Backfill publishes the events of a world this node hosts that the
// events stream lacks: those of its journal after the stream's last one.
// A node that was killed, or stopped while the cluster could not take its
// last events, has them in its journal (they were committed with their
// writes) but never published them; without them the other nodes'
// subscribers would wait for them and then get the reset event. Call it
// when the node takes its worlds at start, before it serves them: read
// is the world's journal (world.Engine.ReadJournal). It returns how many
// events it published. A copy that reached the stream after all is
// stored once (same message id).
func (b *Bus) Backfill(ctx context.Context, clientID string, read func(ctx context.Context, from uint64, fn func(world.JournalRecord) error) error) (int, error) {
	if !subjectToken(clientID) {
		return 0, nil
	}
	subject := subjectPrefix + clientID
	last, err := b.lastSeq(ctx, subject)
	if err != nil {
		return 0, fmt.Errorf("eventbus: the last kept event of world %s: %w", clientID, err)
	}
	from := last + 1
	if first, holes, err := b.holes(ctx, subject, last); err != nil {
		return 0, fmt.Errorf("eventbus: the kept events of world %s: %w", clientID, err)
	} else if holes {
		// Events published just before the kill may have been stored
		// after later ones were lost (a publication retried): publish
		// again from the first kept one. Those the stream has are stored
		// once (same message id) while they are recent; an older one is
		// stored a second time, which the nodes' feeds skip.
		from = first
	}
	var acks []jetstream.PubAckFuture
	err = read(ctx, from, func(rec world.JournalRecord) error {
		ack, err := b.js.PublishMsgAsync(eventMsg(subject, rec))
		if err != nil {
			return err
		}
		acks = append(acks, ack)
		return nil
	})
	for _, ack := range acks {
		select {
		case <-ack.Ok():
		case aerr := <-ack.Err():
			err = errors.Join(err, aerr)
		case <-ctx.Done():
			return 0, errors.Join(err, ctx.Err())
		}
	}
	if err != nil {
		return 0, fmt.Errorf("eventbus: publish the missing events of world %s: %w", clientID, err)
	}
	// The stream may hold more of the world than its budget: events a
	// relay without the budget kept, or those just published again.
	b.budget.check(subject)
	return len(acks), nil
}

// holes reports whether the events stream lacks events of subject between
// the first one it keeps and last (its last): it keeps fewer than they
// span. first is the first one's sequence.
func (b *Bus) holes(ctx context.Context, subject string, last uint64) (first uint64, holes bool, err error) {
	if last == 0 {
		return 0, false, nil
	}
	stream, err := b.js.Stream(ctx, StreamName)
	if err != nil {
		return 0, false, err
	}
	msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		return 0, false, err
	}
	if first, err = strconv.ParseUint(msg.Header.Get(seqHeader), 10, 64); err != nil || first > last {
		return 0, false, err
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, false, err
	}
	return first, info.State.Subjects[subject] < last-first+1, nil
}

// eventMsg is the message of one event of subject: its data, its
// sequence, and a message id that makes a second copy stored once.
func eventMsg(subject string, rec world.JournalRecord) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = rec.Data
	seq := strconv.FormatUint(rec.Seq, 10)
	msg.Header.Set(seqHeader, seq)
	msg.Header.Set(jetstream.MsgIDHeader, subject+"."+seq)
	return msg
}

// Forget removes the events of an embedded world that was deleted from
// the events stream, in the background: a world made later under the same
// id numbers its events afresh, and a world that is gone keeps no storage.
func (b *Bus) Forget(clientID string) {
	if subjectToken(clientID) {
		b.budget.forget(subjectPrefix+clientID, 0)
	}
}

// ForgetLinked removes the events of a linked world that was unpaired
// from the events stream, in the background, all but the last: the node a
// world paired again connects to numbers on after it, so ids never
// repeat.
func (b *Bus) ForgetLinked(clientID string) {
	if subjectToken(clientID) {
		b.budget.forget(linkedSubjectPrefix+clientID, 1)
	}
}

// Dropped counts the events that could not be queued for publishing.
func (b *Bus) Dropped() uint64 { return b.dropped.Load() }

// enqueue is the hub's publish tap: it queues and never blocks the world.
func (b *Bus) enqueue(prefix, clientID string, records []world.JournalRecord) {
	if !subjectToken(clientID) {
		return
	}
	for _, r := range records {
		size := int64(len(r.Data))
		if n := b.queued.Load(); n > 0 && n+size > b.opts.PublishQueueBytes {
			b.drop(clientID)
			continue
		}
		b.queued.Add(size)
		select {
		case b.queue <- outgoing{subject: prefix + clientID, clientID: clientID, record: r}:
		default:
			b.queued.Add(-size)
			b.drop(clientID)
		}
	}
}

// drop counts an event that could not be queued for publication, and
// logs the first.
func (b *Bus) drop(clientID string) {
	if b.dropped.Add(1) == 1 {
		b.opts.Log.Warn("events could not be published to the other nodes: the queue is full", "world", clientID)
	}
}

// publish sends the queued events in order, without waiting for each
// acknowledgement (JetStream keeps the order of one connection's
// messages). Each carries its world and sequence as its message id, so a
// retried publication is stored once.
func (b *Bus) publish() {
	defer b.wg.Done()
	for {
		var o outgoing
		select {
		case o = <-b.queue:
		case <-b.stop:
			// Stopping: what is queued still goes out.
			select {
			case o = <-b.queue:
			default:
				return
			}
		}
		b.queued.Add(-int64(len(o.record.Data)))
		b.send(o, 0)
	}
}

// Publication retries: an event JetStream did not acknowledge (its stream
// electing a leader after a lost server, say) is sent again, with the same
// message id (stored once), up to publishRetries times, publishBackoff
// apart. It may then be stored after later events of its world; the
// feeds put them back in order (see reorder).
// settleWait is how long the last event of a linked world must stay the
// last before a node it moved to numbers on after it.
const settleWait = 50 * time.Millisecond

const (
	publishRetries = 20
	publishBackoff = 250 * time.Millisecond
	publishAckWait = 2 * time.Second
)

// send publishes one event without waiting for its acknowledgement, and
// sends it again when it is not acknowledged.
func (b *Bus) send(o outgoing, attempt int) {
	ack, err := b.js.PublishMsgAsync(eventMsg(o.subject, o.record))
	if err != nil {
		b.retry(o, attempt, err)
		return
	}
	select {
	case b.acks <- pendingAck{ack: ack, out: o, attempt: attempt, due: time.Now().Add(publishAckWait)}:
	case <-b.stop:
		// Stopping: the event went out, and Close waits a while for the
		// acknowledgements of the last ones (a node that hosts the world
		// again backfills what the stream lacks).
	}
}

// retry sends an event again after publishBackoff, unless it was its
// last attempt or the bus stops.
func (b *Bus) retry(o outgoing, attempt int, err error) {
	if attempt+1 >= publishRetries {
		b.opts.Log.Warn("an event was not stored for the other nodes", "world", o.clientID, "seq", o.record.Seq, "error", err)
		return
	}
	b.retries.Add(1)
	go func() {
		select {
		case <-time.After(publishBackoff):
			b.send(o, attempt+1)
		case <-b.stop:
		}
	}()
}

// maxPendingAcks bounds the acknowledgements awaited at once: more than
// JetStream lets a connection leave unacknowledged by default (4,000).
// When it is reached, publishing waits for the oldest.
const maxPendingAcks = 1 << 13

// pendingAck is a published event awaiting its acknowledgement until due.
type pendingAck struct {
	ack     jetstream.PubAckFuture
	out     outgoing
	attempt int
	due     time.Time
}

// watchAcks awaits the acknowledgements of the published events, oldest
// first, and sends again an event that was refused or not acknowledged
// in time. One goroutine and one timer serve every event: a goroutine and
// a timer for each, as there were, cost a write in a cluster more than
// its publication did. The acknowledgements come in about the order of
// the publications, and each event's time limit runs from its own
// publication, so waiting for an old one does not delay the verdict on
// later ones.
func (b *Bus) watchAcks() {
	defer b.wg.Done()
	timer := time.NewTimer(publishAckWait)
	defer timer.Stop()
	for {
		var p pendingAck
		select {
		case p = <-b.acks:
		case <-b.stop:
			return
		}
		select {
		case pa := <-p.ack.Ok():
			b.acknowledged(p, pa)
			continue
		case err := <-p.ack.Err():
			b.retry(p.out, p.attempt, err)
			continue
		default:
		}
		timer.Reset(time.Until(p.due))
		select {
		case pa := <-p.ack.Ok():
			b.acknowledged(p, pa)
		case err := <-p.ack.Err():
			b.retry(p.out, p.attempt, err)
		case <-timer.C:
			// A stream that lost its leader may never answer.
			b.retry(p.out, p.attempt, errors.New("no acknowledgement"))
		case <-b.stop:
			return
		}
		timer.Stop()
	}
}

// acknowledged notes a stored event's acknowledgement, and counts the
// event against its world's byte budget.
func (b *Bus) acknowledged(p pendingAck, pa *jetstream.PubAck) {
	if pa == nil {
		return
	}
	if pa.Duplicate && p.attempt == 0 {
		// Not a retry of ours: another node numbered an event of this
		// world the same, and this one was not stored.
		b.opts.Log.Warn("an event's id was taken already; the other nodes do not get it", "subject", p.out.subject, "seq", p.out.record.Seq)
		return
	}
	// A retry's duplicate is the first attempt, stored after all: its
	// sequence is the stored copy's, counted once.
	b.budget.stored(p.out.subject, p.out.record.Seq, pa.Sequence, storedSize(p.out.subject, p.out.record.Seq, len(p.out.record.Data)))
}

// Close stops publishing and every feed; subscriptions fed by the bus get
// no more events.
func (b *Bus) Close() { b.closeOnce.Do(b.close) }

func (b *Bus) close() {
	b.hub.OnPublish(nil)
	b.mu.Lock()
	if b.linked != nil {
		b.linked.OnPublish(nil)
	}
	b.mu.Unlock()
	b.mu.Lock()
	b.closed = true
	feeds := b.feeds
	b.feeds = map[string]*feed{}
	b.mu.Unlock()
	for _, f := range feeds {
		f.halt()
	}
	close(b.stop)
	b.wg.Wait()
	// The events published last are acknowledged in a few milliseconds by
	// a healthy cluster. One that lost its quorum never acknowledges them:
	// the node stops all the same, and when it hosts the worlds again it
	// publishes what the events stream lacks from their journals
	// (Backfill).
	select {
	case <-b.js.PublishAsyncComplete():
	case <-time.After(closeFlushWait):
	}
}

// closeFlushWait is how long Close waits for the acknowledgements of the
// events published last.
const closeFlushWait = time.Second

// Events returns the event streams of a world hosted by another node,
// served on this node (a world.Events for that world).
func (b *Bus) Events(clientID string) world.Events {
	return remoteEvents{b: b, subject: subjectPrefix + clientID, clientID: clientID, sink: hubSink{b.hub}}
}

// LinkedEvents returns the event streams of a linked world connected to
// another node, served on this node; AttachLinked must have been called.
func (b *Bus) LinkedEvents(clientID string) world.Events {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := remoteEvents{b: b, subject: linkedSubjectPrefix + clientID, clientID: clientID}
	if b.linked != nil {
		r.sink = b.linked
	}
	return r
}

// remoteEvents is world.Events for a world hosted elsewhere.
type remoteEvents struct {
	b        *Bus
	subject  string
	clientID string
	sink     sink
}

// Subscribe implements world.Events.
func (r remoteEvents) Subscribe(ctx context.Context, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	if !subjectToken(r.clientID) {
		return nil, world.Errorf(world.ErrNotFound, "World not found: %q", r.clientID)
	}
	if r.sink == nil {
		return nil, world.Errorf(world.ErrUnimplemented, "World '%s' does not offer event streams on this node", r.clientID)
	}
	return r.b.subscribe(ctx, r.subject, r.clientID, r.sink, user, req)
}

// Subscribe starts a subscription on the events of a world hosted by
// another node: it starts the world's feed when it is not running, waits
// until the feed read the kept events, and, for a resume from an event
// this node has not received yet, waits up to Options.CatchUp for it.
func (b *Bus) Subscribe(ctx context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	return b.Events(clientID).Subscribe(ctx, user, req)
}

// subscribe subscribes to the events of subject, fed to sink.
func (b *Bus) subscribe(ctx context.Context, subject, clientID string, sink sink, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	f, err := b.acquire(subject, clientID, sink)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			b.release(f)
		}
	}()
	select {
	case <-f.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, world.Wrapf(world.ErrUnavailable, f.err, "The events of world %s are not available: %v", clientID, f.err)
	}
	if req.Resume && req.After > sink.Head(clientID) {
		began := time.Now()
		deadline := began.Add(b.opts.CatchUp)
		kicked := false
		for req.After > sink.Head(clientID) && time.Now().Before(deadline) {
			if !kicked && time.Since(began) > b.opts.CatchUp/2 {
				// Still behind half-way: the feed's consumer may have gone
				// silent. Look now rather than at the next quiet spell, and
				// give the feed the time to catch up once started again.
				kicked = true
				deadline = deadline.Add(b.opts.CatchUp)
				go b.unstall(f)
			}
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if req.After > sink.Head(clientID) {
			// Still behind. When the events stream holds the event resumed
			// from, or cannot say (its leader being elected after a lost
			// node), this node is only late: the subscriber is told to try
			// again, rather than given a reset that would make it drop
			// events the cluster still keeps. An id the stream never had
			// gets the reset, as on the host.
			lctx, lcancel := context.WithTimeout(ctx, time.Second)
			last, err := b.lastSeq(lctx, subject)
			lcancel()
			if err != nil || last >= req.After {
				return nil, world.Errorf(world.ErrUnavailable, "The events of world %s after %d have not reached this node yet: try again", clientID, req.After)
			}
		}
	}
	sub, err := sink.SubscribeFed(ctx, clientID, user, req)
	if err != nil {
		return nil, err
	}
	ok = true
	release := func() { b.release(f) }
	if p, canPush := sub.(world.EventPusher); canPush {
		// The hub's writer goroutines may write it, as they write the
		// streams of the node's own worlds.
		return &fedPusher{EventPusher: p, release: release}, nil
	}
	return &fedSubscription{EventSubscription: sub, release: release}, nil
}

// fedPusher is a fedSubscription whose live events the hub's writers can
// push (world.EventPusher).
type fedPusher struct {
	world.EventPusher
	once    sync.Once
	release func()
}

// Close ends the subscription and lets go of the feed.
func (s *fedPusher) Close() {
	s.EventPusher.Close()
	s.once.Do(s.release)
}

// fedSubscription is a subscription that holds its world's feed.
type fedSubscription struct {
	world.EventSubscription
	once    sync.Once
	release func()
}

// Close ends the subscription and lets go of the feed.
func (s *fedSubscription) Close() {
	s.EventSubscription.Close()
	s.once.Do(s.release)
}

// feed is the consumer that brings one world's events to this node.
type feed struct {
	subject  string
	clientID string
	sink     sink
	refs     int         // subscriptions holding it; the bus's mu guards it
	linger   *time.Timer // stops the feed once unused; the bus's mu guards it
	ready    chan struct{}
	err      error // why the feed could not start; set before ready closes
	readyOne sync.Once
	// started is closed when run returns; cancel and consume are set by
	// then.
	started chan struct{}
	cancel  context.CancelFunc
	order   *reorder
	once    sync.Once

	// stream and handle start the feed's consumer again (restart).
	stream jetstream.Stream
	handle func(jetstream.Msg)
	// lastSeq is the stream sequence of the last message delivered;
	// quiet is when the feed last delivered one, or was last checked
	// (UnixNano).
	lastSeq atomic.Uint64
	quiet   atomic.Int64
	// restarts counts the consumer's restarts (for tests); unstalling is
	// set while unstall looks at the feed.
	restarts   atomic.Int64
	unstalling atomic.Bool

	mu      sync.Mutex // guards consume and halted
	consume jetstream.ConsumeContext
	halted  bool
}

// markReady lets the subscribers waiting for the feed go, with the error
// that kept it from starting, if any.
func (f *feed) markReady(err error) {
	f.readyOne.Do(func() {
		f.err = err
		close(f.ready)
	})
}

// acquire returns the world's running feed, starting it when needed.
func (b *Bus) acquire(subject, clientID string, sink sink) (*feed, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, world.Errorf(world.ErrUnavailable, "The events of world %s are not available: the node is stopping", clientID)
	}
	f := b.feeds[subject]
	if f == nil || f.failed() {
		f = &feed{subject: subject, clientID: clientID, sink: sink, ready: make(chan struct{}), started: make(chan struct{})}
		b.feeds[subject] = f
		go b.run(f)
	}
	if f.linger != nil {
		f.linger.Stop()
		f.linger = nil
	}
	f.refs++
	return f, nil
}

// failed reports whether the feed could not start.
func (f *feed) failed() bool {
	select {
	case <-f.ready:
		return f.err != nil
	default:
		return false
	}
}

// release lets go of a feed; the last one out stops it after the linger.
func (b *Bus) release(f *feed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.refs--; f.refs > 0 || b.closed {
		return
	}
	f.linger = time.AfterFunc(b.opts.Linger, func() {
		b.mu.Lock()
		if f.refs > 0 || b.feeds[f.subject] != f {
			b.mu.Unlock()
			return
		}
		delete(b.feeds, f.subject)
		b.mu.Unlock()
		f.halt()
	})
}

// halt stops the feed's consumer.
func (f *feed) halt() {
	f.once.Do(func() {
		<-f.started
		f.mu.Lock()
		f.halted = true
		if f.consume != nil {
			f.consume.Stop()
		}
		f.mu.Unlock()
		if f.order != nil {
			f.order.stop()
		}
		if f.cancel != nil {
			f.cancel()
		}
	})
}

// run starts the world's consumer and marks the feed ready once it read
// the kept events.
func (b *Bus) run(f *feed) {
	defer close(f.started)
	fail := f.markReady
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	subject := f.subject
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	stream, err := b.js.Stream(sctx, StreamName)
	if err != nil {
		fail(err)
		return
	}
	empty := false
	if _, err := stream.GetLastMsgForSubject(sctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
		empty = true
	} else if err != nil {
		fail(err)
		return
	}
	cons, err := stream.OrderedConsumer(sctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		fail(err)
		return
	}
	if empty {
		// The stream starts here, with nothing kept.
		f.sink.Feed(f.clientID, nil)
	}
	order := &reorder{sink: f.sink, clientID: f.clientID, wait: b.opts.GapWait, head: f.sink.Head(f.clientID)}
	f.order = order
	f.stream = stream
	f.quiet.Store(time.Now().UnixNano())
	f.handle = func(msg jetstream.Msg) {
		seq, err := strconv.ParseUint(msg.Headers().Get(seqHeader), 10, 64)
		if err == nil {
			order.add(world.JournalRecord{Seq: seq, Data: msg.Data()})
		}
		f.quiet.Store(time.Now().UnixNano())
		if meta, err := msg.Metadata(); err == nil {
			f.lastSeq.Store(max(f.lastSeq.Load(), meta.Sequence.Stream))
			if meta.NumPending == 0 {
				f.markReady(nil)
			}
		}
	}
	consume, err := cons.Consume(f.handle, b.consumeErrors(f))
	if err != nil {
		fail(err)
		return
	}
	f.mu.Lock()
	f.consume = consume
	f.mu.Unlock()
	if empty {
		f.markReady(nil)
	}
}

// consumeErrors logs what a feed's consumer reports (it recovers from
// most of it by itself; watchFeeds handles the rest).
func (b *Bus) consumeErrors(f *feed) jetstream.PullConsumeOpt {
	return jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		b.opts.Log.Debug("the consumer of a world's events reported an error", "subject", f.subject, "error", err)
	})
}

// watchFeeds starts again, every StallAfter, the consumers of the feeds
// that have been quiet that long while the events stream holds newer
// events of their world.
func (b *Bus) watchFeeds() {
	defer b.wg.Done()
	t := time.NewTicker(b.opts.StallAfter / 2)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		b.mu.Lock()
		feeds := make([]*feed, 0, len(b.feeds))
		for _, f := range b.feeds {
			feeds = append(feeds, f)
		}
		b.mu.Unlock()
		for _, f := range feeds {
			select {
			case <-f.started:
			default:
				continue // still starting
			}
			if f.failed() || f.stream == nil || time.Since(time.Unix(0, f.quiet.Load())) < b.opts.StallAfter {
				continue
			}
			f.quiet.Store(time.Now().UnixNano())
			go b.unstall(f)
		}
	}
}

// unstall asks the events stream for the last event of a feed's world,
// and starts the feed's consumer again after the last event it delivered
// when the stream holds a later one that the feed still has not delivered
// a moment later (one just stored may be on its way).
func (b *Bus) unstall(f *feed) {
	if !f.unstalling.CompareAndSwap(false, true) {
		return
	}
	defer f.unstalling.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.StallAfter/2)
	defer cancel()
	msg, err := f.stream.GetLastMsgForSubject(ctx, f.subject)
	if err != nil || msg.Sequence <= f.lastSeq.Load() {
		return // nothing newer, or the stream cannot say yet
	}
	select {
	case <-time.After(min(time.Second, b.opts.StallAfter/4)):
	case <-ctx.Done():
		return
	}
	if f.lastSeq.Load() >= msg.Sequence {
		return // delivered meanwhile: the consumer works
	}
	cons, err := f.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    f.lastSeq.Load() + 1,
	})
	if err != nil {
		return // tried again after the next quiet spell
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.halted {
		return
	}
	consume, err := cons.Consume(f.handle, b.consumeErrors(f))
	if err != nil {
		return
	}
	if f.consume != nil {
		f.consume.Stop()
	}
	f.consume = consume
	f.restarts.Add(1)
	b.opts.Log.Warn("the consumer of a world's events had stopped delivering: started again", "subject", f.subject, "after", f.lastSeq.Load())
}

// reorder puts a world's events back in order before they are fed: one
// that arrives after a missing one waits, with the ones after it, until
// the missing one arrives or GapWait passed (then the sink sees the gap).
// A publication retried after later ones is stored after them, which is
// the only way events arrive out of order.
type reorder struct {
	sink     sink
	clientID string
	wait     time.Duration

	mu      sync.Mutex
	started bool   // an event was fed
	head    uint64 // the last event fed
	waiting map[uint64]world.JournalRecord
	timer   *time.Timer
	stopped bool
}

// add takes one event as it arrived.
func (r *reorder) add(rec world.JournalRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopped || rec.Seq <= r.head:
		return
	case !r.started || rec.Seq == r.head+1:
		// The first event the feed sees (the oldest kept, which the sink
		// judges) or the next.
		r.started = true
		r.feedLocked([]world.JournalRecord{rec})
		r.drainLocked()
		return
	}
	if r.waiting == nil {
		r.waiting = map[uint64]world.JournalRecord{}
	}
	r.waiting[rec.Seq] = rec
	if r.timer == nil {
		r.timer = time.AfterFunc(r.wait, r.giveUp)
	}
}

// feedLocked hands records, in order, to the sink.
func (r *reorder) feedLocked(recs []world.JournalRecord) {
	r.sink.Feed(r.clientID, recs)
	r.head = recs[len(recs)-1].Seq
}

// drainLocked feeds the waiting events that follow on now.
func (r *reorder) drainLocked() {
	for {
		rec, ok := r.waiting[r.head+1]
		if !ok {
			break
		}
		delete(r.waiting, rec.Seq)
		r.feedLocked([]world.JournalRecord{rec})
	}
	if len(r.waiting) == 0 && r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// giveUp feeds the waiting events after the wait: the missing ones are
// lost.
func (r *reorder) giveUp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	if r.stopped || len(r.waiting) == 0 {
		return
	}
	seqs := make([]uint64, 0, len(r.waiting))
	for seq := range r.waiting {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	recs := make([]world.JournalRecord, 0, len(seqs))
	for _, seq := range seqs {
		recs = append(recs, r.waiting[seq])
	}
	clear(r.waiting)
	r.feedLocked(recs)
}

// stop drops what waits; the feed is ending.
func (r *reorder) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	clear(r.waiting)
}
