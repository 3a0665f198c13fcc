package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/events"
)

const (
	aria   = "Actor.ariaVale00000001"
	goblin = "Actor.goblin0000000001"
	guard  = "Actor.townGuard0000001"
)

var (
	alice = &world.User{ID: "aliceUser0000001", Name: "Alice", Role: world.RolePlayer}
	bob   = &world.User{ID: "bobUser000000001", Name: "Bob", Role: world.RolePlayer}
)

// openDemo opens (creating it when needed) the demo world in dir with a hub
// wired as the relay wires it.
func openDemo(t testing.TB, dir string, opts events.Options) (*world.Engine, *events.Hub) {
	t.Helper()
	hub := events.New(opts)
	host, err := world.OpenHost(dir, world.Options{Journal: hub})
	if err != nil {
		t.Fatal(err)
	}
	host.Watch(hub.Committed)
	ctx := context.Background()
	w, err := host.World(ctx, demo.ClientID)
	if err != nil {
		seed, serr := demo.Seed()
		if serr != nil {
			t.Fatal(serr)
		}
		if w, err = host.Create(ctx, demo.ClientID, seed); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { hub.Close(); host.Close() })
	return w, hub
}

func subscribe(t *testing.T, hub *events.Hub, e *world.Engine, req events.Request) *events.Subscription {
	t.Helper()
	sub, err := hub.Subscribe(context.Background(), e, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return sub
}

func next(t *testing.T, sub *events.Subscription) (events.Event, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	var data map[string]any
	if err := json.Unmarshal(ev.Data, &data); err != nil {
		t.Fatalf("payload %s: %v", ev.Data, err)
	}
	return ev, data
}

func update(t *testing.T, e *world.Engine, uuid string, data world.Document) {
	t.Helper()
	if _, err := e.Update(context.Background(), nil, uuid, data); err != nil {
		t.Fatal(err)
	}
}

func TestActorEventsFollowReadRules(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	gm := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor}})
	player := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor}, User: alice})
	onlyAria := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: "ariaVale00000001"}})

	update(t, e, goblin, world.Document{"system.attributes.hp.value": 3}) // NONE for Alice
	update(t, e, guard, world.Document{"system.attributes.hp.value": 4})  // LIMITED, no limited field
	update(t, e, guard, world.Document{"name": "Captain"})                // LIMITED, name
	update(t, e, aria, world.Document{"system.attributes.hp.value": 5})   // OWNER

	wantGM := []string{goblin, guard, guard, aria}
	for _, uuid := range wantGM {
		ev, data := next(t, gm)
		if ev.Name != "actor-update" || data["actorUuid"] != uuid {
			t.Fatalf("GM got %s %v, want actor-update of %s", ev.Name, data, uuid)
		}
	}
	ev, data := next(t, player)
	if data["actorUuid"] != guard {
		t.Fatalf("player's first event %s %v, want the guard's name", ev.Name, data)
	}
	if changes := data["changes"].(map[string]any); len(changes) != 1 || changes["name"] != "Captain" {
		t.Fatalf("LIMITED changes %v, want only the name", changes)
	}
	_, data = next(t, player)
	if hp := data["changes"].(map[string]any)["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]; hp != 5.0 {
		t.Fatalf("owner's changes %v", data)
	}
	ev, data = next(t, onlyAria)
	if data["actorUuid"] != aria || ev.Seq == 0 {
		t.Fatalf("filtered stream got %v", data)
	}
}

func TestOverflowAndResume(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{QueueSize: 2})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Hooks: []string{"updateActor"}}})
	start := sub.Start()
	for i := range 5 {
		update(t, e, aria, world.Document{"system.attributes.hp.value": i})
	}
	deadline := time.Now().Add(5 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = sub.Next(ctx)
		cancel()
		if errors.Is(err, events.ErrOverflow) {
			break
		}
	}
	if !errors.Is(err, events.ErrOverflow) {
		t.Fatalf("a full queue gave %v, want ErrOverflow", err)
	}
	resumed := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Hooks: []string{"updateActor"}, Resume: true, After: start}})
	if got := len(resumed.Replay()); got != 5 {
		t.Fatalf("replayed %d events, want 5", got)
	}
	if _, reset := resumed.Reset(); reset {
		t.Fatal("reset within the window")
	}
}

func TestSequencesSurviveRestartsAndOldIDsReset(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, hub := openDemo(t, dir, events.Options{RingSize: 3})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor}})
	var last uint64
	for i := range 5 {
		// One at a time: a ring this small is outrun by fast writes.
		update(t, e, aria, world.Document{"system.attributes.hp.value": i})
		ev, _ := next(t, sub)
		if ev.Seq <= last {
			t.Fatalf("sequence %d after %d", ev.Seq, last)
		}
		last = ev.Seq
	}
	sub.Close()
	hub.Close()
	e.Close()

	e2, hub2 := openDemo(t, dir, events.Options{RingSize: 3})
	resumed := subscribe(t, hub2, e2, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, Resume: true, After: last - 2}})
	if got := resumed.Replay(); len(got) != 1 || got[0].Seq != last {
		t.Fatalf("after a restart, replayed %v, want the last actor event (%d)", got, last)
	}
	old := subscribe(t, hub2, e2, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, Resume: true, After: 1}})
	if r, ok := old.Reset(); !ok || r.Head != last {
		t.Fatalf("resume from an id out of the window: reset %v %v", r, ok)
	}
	update(t, e2, aria, world.Document{"system.attributes.hp.value": 9})
	ev, _ := next(t, resumed)
	if ev.Seq != last+2 { // last+1 is the updateActor hook
		t.Fatalf("first actor event after the restart %d, want %d", ev.Seq, last+2)
	}
}

func TestHiddenCombatantsReachGMsOnly(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	gm := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelCombat}})
	player := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelCombat}, User: bob})
	ctx := context.Background()
	var combat string
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		var err error
		combat, err = tx.Create("Combat", "", world.Document{"round": 0, "turn": 0, "started": false, "scene": "tavernScene00001"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []world.Document{{"name": "Goblin", "actorId": "goblin0000000001", "hidden": true}, {"name": "Brom", "actorId": "bromIronfist0001"}} {
		err := e.Mutate(ctx, func(tx *world.Tx) error { _, err := tx.Create("Combatant", combat, c); return err })
		if err != nil {
			t.Fatal(err)
		}
	}
	update(t, e, combat, world.Document{"started": true, "round": 1})
	update(t, e, combat, world.Document{"turn": 1})
	update(t, e, combat, world.Document{"round": 2, "turn": 0})
	if err := e.Delete(ctx, nil, combat); err != nil {
		t.Fatal(err)
	}
	names := func(sub *events.Subscription, n int) ([]string, []map[string]any) {
		var out []string
		var data []map[string]any
		for range n {
			ev, d := next(t, sub)
			out = append(out, ev.Name)
			data = append(data, d)
		}
		return out, data
	}
	got, _ := names(gm, 6)
	want := []string{"combat-combatant-add", "combat-combatant-add", "combat-start", "combat-turn", "combat-round", "combat-end"}
	if !equal(got, want) {
		t.Fatalf("GM got %v, want %v", got, want)
	}
	got, data := names(player, 5)
	want = []string{"combat-combatant-add", "combat-start", "combat-turn", "combat-round", "combat-end"}
	if !equal(got, want) {
		t.Fatalf("player got %v, want %v", got, want)
	}
	if list := data[1]["combatants"].([]any); len(list) != 1 || list[0].(map[string]any)["name"] != "Brom" {
		t.Fatalf("player's combatants %v, want Brom only", list)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCoalescedEventsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{Coalesce: 100 * time.Millisecond})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: aria}})
	for i := range 5 {
		update(t, e, aria, world.Document{"system.attributes.hp.value": i + 1})
	}
	// The five changes fall in one coalescing window: they arrive
	// together, in order.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []events.Event
	for len(got) < 5 {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(got), err)
		}
		got = append(got, ev)
	}
	if len(got) != 5 {
		t.Fatalf("%d events, want 5", len(got))
	}
	for i, ev := range got {
		if i > 0 && ev.Seq <= got[i-1].Seq {
			t.Fatalf("sequences %d then %d: not in order", got[i-1].Seq, ev.Seq)
		}
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if hp := data["changes"].(map[string]any)["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]; hp != float64(i+1) {
			t.Fatalf("event %d has hp %v, want %d", i, hp, i+1)
		}
	}
}

func TestCoalescedEventsRespectTheQueueLimit(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{QueueSize: 3, Coalesce: 200 * time.Millisecond})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: aria}})
	// Four changes in one window pass the queue of three: the subscriber
	// overflows rather than queueing past its limit.
	for i := range 4 {
		update(t, e, aria, world.Document{"system.attributes.hp.value": i + 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ev, err := sub.Next(ctx); !errors.Is(err, events.ErrOverflow) {
		t.Fatalf("got event %d, %v; want ErrOverflow", ev.Seq, err)
	}
}
