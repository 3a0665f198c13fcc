package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "relay/gen/go/relay/v1"
	"relay/world"
	"relay/world/events"
)

// EventsConfig configures the event streams.
type EventsConfig struct {
	// Hub publishes the worlds' events; without it the streams answer
	// Unimplemented.
	Hub *events.Hub
	// MaxStreamsPerKey bounds the open streams of one API key;
	// DefaultMaxStreamsPerKey when 0.
	MaxStreamsPerKey int
	// MaxStreamsPerWorld bounds the open streams on one world;
	// DefaultMaxStreamsPerWorld when 0.
	MaxStreamsPerWorld int
	// QueueSize is the subscribers' queue size, reported in overflow
	// events; the hub's default when 0.
	QueueSize int
}

// Default stream limits.
const (
	DefaultMaxStreamsPerKey   = 100
	DefaultMaxStreamsPerWorld = 20000
)

// Names of the events the streams add to the world's own.
const (
	eventConnected = "connected"
	eventReset     = "reset"
	eventOverflow  = "overflow"
)

// eventService implements relayv1.EventServiceServer over the event hub.
type eventService struct {
	relayv1.UnimplementedEventServiceServer
	hub       *events.Hub
	limits    *streamLimits
	queueSize int
}

func newEventService(cfg EventsConfig) *eventService {
	if cfg.MaxStreamsPerKey <= 0 {
		cfg.MaxStreamsPerKey = DefaultMaxStreamsPerKey
	}
	if cfg.MaxStreamsPerWorld <= 0 {
		cfg.MaxStreamsPerWorld = DefaultMaxStreamsPerWorld
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = events.DefaultQueueSize
	}
	return &eventService{
		hub:       cfg.Hub,
		limits:    &streamLimits{perKey: cfg.MaxStreamsPerKey, perWorld: cfg.MaxStreamsPerWorld, byKey: map[string]int{}, byWorld: map[string]int{}},
		queueSize: cfg.QueueSize,
	}
}

func (s *eventService) SubscribeHooks(req *relayv1.SubscribeHooksRequest, stream grpc.ServerStreamingServer[relayv1.SubscribeHooksResponse]) error {
	var hooks []string
	for _, h := range strings.Split(req.GetHooks(), ",") {
		if h = strings.TrimSpace(h); h != "" {
			hooks = append(hooks, h)
		}
	}
	r := events.Request{Channel: events.ChannelHooks, Hooks: hooks}
	return s.serve(stream.Context(), r, req.GetLastEventId(), []any{"hooks", hooks}, func(ev *relayv1.Event) error {
		return stream.Send(&relayv1.SubscribeHooksResponse{Event: ev})
	})
}

func (s *eventService) SubscribeEncounters(req *relayv1.SubscribeEncountersRequest, stream grpc.ServerStreamingServer[relayv1.SubscribeEncountersResponse]) error {
	r := events.Request{Channel: events.ChannelCombat, EncounterID: req.GetEncounterId()}
	return s.serve(stream.Context(), r, req.GetLastEventId(), []any{"encounterId", req.GetEncounterId()}, func(ev *relayv1.Event) error {
		return stream.Send(&relayv1.SubscribeEncountersResponse{Event: ev})
	})
}

func (s *eventService) SubscribeActors(req *relayv1.SubscribeActorsRequest, stream grpc.ServerStreamingServer[relayv1.SubscribeActorsResponse]) error {
	r := events.Request{Channel: events.ChannelActor, ActorUUID: req.GetActorUuid()}
	return s.serve(stream.Context(), r, req.GetLastEventId(), []any{"actorUuid", req.GetActorUuid()}, func(ev *relayv1.Event) error {
		return stream.Send(&relayv1.SubscribeActorsResponse{Event: ev})
	})
}

func (s *eventService) SubscribeScenes(req *relayv1.SubscribeScenesRequest, stream grpc.ServerStreamingServer[relayv1.SubscribeScenesResponse]) error {
	r := events.Request{Channel: events.ChannelScene, SceneID: req.GetSceneId()}
	return s.serve(stream.Context(), r, req.GetLastEventId(), []any{"sceneId", req.GetSceneId()}, func(ev *relayv1.Event) error {
		return stream.Send(&relayv1.SubscribeScenesResponse{Event: ev})
	})
}

// serve runs one stream: the checks, then `connected` at once, then a
// `reset` or the replayed events of a resume, then live events until the
// caller goes away, the subscriber overflows or the relay stops. filter is
// the channel's filter as a key, value pair for the `connected` event.
func (s *eventService) serve(ctx context.Context, req events.Request, lastEventID string, filter []any, send func(*relayv1.Event) error) error {
	if s.hub == nil {
		return status.Error(codes.Unimplemented, "Event streams are not enabled on this relay")
	}
	call := CallFrom(ctx)
	eng, ok := call.World.(*world.Engine)
	if !ok {
		return status.Error(codes.Unimplemented, "Event streams need a world hosted by this relay")
	}
	if id := strings.TrimSpace(lastEventID); id != "" {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "'lastEventId' must be an event id (a whole number), not '%s'", id)
		}
		req.Resume, req.After = true, n
	}
	clientID := eng.Info().ClientID
	// A stream opened with a stream ticket binds the ticket to itself and
	// keeps it valid while it is open, so that a browser reconnects to
	// this same stream with it after a drop (see Tickets).
	ticketClosed := func() {}
	if call.ticket != nil {
		var userID string
		if call.User != nil {
			userID = call.User.ID
		}
		var err error
		ticketClosed, err = call.ticket.Open(fmt.Sprintf("%s\x00%s\x00%s\x00%q", call.Method, clientID, userID, filter))
		if err != nil {
			return err
		}
	}
	limitsRelease, err := s.limits.acquire(call.Key.ID, clientID)
	if err != nil {
		ticketClosed()
		return err
	}
	release := func() { limitsRelease(); ticketClosed() }
	// Once handed off (see below), the subscription and the limits belong
	// to the bridge that claimed them.
	handedOff := false
	defer func() {
		if !handedOff {
			release()
		}
	}()
	req.User = call.User
	sub, err := s.hub.Subscribe(ctx, eng, req)
	if err != nil {
		return err
	}
	defer func() {
		if !handedOff {
			sub.Close()
		}
	}()

	// The backlog: a reset notice, or the replayed events of a resume.
	var backlog []events.Event
	if r, ok := sub.Reset(); ok {
		reset := map[string]any{
			"lastEventId":    strconv.FormatUint(r.LastEventID, 10),
			"oldestEventId":  strconv.FormatUint(r.Oldest, 10),
			"currentEventId": strconv.FormatUint(r.Head, 10),
			"message":        fmt.Sprintf("Events after %d are no longer available: reload what you follow; live events resume after %d", r.LastEventID, r.Head),
		}
		backlog = append(backlog, events.Event{Name: eventReset, Data: eventJSON(reset)})
	}
	backlog = append(backlog, sub.Replay()...)
	// last is the resume point a client should use after an overflow:
	// everything up to it has been handed to this stream or filtered out.
	last := sub.Start()
	overflow := func(last uint64) events.Event {
		return events.Event{Name: eventOverflow, Data: eventJSON(map[string]any{
			"lastEventId": strconv.FormatUint(last, 10),
			"message":     fmt.Sprintf("This stream fell more than %d events behind and is closed: reconnect with Last-Event-ID %d to resume", s.queueSize, last),
		})}
	}

	// The relay's own SSE bridge takes the subscription over after the
	// `connected` message and writes its events itself (see
	// events.Handoff); the RPC then ends, and the bridge releases the
	// subscription and its limits when its stream ends.
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(events.HandoffMetadata)) == 1 && events.IsHandoffSecret(md.Get(events.HandoffMetadata)[0]) {
		h := &events.Handoff{Sub: sub, Backlog: backlog, Last: last, Overflow: overflow, Release: func() { sub.Close(); release() }}
		token := events.Park(h)
		claimed := func() bool {
			// Unless the bridge claimed it meanwhile, the handoff is ours
			// to drop.
			handedOff = !events.Drop(token)
			return handedOff
		}
		if err := grpc.SetHeader(ctx, metadata.Pairs(events.HandoffMetadata, token)); err != nil {
			claimed()
			return err
		}
		if err := send(&relayv1.Event{Name: eventConnected, Data: connectedJSON(clientID, req.Channel, filter)}); err != nil {
			claimed()
			return err
		}
		select {
		case <-h.Claimed():
			handedOff = true
			return nil
		case <-ctx.Done():
			if claimed() {
				return nil
			}
			return ctx.Err()
		case <-s.hub.Closed():
			if claimed() {
				return nil
			}
			return status.Error(codes.Unavailable, "The relay is shutting down")
		}
	}

	if err := send(&relayv1.Event{Name: eventConnected, Data: connectedJSON(clientID, req.Channel, filter)}); err != nil {
		return err
	}
	for _, ev := range backlog {
		if err := send(&relayv1.Event{Sequence: ev.Seq, Name: ev.Name, Data: ev.Data}); err != nil {
			return err
		}
	}
	for {
		ev, err := sub.Next(ctx)
		switch {
		case errors.Is(err, events.ErrOverflow):
			o := overflow(last)
			_ = send(&relayv1.Event{Name: o.Name, Data: o.Data})
			return nil
		case errors.Is(err, events.ErrClosed):
			return status.Error(codes.Unavailable, "The relay is shutting down")
		case err != nil:
			return err
		}
		if err := send(&relayv1.Event{Sequence: ev.Seq, Name: ev.Name, Data: ev.Data}); err != nil {
			return err
		}
		last = ev.Seq
	}
}

// connectedJSON is the payload of the `connected` event: the world, the
// channel and its filter (a key, value pair, or nothing).
func connectedJSON(clientID string, channel events.Channel, filter []any) []byte {
	connected := map[string]any{"clientId": clientID, "channel": string(channel)}
	if len(filter) == 2 {
		connected[filter[0].(string)] = filter[1]
	}
	return eventJSON(connected)
}

// streamLimits counts open streams per API key and per world.
type streamLimits struct {
	perKey, perWorld int
	mu               sync.Mutex
	byKey, byWorld   map[string]int
}

// acquire counts a new stream, or refuses it with RESOURCE_EXHAUSTED (HTTP
// 429) past a limit. The returned function releases it.
func (l *streamLimits) acquire(keyID, clientID string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey[keyID] >= l.perKey {
		return nil, withReason(codes.ResourceExhausted, fmt.Sprintf("Too many event streams for this API key: at most %d may be open at once", l.perKey), ReasonRateLimited)
	}
	if l.byWorld[clientID] >= l.perWorld {
		return nil, withReason(codes.ResourceExhausted, fmt.Sprintf("Too many event streams on world '%s': at most %d may be open at once", clientID, l.perWorld), ReasonRateLimited)
	}
	l.byKey[keyID]++
	l.byWorld[clientID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.byKey[keyID]--; l.byKey[keyID] == 0 {
				delete(l.byKey, keyID)
			}
			if l.byWorld[clientID]--; l.byWorld[clientID] == 0 {
				delete(l.byWorld, clientID)
			}
		})
	}, nil
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
