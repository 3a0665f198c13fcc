package eventbus_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/eventbus"
	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// linkedNode is a node's linked worlds' events and its bus.
type linkedNode struct {
	events *link.Events
	bus    *eventbus.Bus
}

func startLinkedNodes(t *testing.T, c *jstest.Cluster, n int) []linkedNode {
	t.Helper()
	var out []linkedNode
	for i := range n {
		hub := events.New(events.Options{})
		bus, err := eventbus.New(context.Background(), c.JetStream(i%len(c.Servers)), hub, eventbus.Options{Replicas: c.Replicas()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bus.Close(); hub.Close() })
		le := link.NewEvents()
		bus.AttachLinked(le)
		out = append(out, linkedNode{events: le, bus: bus})
	}
	return out
}

// moduleEvent is an event message as a tabletop module sends it.
func moduleEvent(t *testing.T, typ string, data map[string]any) link.Event {
	t.Helper()
	msg, err := json.Marshal(map[string]any{"type": typ, "data": data})
	if err != nil {
		t.Fatal(err)
	}
	return link.Event{Type: typ, Message: msg}
}

// TestLinkedEventsAcrossNodes publishes a linked world's events on the
// node holding its socket and follows them on another node, with the read
// rules applied there; when the tabletop reconnects to a third node, that
// node numbers on after the cluster's last event, and a subscriber
// resumes across the move.
func TestLinkedEventsAcrossNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 2)
	nodes := startLinkedNodes(t, c, 3)
	const clientID = "fvtt_00000000000000aa"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	player := &world.User{ID: "u1", Role: world.RolePlayer}

	gm, err := nodes[1].bus.LinkedEvents(clientID).Subscribe(ctx, nil, world.EventRequest{Channel: world.ChannelActor})
	if err != nil {
		t.Fatal(err)
	}
	defer gm.Close()
	hooks, err := nodes[1].bus.LinkedEvents(clientID).Subscribe(ctx, player, world.EventRequest{Channel: world.ChannelHooks})
	if err != nil {
		t.Fatal(err)
	}
	defer hooks.Close()

	hook := func(id string, owner float64) link.Event {
		doc := map[string]any{"_id": id, "name": id, "ownership": map[string]any{"default": 0, "u1": owner}}
		return moduleEvent(t, "hook-event", map[string]any{"hook": "updateActor", "args": []any{doc, map[string]any{"name": id}, map[string]any{}}})
	}
	update := func(name string) link.Event {
		return moduleEvent(t, "actor-event", map[string]any{"actorUuid": "Actor.x", "eventType": "update", "changes": map[string]any{"name": name}})
	}
	nodes[0].events.Publish(clientID, update("one"))
	nodes[0].events.Publish(clientID, hook("none", 0))  // NONE for the player
	nodes[0].events.Publish(clientID, hook("owned", 3)) // OWNER

	if ev, err := gm.Next(ctx); err != nil || ev.Seq != 1 || ev.Name != "actor-update" {
		t.Fatalf("actor event on node 2: %+v %v", ev, err)
	}
	if ev, err := hooks.Next(ctx); err != nil || ev.Seq != 3 {
		t.Fatalf("player's hook event on node 2: %+v %v; want event 3 only (event 2 is NONE to them)", ev, err)
	}

	// The tabletop reconnects to node 3, which never saw the world: its
	// first event is number 4.
	nodes[2].events.Publish(clientID, update("two"))
	if ev, err := gm.Next(ctx); err != nil || ev.Seq != 4 || ev.Name != "actor-update" {
		t.Fatalf("event from node 3 on node 2: %+v %v; want event 4", ev, err)
	}
	// A subscriber resumes on node 2 from event 1: 4 follows without a gap
	// (2 and 3 are hook events).
	resumed, err := nodes[1].bus.LinkedEvents(clientID).Subscribe(ctx, nil, world.EventRequest{Channel: world.ChannelActor, Resume: true, After: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if _, isReset := resumed.Reset(); isReset {
		t.Fatal("resume across the move: reset")
	}
	if r := resumed.Replay(); len(r) != 1 || r[0].Seq != 4 {
		t.Fatalf("replay %+v, want event 4", r)
	}

	// Back to node 1, which numbered the world before and missed event 4:
	// connecting settles the numbering with the cluster again.
	nodes[0].events.Connected(link.ConnInfo{ClientID: clientID})
	nodes[0].events.Publish(clientID, update("three"))
	if ev, err := gm.Next(ctx); err != nil || ev.Seq != 5 {
		t.Fatalf("event from node 1 again, on node 2: %+v %v; want event 5", ev, err)
	}

	// A node without AttachLinked has no linked streams.
	hub := events.New(events.Options{})
	defer hub.Close()
	plain, err := eventbus.New(ctx, c.JetStream(0), hub, eventbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.LinkedEvents(clientID).Subscribe(ctx, nil, world.EventRequest{Channel: world.ChannelActor}); err == nil {
		t.Fatal("linked events without AttachLinked: no error")
	}
}
