package link_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/world"
)

// TestEventsClose: closing the linked worlds' events, as a stopping relay
// does, ends every subscription at once (a stream left waiting would hold
// the relay's graceful stop up until its time-out) and refuses new ones
// as unavailable.
func TestEventsClose(t *testing.T) {
	t.Parallel()
	evs := link.NewEvents()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := evs.SubscribeFed(ctx, "w1", nil, world.EventRequest{Channel: world.ChannelActor})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ended := make(chan error, 1)
	go func() {
		_, err := sub.Next(ctx)
		ended <- err
	}()
	evs.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, world.ErrSubscriptionEnded) {
			t.Fatalf("Next after Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Next still waiting after Close")
	}
	if _, err := evs.SubscribeFed(ctx, "w1", nil, world.EventRequest{Channel: world.ChannelActor}); !errors.Is(err, world.ErrUnavailable) {
		t.Fatalf("subscribe after Close: %v", err)
	}
	evs.Close() // a second Close does nothing
}
