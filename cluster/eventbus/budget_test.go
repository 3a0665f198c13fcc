package eventbus_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/eventbus"
	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// budgetBytes is the byte budget of each world's events in these tests.
const budgetBytes = 256 << 10

// storedBytes returns the events stream's stored bytes and how many
// events it keeps of subject.
func storedBytes(t *testing.T, js jetstream.JetStream, subject string) (uint64, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, eventbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Bytes, info.State.Subjects[subject]
}

// settles waits until the stream's bytes are at most want and stay so a
// moment, and returns the last seen.
func settles(t *testing.T, js jetstream.JetStream, subject string, want uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last uint64
	for {
		now, _ := storedBytes(t, js, subject)
		if now <= want && now == last || time.Now().After(deadline) {
			return now
		}
		last = now
		time.Sleep(100 * time.Millisecond)
	}
}

// publishRaw stores events on subject as a relay without the byte budget
// did: numbered from first, each with a payload of size bytes.
func publishRaw(t *testing.T, js jetstream.JetStream, subject string, first, n, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		seq := strconv.Itoa(first + i)
		msg := nats.NewMsg(subject)
		msg.Data = []byte(strings.Repeat("e", size))
		msg.Header.Set("Relay-Seq", seq)
		msg.Header.Set(jetstream.MsgIDHeader, subject+"."+seq)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestByteBudgetTrimsWhatAnOlderRelayKept starts a bus on an events stream
// in which a relay without the byte budget kept 800 KB of a hosted world's
// events and as much of another world's: the host's start (its backfill)
// brings its world's events within the budget, oldest first, and leaves
// the other world's alone.
func TestByteBudgetTrimsWhatAnOlderRelayKept(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	js := c.JetStream(0)
	ctx := context.Background()
	// The stream as the older relay made it.
	old := events.New(events.Options{})
	oldBus, err := eventbus.New(ctx, js, old, eventbus.Options{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	oldBus.Close()
	old.Close()
	publishRaw(t, js, "relay.events.other", 1, 40, 20_000)
	otherBytes, _ := storedBytes(t, js, "relay.events.other")
	publishRaw(t, js, "relay.events.west", 1, 40, 20_000)

	hub := events.New(events.Options{})
	defer hub.Close()
	bus, err := eventbus.New(ctx, js, hub, eventbus.Options{Replicas: 1, RingBytes: budgetBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	if _, err := bus.Backfill(ctx, "west", func(context.Context, uint64, func(world.JournalRecord) error) error { return nil }); err != nil {
		t.Fatal(err)
	}
	total := settles(t, js, "relay.events.west", otherBytes+budgetBytes)
	west := total - otherBytes
	if west > budgetBytes || west < budgetBytes/2 {
		t.Fatalf("west keeps %d bytes after the start, want between half the budget and the budget %d", west, budgetBytes)
	}
	if _, kept := storedBytes(t, js, "relay.events.other"); kept != 40 {
		t.Fatalf("the other world keeps %d events, want its 40", kept)
	}
	// The newest of west stay: the last one is event 40.
	stream, err := js.Stream(ctx, eventbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, "relay.events.west")
	if err != nil || last.Header.Get("Relay-Seq") != "40" {
		t.Fatalf("west's last kept event: %v %v, want 40", last, err)
	}
}

// TestByteBudgetFollowsALinkedWorldAcrossNodes publishes a linked world's
// large events on one node, then moves the tabletop to another: the world
// keeps no more than its budget in the events stream throughout, because
// the new host counts the events the first one left there, and a
// subscriber on a third node gets every event.
func TestByteBudgetFollowsALinkedWorldAcrossNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	js := c.JetStream(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var nodes []linkedNode
	for range 3 {
		hub := events.New(events.Options{})
		bus, err := eventbus.New(ctx, js, hub, eventbus.Options{Replicas: 1, RingBytes: budgetBytes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bus.Close(); hub.Close() })
		le := link.NewEvents()
		bus.AttachLinked(le)
		nodes = append(nodes, linkedNode{events: le, bus: bus})
	}
	const clientID = "fvtt_00000000000000bb"
	const subject = "relay.linkevents." + clientID
	sub, err := nodes[2].bus.LinkedEvents(clientID).Subscribe(ctx, nil, world.EventRequest{Channel: world.ChannelActor})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	big := func(i int) link.Event {
		msg, _ := json.Marshal(map[string]any{"type": "actor-event", "data": map[string]any{"actorUuid": "Actor.x", "eventType": "update",
			"changes": map[string]any{"biography": strings.Repeat(strconv.Itoa(i%10), 30_000)}}})
		return link.Event{Type: "actor-event", Message: msg}
	}
	got := uint64(0)
	expect := func(n int) {
		for range n {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Name != "actor-update" || ev.Seq != got+1 {
				t.Fatalf("event %s %d after %d", ev.Name, ev.Seq, got)
			}
			got = ev.Seq
		}
	}
	for i := range 20 {
		nodes[0].events.Publish(clientID, big(i))
	}
	expect(20)
	if n := settles(t, js, subject, budgetBytes); n > budgetBytes {
		t.Fatalf("the linked world keeps %d bytes on its first node, want at most %d", n, budgetBytes)
	}
	// The tabletop moves to node 2, which publishes 6 more: alone they
	// fit in the budget, with what node 1 left they do not.
	nodes[1].events.Connected(link.ConnInfo{ClientID: clientID})
	for i := range 6 {
		nodes[1].events.Publish(clientID, big(20+i))
	}
	expect(6)
	if n := settles(t, js, subject, budgetBytes); n > budgetBytes {
		t.Fatalf("the linked world keeps %d bytes after it moved, want at most %d", n, budgetBytes)
	}
	stream, err := js.Stream(ctx, eventbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil || last.Header.Get("Relay-Seq") != "26" {
		t.Fatalf("the linked world's last kept event: %v %v, want 26", last, err)
	}
}
