package eventbus_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/eventbus"
	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/events"
)

const (
	aria   = "Actor.ariaVale00000001"
	goblin = "Actor.goblin0000000001"
	guard  = "Actor.townGuard0000001"
)

var alice = &world.User{ID: "aliceUser0000001", Name: "Alice", Role: world.RolePlayer}

// ringSize is the hubs' and the stream's retention in these tests.
const ringSize = 8

// stallAfter is the buses' StallAfter in these tests: short, so that a
// stalled feed recovers quickly.
const stallAfter = 400 * time.Millisecond

// node is one relay node of the test: a hub and its bus.
type node struct {
	hub *events.Hub
	bus *eventbus.Bus
}

// startNodes starts a node on each NATS server; the first hosts the demo
// world and returns its engine.
func startNodes(t *testing.T, c *jstest.Cluster) (*world.Engine, []node) {
	t.Helper()
	return startNodesRing(t, c, ringSize)
}

// startNodesRing is startNodes with hubs and a stream keeping ring events.
func startNodesRing(t *testing.T, c *jstest.Cluster, ring int) (*world.Engine, []node) {
	t.Helper()
	ctx := context.Background()
	var nodes []node
	var engine *world.Engine
	for i := range c.Servers {
		hub := events.New(events.Options{RingSize: ring})
		bus, err := eventbus.New(ctx, c.JetStream(i), hub, eventbus.Options{Replicas: c.Replicas(), RingSize: ring, Linger: 100 * time.Millisecond, StallAfter: stallAfter})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bus.Close(); hub.Close() })
		if i == 0 {
			host, err := world.OpenHost(t.TempDir(), world.Options{Journal: hub})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { host.Close() })
			host.Watch(hub.Committed)
			seed, err := demo.Seed()
			if err != nil {
				t.Fatal(err)
			}
			if engine, err = host.Create(ctx, demo.ClientID, seed); err != nil {
				t.Fatal(err)
			}
		}
		nodes = append(nodes, node{hub: hub, bus: bus})
	}
	return engine, nodes
}

func update(t *testing.T, e *world.Engine, uuid string, data world.Document) {
	t.Helper()
	if _, err := e.Update(context.Background(), nil, uuid, data); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, sub world.EventSubscription) world.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return ev
}

func subscribe(t *testing.T, n node, user *world.User, req world.EventRequest) world.EventSubscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := n.bus.Subscribe(ctx, demo.ClientID, user, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// TestEventsAcrossNodes follows the demo world, hosted by node 1, from
// nodes 2 and 3: subscribers there get the host's events with the same
// ids and, for a player, the same filtered payloads as on the host; each
// node consumes the world's events once however many subscribers it has;
// a subscriber that moves to another node resumes without a gap, and one
// that resumes from before the kept events gets the reset.
func TestEventsAcrossNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	e, nodes := startNodes(t, c)
	actors := world.EventRequest{Channel: world.ChannelActor}

	hostSub, err := nodes[0].hub.Subscribe(context.Background(), e, events.Request{EventRequest: actors, User: alice})
	if err != nil {
		t.Fatal(err)
	}
	defer hostSub.Close()
	b1 := subscribe(t, nodes[1], alice, actors)
	b2 := subscribe(t, nodes[1], nil, world.EventRequest{Channel: world.ChannelActor, ActorUUID: "ariaVale00000001"})
	c1 := subscribe(t, nodes[2], alice, actors)

	start := time.Now()
	update(t, e, goblin, world.Document{"system.attributes.hp.value": 3}) // NONE for Alice
	update(t, e, guard, world.Document{"name": "Captain"})                // LIMITED
	update(t, e, aria, world.Document{"system.attributes.hp.value": 5})   // OWNER
	var delays []time.Duration
	var ariaSeq uint64
	for range 2 {
		want := next(t, hostSub)
		ariaSeq = want.Seq
		for _, sub := range []world.EventSubscription{b1, c1} {
			got := next(t, sub)
			delays = append(delays, time.Since(start))
			if got.Seq != want.Seq || got.Name != want.Name || string(got.Data) != string(want.Data) {
				t.Fatalf("another node gave %d %s %s, the host %d %s %s", got.Seq, got.Name, got.Data, want.Seq, want.Name, want.Data)
			}
		}
	}
	if ev := next(t, b2); ev.Seq != ariaSeq {
		t.Fatalf("filtered GM stream on node 2 got event %d, want %d (Aria's)", ev.Seq, ariaSeq)
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	t.Logf("three writes to events on two other nodes: last delivered after %v", delays[len(delays)-1])

	// One consumer per node with subscribers, not one per subscriber. On
	// a loaded machine an ordered consumer that missed its heartbeats is
	// replaced, and the old one is deleted a moment later: the count
	// settles at two.
	js := c.JetStream(0)
	stream, err := js.Stream(context.Background(), eventbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := stream.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers of the events, want 2 (nodes 2 and 3)", info.State.Consumers)
		}
	}

	// Move: the subscriber on node 2 saw Aria's event; two more come
	// while it reconnects to node 3, where it resumes from the one it saw.
	b1.Close()
	update(t, e, aria, world.Document{"system.attributes.hp.value": 6})
	update(t, e, aria, world.Document{"system.attributes.hp.value": 7})
	moved := subscribe(t, nodes[2], alice, world.EventRequest{Channel: world.ChannelActor, Resume: true, After: ariaSeq})
	// What the host would replay to the same resume.
	onHost, err := nodes[0].hub.Subscribe(context.Background(), e, events.Request{EventRequest: world.EventRequest{Channel: world.ChannelActor, Resume: true, After: ariaSeq}, User: alice})
	if err != nil {
		t.Fatal(err)
	}
	defer onHost.Close()
	want := onHost.Replay()
	if len(want) != 2 {
		t.Fatalf("the host replays %d events, want 2", len(want))
	}
	replay := moved.Replay()
	for len(replay) < 2 {
		replay = append(replay, next(t, moved))
	}
	for i := range want {
		if replay[i].Seq != want[i].Seq || string(replay[i].Data) != string(want[i].Data) {
			t.Fatalf("resumed on node 3 with event %d %s, the host replays %d %s", replay[i].Seq, replay[i].Data, want[i].Seq, want[i].Data)
		}
	}
	update(t, e, aria, world.Document{"system.attributes.hp.value": 8})
	if ev, want := next(t, moved), next(t, onHost); ev.Seq != want.Seq {
		t.Fatalf("live after the resume: event %d, the host's %d", ev.Seq, want.Seq)
	}

	// Delivery time to another node: from the write's return (its
	// commit) to the event in the subscriber's hands on node 3.
	var lat []time.Duration
	for i := range 20 {
		start := time.Now()
		update(t, e, aria, world.Document{"system.attributes.hp.value": 100 + i})
		next(t, moved)
		lat = append(lat, time.Since(start))
		next(t, onHost)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("write to delivery on another node, 20 writes: p50 %v, max %v (the write's own commit included)", lat[len(lat)/2], lat[len(lat)-1])

	// More events than are kept: a resume from the first is a reset.
	for i := range ringSize {
		update(t, e, aria, world.Document{"system.attributes.hp.value": 10 + i})
	}
	late := subscribe(t, nodes[1], nil, world.EventRequest{Channel: world.ChannelActor, Resume: true, After: ariaSeq})
	r, ok := late.Reset()
	if !ok || r.LastEventID != ariaSeq || r.Oldest <= ariaSeq+1 || r.Head < r.Oldest {
		t.Fatalf("resume from before the kept events: %+v %v, want a reset", r, ok)
	}
}

// TestFeedStartsFromKeptEvents subscribes on a node that never followed
// the world, after events happened: it resumes from the stream's kept
// events; and a feed whose last subscriber left stops after the linger
// and starts again for the next one.
func TestFeedStartsFromKeptEvents(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	e, _ := startNodes(t, c)
	update(t, e, aria, world.Document{"system.attributes.hp.value": 1})
	update(t, e, aria, world.Document{"system.attributes.hp.value": 2})
	// The events reach the stream asynchronously.
	waitHead := func(n node, want uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			sub := subscribe(t, n, nil, world.EventRequest{Channel: world.ChannelActor, Resume: true, After: 0})
			if got := len(sub.Replay()); uint64(got) >= want {
				sub.Close()
				return
			}
			sub.Close()
			if time.Now().After(deadline) {
				t.Fatalf("node never got %d events", want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	second := node{hub: events.New(events.Options{RingSize: ringSize})}
	t.Cleanup(second.hub.Close)
	var err error
	second.bus, err = eventbus.New(context.Background(), c.JetStream(0), second.hub, eventbus.Options{RingSize: ringSize, Linger: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.bus.Close)
	waitHead(second, 2)
	time.Sleep(200 * time.Millisecond) // past the linger: the feed stopped
	update(t, e, aria, world.Document{"system.attributes.hp.value": 3})
	waitHead(second, 3)

	for _, id := range []string{"*", ">", "demo.x", "", "a b"} {
		if _, err := second.bus.Subscribe(context.Background(), id, nil, world.EventRequest{Channel: world.ChannelActor}); !errors.Is(err, world.ErrNotFound) {
			t.Fatalf("Subscribe(%q) = %v, want ErrNotFound", id, err)
		}
	}
	second.bus.Close()
	if _, err := second.bus.Subscribe(context.Background(), demo.ClientID, nil, world.EventRequest{Channel: world.ChannelActor}); !errors.Is(err, world.ErrUnavailable) {
		t.Fatalf("Subscribe on a closed bus: %v, want ErrUnavailable", err)
	}
}

// TestStalledFeedRecovers stops the consumer that feeds a node with a
// world's events, as an ordered consumer that went silent after a lost
// stream leader: the bus finds the feed quiet while the events stream
// holds newer events, and starts its consumer again after the last event
// it delivered, so that the node's subscribers get every event, in order,
// without a reset.
func TestStalledFeedRecovers(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	engine, nodes := startNodes(t, c)
	_ = nodes[0]
	// A second node on the same server follows the world.
	hub := events.New(events.Options{RingSize: ringSize})
	bus, err := eventbus.New(context.Background(), c.JetStream(0), hub, eventbus.Options{Replicas: 1, RingSize: ringSize, Linger: time.Minute, StallAfter: stallAfter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close(); hub.Close() })
	follower := node{hub: hub, bus: bus}
	sub := subscribe(t, follower, nil, world.EventRequest{Channel: world.ChannelActor})
	update(t, engine, aria, world.Document{"name": "one"})
	first := next(t, sub)

	bus.StallFeed(demo.ClientID)
	update(t, engine, aria, world.Document{"name": "two"})
	update(t, engine, aria, world.Document{"name": "three"})
	second, third := next(t, sub), next(t, sub)
	if second.Seq <= first.Seq || third.Seq <= second.Seq || !strings.Contains(string(third.Data), "three") {
		t.Fatalf("after the stall: %d %s, %d %s (before it: %d)", second.Seq, second.Data, third.Seq, third.Data, first.Seq)
	}
	if n := bus.FeedRestarts(demo.ClientID); n != 1 {
		t.Fatalf("the feed's consumer was started again %d times, want 1", n)
	}
}

// TestResumeKicksStalledFeed: a subscriber that resumes, on a node whose
// feed went silent, from an event the feed did not deliver makes the bus
// start the feed's consumer again at once (not at the next quiet spell),
// and gets the events after its own, without a reset.
func TestResumeKicksStalledFeed(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	engine, nodes := startNodes(t, c)
	hub := events.New(events.Options{RingSize: ringSize})
	// No quiet spell is noticed within the test: only the resume can
	// find the stall.
	bus, err := eventbus.New(context.Background(), c.JetStream(0), hub, eventbus.Options{Replicas: 1, RingSize: ringSize, Linger: time.Minute, StallAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close(); hub.Close() })
	follower := node{hub: hub, bus: bus}
	// The host's own stream of the world, where the subscriber saw "two".
	onHost, err := nodes[0].hub.Subscribe(context.Background(), engine, events.Request{EventRequest: world.EventRequest{Channel: world.ChannelActor}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onHost.Close)
	first := subscribe(t, follower, nil, world.EventRequest{Channel: world.ChannelActor})
	update(t, engine, aria, world.Document{"name": "one"})
	next(t, first)
	bus.StallFeed(demo.ClientID)
	update(t, engine, aria, world.Document{"name": "two"})
	update(t, engine, aria, world.Document{"name": "three"})
	next(t, onHost) // one
	two := next(t, onHost)
	if !strings.Contains(string(two.Data), "two") {
		t.Fatalf("the host's second event: %s", two.Data)
	}
	resumed := subscribe(t, follower, nil, world.EventRequest{Channel: world.ChannelActor, Resume: true, After: two.Seq})
	if _, reset := resumed.Reset(); reset {
		t.Fatal("the resume got a reset")
	}
	// "three" is replayed, or comes next.
	evs := resumed.Replay()
	if len(evs) == 0 {
		evs = []world.Event{next(t, resumed)}
	}
	if ev := evs[0]; !strings.Contains(string(ev.Data), "three") || ev.Seq <= two.Seq {
		t.Fatalf("after the resume: %d %s", ev.Seq, ev.Data)
	}
	if n := bus.FeedRestarts(demo.ClientID); n != 1 {
		t.Fatalf("the feed's consumer was started again %d times, want 1", n)
	}
}
