package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/server/signin"
	"github.com/tabletop-relay/relay/wire"
	"github.com/tabletop-relay/relay/world"
)

// EventsConfig configures the event streams. The events themselves come
// from each world's [world.Events].
type EventsConfig struct {
	// MaxStreamsPerKey bounds the open streams of one API key;
	// DefaultMaxStreamsPerKey when 0.
	MaxStreamsPerKey int
	// MaxStreamsPerWorld bounds the open streams on one world;
	// DefaultMaxStreamsPerWorld when 0.
	MaxStreamsPerWorld int
	// QueueSize is the subscribers' queue size, reported in overflow
	// events; DefaultEventQueueSize when 0.
	QueueSize int
}

// DefaultEventQueueSize is the events a subscriber may fall behind before
// its stream is closed, when the relay sets no other (the event hub's
// default).
const DefaultEventQueueSize = 1024

// Default stream limits.
const (
	DefaultMaxStreamsPerKey   = 100
	DefaultMaxStreamsPerWorld = 20000
)

// eventService implements relayv1.EventServiceServer over the worlds'
// events ([world.Events]).
type eventService struct {
	relayv1.UnimplementedEventServiceServer
	limits    *streamLimits
	queueSize int
	// accounts, when set, ends the streams of suspended accounts, which
	// suspensions watches.
	accounts    interface{ Suspension(accountID string) error }
	suspensions *endWatch
	// sessions, when set, ends the streams opened with a console session
	// once the session ends (signed out, expired, ended with its
	// account's password change).
	sessions *endWatch
	// quotas, when set, bounds the open streams of each account.
	quotas *quotaPolicy
}

func newEventService(cfg EventsConfig) *eventService {
	if cfg.MaxStreamsPerKey <= 0 {
		cfg.MaxStreamsPerKey = DefaultMaxStreamsPerKey
	}
	if cfg.MaxStreamsPerWorld <= 0 {
		cfg.MaxStreamsPerWorld = DefaultMaxStreamsPerWorld
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultEventQueueSize
	}
	return &eventService{
		limits:    &streamLimits{perKey: cfg.MaxStreamsPerKey, perWorld: cfg.MaxStreamsPerWorld, byKey: map[string]int{}, byWorld: map[string]int{}, byAccount: map[string]int64{}},
		queueSize: cfg.QueueSize,
	}
}

// setAccounts sets the accounts whose suspension ends their streams.
func (s *eventService) setAccounts(accounts interface{ Suspension(accountID string) error }) {
	s.accounts = accounts
	s.suspensions = &endWatch{check: accounts.Suspension, every: suspensionCheckEvery}
}

// setSessions sets the console sessions whose end ends their streams.
func (s *eventService) setSessions(sessions *signin.Service) {
	s.sessions = &endWatch{every: suspensionCheckEvery, check: func(keyID string) error {
		ctx, cancel := context.WithTimeout(context.Background(), suspensionCheckEvery)
		defer cancel()
		if err := sessions.Ended(ctx, keyID); err != nil {
			return status.Error(codes.Unauthenticated, err.Error())
		}
		return nil
	}}
}

// watchEnds calls end once the key's account is suspended or, for a
// console session's key, once the session ends; stop releases the
// watches.
func (s *eventService) watchEnds(key keys.Key, end func(error)) (stop func()) {
	var stops []func()
	if s.accounts != nil && !key.Operator() {
		stops = append(stops, s.suspensions.watch(key.Account(), func(err error) { end(suspendedError(err)) }))
	}
	if s.sessions != nil && signin.IsSessionKey(key.ID) {
		stops = append(stops, s.sessions.watch(key.ID, end))
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

func (s *eventService) SubscribeHooks(req *relayv1.SubscribeHooksRequest, stream grpc.ServerStreamingServer[relayv1.SubscribeHooksResponse]) error {
	var hooks []string
	for _, h := range strings.Split(req.GetHooks(), ",") {
		if h = strings.TrimSpace(h); h != "" {
			hooks = append(hooks, h)
		}
	}
	r := world.EventRequest{Channel: world.ChannelHooks, Hooks: hooks}
	return s.serve(stream.Context(), r, req.GetLastEventId(), []any{"hooks", hooks}, func(ev *relayv1.Event) error {
		return stream.Send(&relayv1.SubscribeHooksResponse{Event: ev})
	})
}

func (s *eventService) SubscribeEncounters(req *relayv1.SubscribeEncountersRequest, stream grpc.ServerStreamingServer[relayv1.SubscribeEncountersResponse]) error {
	r := world.EventRequest{Channel: world.ChannelCombat, EncounterID: req.GetEncounterId()}
	return s.serve(stream.Context(), r, req.GetLastEventId(), []any{"encounterId", req.GetEncounterId()}, func(ev *relayv1.Event) error {
		return stream.Send(&relayv1.SubscribeEncountersResponse{Event: ev})
	})
}

func (s *eventService) SubscribeActors(req *relayv1.SubscribeActorsRequest, stream grpc.ServerStreamingServer[relayv1.SubscribeActorsResponse]) error {
	r := world.EventRequest{Channel: world.ChannelActor, ActorUUID: req.GetActorUuid()}
	return s.serve(stream.Context(), r, req.GetLastEventId(), []any{"actorUuid", req.GetActorUuid()}, func(ev *relayv1.Event) error {
		return stream.Send(&relayv1.SubscribeActorsResponse{Event: ev})
	})
}

func (s *eventService) SubscribeScenes(req *relayv1.SubscribeScenesRequest, stream grpc.ServerStreamingServer[relayv1.SubscribeScenesResponse]) error {
	r := world.EventRequest{Channel: world.ChannelScene, SceneID: req.GetSceneId()}
	return s.serve(stream.Context(), r, req.GetLastEventId(), []any{"sceneId", req.GetSceneId()}, func(ev *relayv1.Event) error {
		return stream.Send(&relayv1.SubscribeScenesResponse{Event: ev})
	})
}

// serve runs one stream: the checks, then `connected` at once, then a
// `reset` or the replayed events of a resume, then live events until the
// caller goes away, the subscriber overflows or the relay stops. filter is
// the channel's filter as a key, value pair for the `connected` event.
func (s *eventService) serve(ctx context.Context, req world.EventRequest, lastEventID string, filter []any, send func(*relayv1.Event) error) error {
	ctx, stop := s.endWhenRefused(ctx, CallFrom(ctx).Key)
	defer stop()
	err := s.serveStream(ctx, req, lastEventID, filter, send)
	if cause := context.Cause(ctx); ctx.Err() != nil {
		if code := status.Code(cause); code == codes.PermissionDenied || code == codes.Unauthenticated {
			return cause
		}
	}
	return err
}

// suspensionCheckEvery is how often an open stream of an account other
// than the operator's looks at its account's suspension, and a stream of
// a console session at its session: a suspension or a sign-out ends the
// stream within this time, on whichever node serves it.
const suspensionCheckEvery = 250 * time.Millisecond

// endWhenRefused returns a context that ends, with the refusal as its
// cause, once the account of key is suspended or, for a console
// session's key, once the session ends; stop releases it. The operator's
// account is never suspended: its keys' streams are not watched for it.
func (s *eventService) endWhenRefused(ctx context.Context, key keys.Key) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := s.watchEnds(key, cancel)
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// suspendedError is the status that ends a suspended account's stream.
func suspendedError(err error) error {
	return status.Error(codes.PermissionDenied, err.Error())
}

// serveStream is serve without the watch on the account's suspension.
func (s *eventService) serveStream(ctx context.Context, req world.EventRequest, lastEventID string, filter []any, send func(*relayv1.Event) error) error {
	events, call, err := capability[world.Events](ctx)
	if err != nil {
		return err
	}
	if id := strings.TrimSpace(lastEventID); id != "" {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "'lastEventId' must be an event id (a whole number), not '%s'", id)
		}
		req.Resume, req.After = true, n
	}
	clientID := call.World.Info().ClientID
	// A stream opened with a stream ticket binds the ticket to itself and
	// keeps it valid while it is open, so that a browser reconnects to
	// this same stream with it after a drop (see Tickets).
	// What the stream holds is released when it ends: when this returns,
	// or, for a stream its caller carries on alone (detached), when that
	// one ends.
	var cleanups []func()
	detached := false
	defer func() {
		if !detached {
			runCleanups(cleanups)
		}
	}()
	if call.ticket != nil {
		var userID string
		if call.User != nil {
			userID = call.User.ID
		}
		ticketClosed, err := call.ticket.Open(ctx, fmt.Sprintf("%s\x00%s\x00%s\x00%q", call.Method, clientID, userID, filter))
		if err != nil {
			return err
		}
		cleanups = append(cleanups, ticketClosed)
	}
	var accountLimit int64
	if s.quotas != nil {
		lim, err := s.quotas.limitsFor(ctx, call.Key.Account())
		if err != nil {
			return err
		}
		accountLimit = lim.Streams
	}
	release, err := s.limits.acquire(call.Key.ID, clientID, call.Key.Account(), accountLimit)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, release)
	sub, err := events.Subscribe(ctx, call.User, req)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, sub.Close)

	// A local caller that writes each message out (the SSE bridge) is told
	// when more follow at once, so that it writes them together.
	holder, _ := grpc.ServerTransportStreamFromContext(ctx).(SendHolder)
	hold := func(more bool) {
		if holder != nil {
			holder.HoldSends(more)
		}
	}
	pending, _ := sub.(interface{ Pending() int })
	replay := sub.Replay()
	_, hasReset := sub.Reset()
	hold(hasReset || len(replay) > 0)
	if err := send(&relayv1.Event{Name: wire.EventConnected, Data: jsonvalue.Raw(connectedJSON(clientID, req.Channel, filter))}); err != nil {
		return err
	}
	// The backlog: a reset notice, or the replayed events of a resume.
	if r, ok := sub.Reset(); ok {
		reset := map[string]any{
			"lastEventId":    strconv.FormatUint(r.LastEventID, 10),
			"oldestEventId":  strconv.FormatUint(r.Oldest, 10),
			"currentEventId": strconv.FormatUint(r.Head, 10),
			"message":        fmt.Sprintf("Events after %d are no longer available: reload what you follow; live events resume after %d", r.LastEventID, r.Head),
		}
		hold(len(replay) > 0)
		if err := send(&relayv1.Event{Name: wire.EventReset, Data: jsonvalue.Raw(eventJSON(reset))}); err != nil {
			return err
		}
	}
	for i, ev := range replay {
		hold(i < len(replay)-1)
		if err := send(&relayv1.Event{Sequence: ev.Seq, Name: ev.Name, Data: jsonvalue.Raw(ev.Data)}); err != nil {
			return err
		}
	}
	overflow := func(last uint64) {
		hold(false)
		_ = send(s.overflowEvent(last))
	}
	// A caller that writes frames from the hub's writers (the SSE bridge
	// over HTTP/1.1) takes the live events from them: this goroutine only
	// waits for the stream's end, or, when the caller can carry the
	// stream on alone, returns at once.
	if fw, pusher := frameWriter(ctx), asPusher(sub); fw != nil && pusher != nil {
		if d, ok := fw.(StreamDetacher); ok {
			// The stream's releases go with it (gone may come at once);
			// when it cannot detach, they stay here.
			ds := &detachedStream{s: s, w: d, pusher: pusher, cleanups: cleanups}
			if d.Detach(ds.gone) {
				detached = true
				ds.addCleanup(s.watchEnds(call.Key, ds.end))
				pusher.Push(&pushWriter{w: fw, resume: pusher.Resume})
				pusher.WhenDone(ds.ended)
				return nil
			}
		}
		pusher.Push(&pushWriter{w: fw, resume: pusher.Resume})
		err := pusher.Wait(ctx)
		switch {
		case errors.Is(err, world.ErrSubscriberBehind):
			overflow(pusher.Last())
			return nil
		case errors.Is(err, world.ErrSubscriptionEnded):
			return status.Error(codes.Unavailable, "The relay is shutting down")
		}
		return err
	}
	// last is the resume point a client should use after an overflow:
	// everything up to it has been handed to this stream or filtered out.
	last := sub.Start()
	for {
		ev, err := sub.Next(ctx)
		switch {
		case errors.Is(err, world.ErrSubscriberBehind):
			overflow(last)
			return nil
		case errors.Is(err, world.ErrSubscriptionEnded):
			return status.Error(codes.Unavailable, "The relay is shutting down")
		case err != nil:
			return err
		}
		// Events already queued for this subscriber go out with this one.
		hold(pending != nil && pending.Pending() > 0)
		if err := send(&relayv1.Event{Sequence: ev.Seq, Name: ev.Name, Data: jsonvalue.Raw(ev.Data)}); err != nil {
			return err
		}
		last = ev.Seq
	}
}

// overflowEvent is the last event of a stream that fell behind: where to
// resume.
func (s *eventService) overflowEvent(last uint64) *relayv1.Event {
	return &relayv1.Event{Name: wire.EventOverflow, Data: jsonvalue.Raw(eventJSON(map[string]any{
		"lastEventId": strconv.FormatUint(last, 10),
		"message":     fmt.Sprintf("This stream fell more than %d events behind and is closed: reconnect with Last-Event-ID %d to resume", s.queueSize, last),
	}))}
}

// runCleanups releases what a stream held, last taken first.
func runCleanups(cleanups []func()) {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

// StreamDetacher is an EventFrameWriter that can carry a pushed event
// stream on without the handler's goroutine (the SSE bridge over an
// HTTP/1.1 connection that a poller watches): once its backlog is sent,
// the stream's handler hands the stream over and returns, so that no
// goroutine waits on an idle stream. The stream's end then comes from
// either side: the caller calls gone when the connection ends (the peer
// went away, a write failed or stalled), and the handler's side calls
// EndDetached when the subscription ends (it fell behind, the relay shuts
// down, the account was suspended), and after gone.
type StreamDetacher interface {
	EventFrameWriter
	// Detach takes the stream over and reports whether it did; when it
	// did not, the stream goes on in the handler's goroutine. gone may be
	// called at once.
	Detach(gone func()) bool
	// EndDetached ends a detached stream, once: it writes last, when not
	// nil, after every frame handed over before, then closes the
	// connection. err is how the stream ended (nil, or a status), for the
	// request's log line.
	EndDetached(last *relayv1.Event, err error)
}

// detachedStream is a pushed event stream its caller carries on alone
// (see StreamDetacher): it ends once, from whichever side ends first.
type detachedStream struct {
	s      *eventService
	w      StreamDetacher
	pusher world.EventPusher

	mu       sync.Mutex
	cleanups []func()
	done     bool
}

// addCleanup adds a release to run at the end, or runs it at once when the
// stream already ended.
func (d *detachedStream) addCleanup(f func()) {
	d.mu.Lock()
	if !d.done {
		d.cleanups = append(d.cleanups, f)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	f()
}

// gone ends the stream from the caller's side.
func (d *detachedStream) gone() {
	d.end(status.Error(codes.Canceled, "The client went away"))
}

// ended ends the stream from the subscription's side
// ([world.EventPusher.WhenDone]).
func (d *detachedStream) ended(err error) {
	switch {
	case errors.Is(err, world.ErrSubscriberBehind):
		d.end(nil)
	case errors.Is(err, world.ErrSubscriptionEnded):
		d.end(status.Error(codes.Unavailable, "The relay is shutting down"))
	default:
		d.end(err)
	}
}

// end releases what the stream held and has its caller close it; a
// stream that fell behind is told where to resume first.
func (d *detachedStream) end(err error) {
	d.mu.Lock()
	if d.done {
		d.mu.Unlock()
		return
	}
	d.done = true
	cleanups := d.cleanups
	d.cleanups = nil
	d.mu.Unlock()
	var last *relayv1.Event
	if err == nil {
		// The subscription fell behind: the events it took so far are
		// all written or kept by the writer, and the notice goes after
		// them.
		last = d.s.overflowEvent(d.pusher.Last())
	}
	runCleanups(cleanups)
	d.w.EndDetached(last, err)
}

// frameWriter returns the stream's caller as an EventFrameWriter, when it
// is one (a local stream's DirectSender).
func frameWriter(ctx context.Context) EventFrameWriter {
	if t, ok := grpc.ServerTransportStreamFromContext(ctx).(localTransport); ok {
		return t.eventFrameWriter()
	}
	return nil
}

// asPusher returns a subscription that can push its events, or nil.
func asPusher(sub world.EventSubscription) world.EventPusher {
	p, _ := sub.(world.EventPusher)
	return p
}

// pushWriter hands a pushed subscription's events to an EventFrameWriter
// as wire events.
type pushWriter struct {
	w      EventFrameWriter
	resume func()
}

// wireEvents recycles the slices events are handed over in.
var wireEvents = sync.Pool{New: func() any { return new([]wire.Event) }}

// maxPooledWireEvents bounds the capacity of the slices recycled.
const maxPooledWireEvents = 4096

// WriteEvents implements [world.EventWriter].
func (p *pushWriter) WriteEvents(evs []world.Event) bool {
	box := wireEvents.Get().(*[]wire.Event)
	buf := (*box)[:0]
	for _, ev := range evs {
		buf = append(buf, wire.Event{Seq: ev.Seq, Name: ev.Name, Data: ev.Data})
	}
	done := p.w.WriteEvents(buf, p.resume)
	clear(buf)
	if cap(buf) <= maxPooledWireEvents {
		*box = buf[:0]
		wireEvents.Put(box)
	}
	return done
}

// connectedJSON is the payload of the `connected` event: the world, the
// channel and its filter (a key, value pair, or nothing).
func connectedJSON(clientID string, channel world.EventChannel, filter []any) []byte {
	connected := map[string]any{"clientId": clientID, "channel": string(channel)}
	if len(filter) == 2 {
		connected[filter[0].(string)] = filter[1]
	}
	return eventJSON(connected)
}

// streamLimits counts open streams per API key, per world and per
// account.
type streamLimits struct {
	perKey, perWorld int
	// tally, when set, shares the accounts' counts with the other nodes
	// of a cluster: the quota of an account's open streams holds for its
	// streams on every node together.
	tally          StreamTally
	mu             sync.Mutex
	byKey, byWorld map[string]int
	byAccount      map[string]int64
}

// StreamTally shares the number of open event streams of each account
// among the nodes of a cluster. Elsewhere answers from memory (it runs
// when a stream opens, and must make no request to the shared state);
// Changed is told, without waiting, each time this node's counts change,
// and the tally reads them with [Server.OpenStreams] to tell the others.
type StreamTally interface {
	// Elsewhere counts the account's open streams on the other live nodes,
	// as last heard from them.
	Elsewhere(account string) int64
	// Changed tells that this node's counts changed.
	Changed()
}

// elsewhere counts the account's streams on the other nodes (none on a
// node alone).
func (l *streamLimits) elsewhere(account string) int64 {
	if l.tally == nil {
		return 0
	}
	return l.tally.Elsewhere(account)
}

// changed tells the tally, if any, that the counts changed.
func (l *streamLimits) changed() {
	if l.tally != nil {
		l.tally.Changed()
	}
}

// acquire counts a new stream, or refuses it with RESOURCE_EXHAUSTED (HTTP
// 429) past a limit of the key or the world, and with PERMISSION_DENIED
// (HTTP 403) naming the quota past the account's limit of open streams
// (accountLimit; 0 is none), counted on every node of a cluster. The
// returned function releases it.
func (l *streamLimits) acquire(keyID, clientID, account string, accountLimit int64) (func(), error) {
	var elsewhere int64
	if accountLimit > 0 {
		elsewhere = l.elsewhere(account)
	}
	l.mu.Lock()
	if l.byKey[keyID] >= l.perKey {
		l.mu.Unlock()
		return nil, withReason(codes.ResourceExhausted, fmt.Sprintf("Too many event streams for this API key: at most %d may be open at once", l.perKey), wire.ReasonRateLimited)
	}
	if l.byWorld[clientID] >= l.perWorld {
		l.mu.Unlock()
		return nil, withReason(codes.ResourceExhausted, fmt.Sprintf("Too many event streams on world '%s': at most %d may be open at once", clientID, l.perWorld), wire.ReasonRateLimited)
	}
	if accountLimit > 0 && l.byAccount[account]+elsewhere >= accountLimit {
		l.mu.Unlock()
		return nil, quotaReached("streams", accountLimit, "open event streams for the account's keys together; close one first")
	}
	l.byKey[keyID]++
	l.byWorld[clientID]++
	l.byAccount[account]++
	l.mu.Unlock()
	l.changed()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			if l.byKey[keyID]--; l.byKey[keyID] == 0 {
				delete(l.byKey, keyID)
			}
			if l.byWorld[clientID]--; l.byWorld[clientID] == 0 {
				delete(l.byWorld, clientID)
			}
			if l.byAccount[account]--; l.byAccount[account] == 0 {
				delete(l.byAccount, account)
			}
			l.mu.Unlock()
			l.changed()
		})
	}, nil
}

// openBy counts the account's open streams, on every node of a cluster.
func (l *streamLimits) openBy(account string) int64 {
	l.mu.Lock()
	n := l.byAccount[account]
	l.mu.Unlock()
	return n + l.elsewhere(account)
}

// byAccounts copies this node's count of open streams of each account.
func (l *streamLimits) byAccounts() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.byAccount)
}

// eventJSON encodes the payload of an event the stream itself sends (plain
// strings and lists only, so encoding cannot fail).
func eventJSON(v map[string]any) []byte {
	raw, err := world.EncodeJSON(v)
	if err != nil {
		return []byte("{}")
	}
	return raw
}
