package eventbus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/events"
)

// TestEventsSurviveALostServer stops one of three NATS servers while the
// host writes and another node follows: the events are kept three ways, so
// the follower gets exactly the host's events, in order, without a gap;
// and a subscriber that arrives after the loss resumes from the first.
func TestEventsSurviveALostServer(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	e, nodes := startNodesRing(t, c, events.DefaultRingSize)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := world.EventRequest{Channel: world.ChannelActor, ActorUUID: aria}
	onHost, err := nodes[0].hub.Subscribe(ctx, e, events.Request{EventRequest: req})
	if err != nil {
		t.Fatal(err)
	}
	defer onHost.Close()
	follower, err := nodes[1].bus.Subscribe(ctx, demo.ClientID, nil, req)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()

	const writes = 40
	for i := range writes {
		if i == writes/2 {
			// The third server (neither node's) goes away mid-stream.
			c.Servers[2].Shutdown()
		}
		update(t, e, aria, world.Document{"system.attributes.hp.value": i})
	}
	wrote := time.Now()
	var want, got []uint64
	for len(want) == 0 || want[len(want)-1] != nodes[0].hub.Head(demo.ClientID) {
		ev := next(t, onHost)
		want = append(want, ev.Seq)
		if len(want) > 10*writes {
			t.Fatal("the host's stream does not reach its head")
		}
	}
	// JetStream may take some seconds to recover from the lost server
	// (electing a leader for the stream, recreating the follower's
	// consumer); nothing is lost meanwhile.
	slow, cancelSlow := context.WithTimeout(ctx, 45*time.Second)
	defer cancelSlow()
	for len(got) < len(want) {
		ev, err := follower.Next(slow)
		if err != nil {
			t.Fatalf("the follower after %d of %d events: %v", len(got), len(want), err)
		}
		got = append(got, ev.Seq)
	}
	t.Logf("the follower had every event %v after the last write", time.Since(wrote))
	if !slices.Equal(got, want) {
		t.Fatalf("the follower got %v, the host %v", got, want)
	}

	// A subscriber arriving on the follower node after the loss, from
	// the first event: every other one is replayed.
	late, err := nodes[1].bus.Subscribe(ctx, demo.ClientID, nil, world.EventRequest{Channel: world.ChannelActor, ActorUUID: aria, Resume: true, After: want[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if _, reset := late.Reset(); reset {
		t.Fatal("resume after a lost server: reset")
	}
	var replayed []uint64
	for _, ev := range late.Replay() {
		replayed = append(replayed, ev.Seq)
	}
	if !slices.Equal(replayed, want[1:]) {
		t.Fatalf("replayed %v, want %v", replayed, want[1:])
	}
}
