package link_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/world"
)

// TestLinkedEventsForPlayers: the module says nothing of who may read the
// actor an actor event is about, so the relay decides for a player with
// what it knows: ownership carried by an earlier event's payload, the
// ownership in a reply it saw, and else the module's own answer to an
// entity request made as a GM (once per document). A player gets the
// events of the actors she may read and not the others'; an event the
// relay cannot decide (the module cannot find the actor) is withheld from
// her and counted, while a GM gets every event.
func TestLinkedEventsForPlayers(t *testing.T) {
	t.Parallel()
	evs := link.NewEvents()
	e := newEnv(t, func(c *link.Config) { c.Hub.OnEvent = evs.Publish })
	evs.SetHub(e.svc.Hub())
	docs := map[string]map[string]any{
		"Actor.seen0000000000001": {"_id": "seen0000000000001", "name": "Seen", "ownership": map[string]any{"default": 2}},
		"Actor.mine0000000000001": {"_id": "mine0000000000001", "name": "Mine", "ownership": map[string]any{"alice00000000001": 3}},
		"Actor.theirs00000000001": {"_id": "theirs00000000001", "name": "Theirs", "ownership": map[string]any{"default": 0}},
	}
	var mu sync.Mutex
	asked := map[string]int{}
	tt := e.connected(func(c *linktest.Config) {
		c.Handler = linktest.ByType(map[string]linktest.Handler{"entity": func(_ context.Context, req linktest.Request) (any, bool) {
			var p struct {
				UUID   string `json:"uuid"`
				UserID string `json:"userId"`
			}
			_ = req.Params(&p)
			mu.Lock()
			asked[p.UUID]++
			mu.Unlock()
			if p.UserID != "" {
				t.Errorf("the relay asked about %s as %s, not as a GM", p.UUID, p.UserID)
			}
			if d, ok := docs[p.UUID]; ok {
				return map[string]any{"uuid": p.UUID, "data": d}, true
			}
			return map[string]any{"error": "Entity not found: " + p.UUID, "data": nil}, true
		}})
	})
	clientID, _ := tt.Credentials()
	e.wait("the player list", func() bool { info, _ := e.svc.Hub().Info(clientID); return len(info.Players) == 2 })
	w := link.NewLinked(e.svc.Hub(), clientID, world.Info{}).WithEvents(evs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	alice := &world.User{ID: "alice00000000001", Name: "Alice", Role: world.RolePlayer}
	subscribe := func(user *world.User, ch world.EventChannel) world.EventSubscription {
		s, err := w.Subscribe(ctx, user, world.EventRequest{Channel: ch})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	aliceActors, gmActors, aliceHooks := subscribe(alice, world.ChannelActor), subscribe(nil, world.ChannelActor), subscribe(alice, world.ChannelHooks)
	e.wait("the module's channels", func() bool { c := tt.Channels(); return c["actor-events"] && c["hooks"] })
	// A reply the relay relays shows it Seen's ownership (it keeps it
	// while players follow the world's events).
	if _, err := w.GetJSON(ctx, nil, "Actor.seen0000000000001"); err != nil {
		t.Fatal(err)
	}

	update := func(actor, name string) {
		t.Helper()
		if err := tt.Emit("actor-event", map[string]any{"actorUuid": actor, "eventType": "update", "changes": map[string]any{"_id": actor[6:], "name": name}}); err != nil {
			t.Fatal(err)
		}
	}
	// The hook carries its actor's ownership: no question needed, and
	// the relay knows Payload's from then on.
	if err := tt.Emit("hook-event", map[string]any{"hook": "updateActor", "args": []any{
		map[string]any{"_id": "payload000000001", "name": "Payload", "ownership": map[string]any{"alice00000000001": 2}},
		map[string]any{"_id": "payload000000001", "name": "Payload"}, map[string]any{}}}); err != nil {
		t.Fatal(err)
	}
	update("Actor.seen0000000000001", "Seen 2")   // known from the reply: visible (default OBSERVER)
	update("Actor.mine0000000000001", "Mine 2")   // asked: visible (OWNER)
	update("Actor.theirs00000000001", "Theirs")   // asked: invisible (NONE)
	update("Actor.gone0000000000001", "Gone")     // asked, not found: undecided
	update("Actor.payload000000001", "Payload")   // known from the hook: visible
	update("Actor.mine0000000000001", "Mine 3")   // known now: not asked again
	update("Actor.theirs00000000001", "Theirs 2") // known now: invisible
	// The GM takes Mine away from Alice: that update is judged by the
	// actor as it left it.
	if err := tt.Emit("actor-event", map[string]any{"actorUuid": "Actor.mine0000000000001", "eventType": "update",
		"changes": map[string]any{"_id": "mine0000000000001", "name": "Mine 4", "ownership": map[string]any{"alice00000000001": 0}}}); err != nil {
		t.Fatal(err)
	}
	update("Actor.payload000000001", "Payload 2")

	names := func(s world.EventSubscription, n int) []string {
		t.Helper()
		var out []string
		for range n {
			ev, err := s.Next(ctx)
			if err != nil {
				t.Fatalf("after %v: %v", out, err)
			}
			var d struct {
				UUID    string `json:"uuid"`
				Changes struct {
					Name string `json:"name"`
				} `json:"changes"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			out = append(out, ev.Name+" "+d.UUID+" "+d.Changes.Name)
		}
		return out
	}
	if got, want := strings.Join(names(aliceHooks, 1), "|"), "updateActor Actor.payload000000001 Payload"; got != want {
		t.Errorf("Alice's hooks: %s, want %s", got, want)
	}
	got := strings.Join(names(aliceActors, 5), "|")
	want := "actor-update Actor.seen0000000000001 Seen 2|actor-update Actor.mine0000000000001 Mine 2|" +
		"actor-update Actor.payload000000001 Payload|actor-update Actor.mine0000000000001 Mine 3|actor-update Actor.payload000000001 Payload 2"
	if got != want {
		t.Errorf("Alice's actor events:\n%s\nwant\n%s", got, want)
	}
	if gm := names(gmActors, 9); len(gm) != 9 || gm[3] != "actor-update Actor.gone0000000000001 Gone" {
		t.Errorf("the GM's actor events: %q", gm)
	}
	if n := evs.Undecided(); n != 1 {
		t.Errorf("undecided deliveries: %d, want 1 (the actor the module could not find)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked["Actor.seen0000000000001"] != 1 || asked["Actor.mine0000000000001"] != 1 || asked["Actor.theirs00000000001"] != 1 ||
		asked["Actor.gone0000000000001"] != 1 || asked["Actor.payload000000001"] != 0 {
		t.Errorf("entity requests: %v; want one for each actor the relay did not know, none for Payload", asked)
	}
}
