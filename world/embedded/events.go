package embedded

import (
	"context"

	"relay/world"
	"relay/world/events"
)

// Subscribe implements [world.Events] over the event hub.
func (w *World) Subscribe(ctx context.Context, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	hub := w.kit.opts.Hub
	if hub == nil {
		return nil, world.Errorf(world.ErrUnimplemented, "World '%s' does not offer event streams", w.Info().ClientID)
	}
	sub, err := hub.Subscribe(ctx, w.Engine, events.Request{
		Channel:     req.Channel,
		User:        user,
		Hooks:       req.Hooks,
		EncounterID: req.EncounterID,
		ActorUUID:   req.ActorUUID,
		SceneID:     req.SceneID,
		Resume:      req.Resume,
		After:       req.After,
	})
	if err != nil {
		return nil, err
	}
	return subscription{sub}, nil
}

// subscription presents a hub subscription as the world's.
type subscription struct{ *events.Subscription }

func (s subscription) Replay() []world.Event {
	replay := s.Subscription.Replay()
	out := make([]world.Event, len(replay))
	for i, ev := range replay {
		out[i] = world.Event{Seq: ev.Seq, Name: ev.Name, Data: ev.Data}
	}
	return out
}

func (s subscription) Next(ctx context.Context) (world.Event, error) {
	ev, err := s.Subscription.Next(ctx)
	return world.Event{Seq: ev.Seq, Name: ev.Name, Data: ev.Data}, err
}
