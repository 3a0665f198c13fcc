package embedded

import (
	"context"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// Subscribe implements [world.Events] over the event hub.
func (w *World) Subscribe(ctx context.Context, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	hub := w.kit.opts.Hub
	if hub == nil {
		return nil, world.Errorf(world.ErrUnimplemented, "World '%s' does not offer event streams", w.Info().ClientID)
	}
	sub, err := hub.Subscribe(ctx, w.Engine, events.Request{EventRequest: req, User: user})
	if err != nil {
		return nil, err
	}
	return sub, nil
}

// A hub subscription is a world's subscription as it is.
var _ world.EventSubscription = (*events.Subscription)(nil)
