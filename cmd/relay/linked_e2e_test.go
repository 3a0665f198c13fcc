package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
)

// TestLinkedWorldCalls: a linked world answers the same routes as an
// embedded one, through the same interceptors: the module receives the
// request type with its parameters, the resolved user and the key's
// scopes; its reply and its error texts become our envelope and statuses;
// what it does not offer is 501; a world that is not connected is 503 at
// once; GET /clients lists both kinds, a bound key only its worlds.
func TestLinkedWorldCalls(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	var mu sync.Mutex
	var seen []map[string]any
	tt := tr.linkedTabletop(func(c *linktest.Config) {
		c.Handler = func(_ context.Context, req linktest.Request) (any, bool) {
			var m map[string]any
			_ = req.Params(&m)
			mu.Lock()
			seen = append(seen, m)
			mu.Unlock()
			switch {
			case req.Type == "entity" && m["uuid"] == "Actor.secret":
				return map[string]any{"uuid": m["uuid"], "error": "User 'Gamemaster' does not have permission to view this entity", "data": nil}, true
			case req.Type == "entity" && m["uuid"] == "Actor.gone":
				return map[string]any{"uuid": m["uuid"], "error": "Entity not found", "data": nil}, true
			case req.Type == "entity":
				return map[string]any{"uuid": m["uuid"], "data": map[string]any{"_id": "hero", "name": "Hero", "type": "character"}}, true
			case req.Type == "short-rest":
				return map[string]any{"error": "Actor not found with UUID: " + m["actorUuid"].(string)}, true
			}
			return nil, false
		}
	})
	clientID, _ := tt.Credentials()
	waitFor(t, "the player list", func() bool { info, _ := tr.Links().Hub().Info(clientID); return len(info.Players) > 0 })
	last := func() map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}

	r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.hero", "userId", "Gamemaster"), nil)
	if r.Status != http.StatusOK || r.JSON(t)["type"] != "entity-result" || r.Data(t)["name"] != "Hero" {
		t.Fatalf("GET /get: %d %s", r.Status, r.Body)
	}
	if m := last(); m["type"] != "entity" || m["uuid"] != "Actor.hero" || m["userId"] != "gm000000000000001" {
		t.Fatalf("the module got %v", m)
	}
	scoped, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "reader", Scopes: []string{"entity:read", "clients:read"}})
	if r := tr.Do(http.MethodGet, "/get", scoped, relaytest.Q("clientId", clientID, "uuid", "Actor.hero"), nil); r.Status != http.StatusOK {
		t.Fatalf("GET /get with a scoped key: %d %s", r.Status, r.Body)
	}
	if s, _ := last()["_scopes"].([]any); !slices.Contains(s, any("entity:read")) {
		t.Fatalf("_scopes %v", last()["_scopes"])
	}
	for _, c := range []struct {
		uuid   string
		status int
		msg    string
	}{
		{"Actor.secret", http.StatusForbidden, "User 'Gamemaster' does not have permission to view this entity"},
		{"Actor.gone", http.StatusNotFound, "Entity not found"},
	} {
		r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", c.uuid), nil)
		if r.Status != c.status || r.ErrorText(t) != c.msg {
			t.Errorf("GET /get %s: %d %s", c.uuid, r.Status, r.Body)
		}
	}
	// An unknown user is refused by our interceptors before the module.
	n := len(seen)
	if r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.hero", "userId", "Nobody"), nil); r.Status != http.StatusBadRequest ||
		r.ErrorText(t) != "User not found: Nobody" || len(seen) != n {
		t.Errorf("unknown user: %d %s", r.Status, r.Body)
	}
	// A world of the dnd5e system gets the fifth-edition requests (those
	// of other systems answer 501: TestLinkedDnd5eOnlyInDnd5eWorlds).
	if r := tr.Do(http.MethodPost, "/dnd5e/short-rest", tr.AdminKey, relaytest.Q("clientId", clientID), map[string]any{"actorUuid": "Actor.gone"}); r.Status != http.StatusNotFound ||
		r.ErrorText(t) != "Actor not found with UUID: Actor.gone" || last()["type"] != "short-rest" {
		t.Errorf("short rest: %d %s", r.Status, r.Body)
	}

	// GET /clients: both kinds, with what a caller needs to pick one.
	r = tr.Do(http.MethodGet, "/clients", tr.AdminKey, nil, nil)
	clients := r.Data(t)["clients"].([]any)
	var demo, linked map[string]any
	for _, c := range clients {
		c := c.(map[string]any)
		switch c["clientId"] {
		case "demo":
			demo = c
		case clientID:
			linked = c
		}
	}
	if demo["kind"] != "embedded" || demo["online"] != true || demo["isOnline"] != true || demo["systemId"] != "dnd5e" || demo["worldId"] != "demo" || demo["connectedSince"] != "" {
		t.Errorf("demo in /clients: %v", demo)
	}
	if linked["kind"] != "linked" || linked["online"] != true || linked["worldId"] != "tavern-tales" || linked["worldTitle"] != "Tavern Tales" ||
		linked["name"] != "Tavern Tales" || linked["systemId"] != "dnd5e" || linked["systemVersion"] != "5.0.4" || linked["tabletopVersion"] != "13.345" {
		t.Errorf("linked world in /clients: %v", linked)
	}
	for _, f := range []string{"connectedSince", "lastSeen"} {
		if ts, err := time.Parse(time.RFC3339, linked[f].(string)); err != nil || time.Since(ts) > time.Minute {
			t.Errorf("%s %v", f, linked[f])
		}
	}
	bound, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "bound", Scopes: []string{"all"}, ClientIds: []string{"demo"}})
	r = tr.Do(http.MethodGet, "/clients", bound, nil, nil)
	if cs := r.Data(t)["clients"].([]any); len(cs) != 1 || cs[0].(map[string]any)["clientId"] != "demo" {
		t.Errorf("bound key's /clients: %s", r.Body)
	}
	if r := tr.Do(http.MethodGet, "/get", bound, relaytest.Q("clientId", clientID, "uuid", "Actor.hero"), nil); r.Status != http.StatusForbidden {
		t.Errorf("bound key on the linked world: %d %s", r.Status, r.Body)
	}

	// Not connected: 503 at once, and /clients shows it offline.
	tt.Drop()
	waitFor(t, "the world to go offline", func() bool { return !tr.Links().Hub().Online(clientID) })
	start := time.Now()
	r = tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.hero"), nil)
	if r.Status != http.StatusServiceUnavailable || r.ErrorText(t) != "world "+clientID+" is not connected" || time.Since(start) > 5*time.Second {
		t.Errorf("not connected: %d %s", r.Status, r.Body)
	}
	r = tr.Do(http.MethodGet, "/clients", tr.AdminKey, nil, nil)
	for _, c := range r.Data(t)["clients"].([]any) {
		if c := c.(map[string]any); c["clientId"] == clientID && (c["online"] != false || c["isOnline"] != false || c["connectedSince"] != "" || c["lastSeen"] == "") {
			t.Errorf("offline world in /clients: %v", c)
		}
	}
	// An id of neither kind is 404 as before.
	if r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", "nowhere", "uuid", "Actor.hero"), nil); r.Status != http.StatusNotFound {
		t.Errorf("unknown world: %d %s", r.Status, r.Body)
	}
}

// TestLinkedWorldFailures: a module that does not answer in time is 504
// naming the world and the operation; a module that goes away with
// requests in flight fails them at once with 503.
func TestLinkedWorldFailures(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.LinkReplyTimeout = time.Second })
	got := make(chan string, 10)
	tt := tr.linkedTabletop(func(c *linktest.Config) {
		c.Handler = func(ctx context.Context, req linktest.Request) (any, bool) {
			var m map[string]any
			_ = req.Params(&m)
			uuid, _ := m["uuid"].(string)
			got <- uuid
			if uuid == "Actor.hang" {
				<-ctx.Done() // until the connection ends
			}
			return nil, false // never answers
		}
	})
	clientID, _ := tt.Credentials()
	waitFor(t, "the player list", func() bool { info, _ := tr.Links().Hub().Info(clientID); return len(info.Players) > 0 })

	r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.slow"), nil)
	if r.Status != http.StatusGatewayTimeout || r.ErrorText(t) != "world "+clientID+" did not answer entity within 1s" {
		t.Errorf("time-out: %d %s", r.Status, r.Body)
	}
	<-got

	done := make(chan relaytest.Response, 3)
	for range 3 {
		go func() {
			done <- tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.hang"), nil)
		}()
	}
	for range 3 {
		<-got
	}
	tt.Drop()
	for range 3 {
		r := <-done
		if r.Status != http.StatusServiceUnavailable || r.ErrorText(t) != "world "+clientID+" disconnected before answering entity" {
			t.Errorf("disconnect in flight: %d %s", r.Status, r.Body)
		}
	}
}

// TestLinkedWorldEvents: a linked world's events reach SSE streams with
// our ids and names; the module's channel is on while a stream needs it
// and off when the last leaves; filters read the fields the module nests
// under `data`; events come in the relay's shapes; a player gets only
// events whose document grants them at least OBSERVER (here from the
// ownership the payload carries), a GM every one; a resume replays what
// was missed.
func TestLinkedWorldEvents(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	tt := tr.linkedTabletop(func(c *linktest.Config) {
		c.Players = append(c.Players, link.Player{ID: "alice00000000001", Name: "Alice", Role: world.RolePlayer})
	})
	clientID, _ := tt.Credentials()
	waitFor(t, "the player list", func() bool { info, _ := tr.Links().Hub().Info(clientID); return len(info.Players) == 2 })

	actor := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("clientId", clientID, "actorUuid", "Actor.a"), nil)
	alice := tr.openStream("/hooks/subscribe", tr.AdminKey, relaytest.Q("clientId", clientID, "userId", "Alice"), nil)
	actor.expect("connected")
	alice.expect("connected")
	waitFor(t, "the module's channels", func() bool { c := tt.Channels(); return c["actor-events"] && c["hooks"] })

	emit := func(typ string, data map[string]any) {
		t.Helper()
		if err := tt.Emit(typ, data); err != nil {
			t.Fatal(err)
		}
	}
	emit("actor-event", map[string]any{"actorUuid": "Actor.b", "eventType": "update", "changes": map[string]any{"name": "B"}})
	emit("actor-event", map[string]any{"actorUuid": "Actor.a", "eventType": "update", "changes": map[string]any{"name": "A"}})
	hook := func(id, name string, ownership map[string]any) map[string]any {
		doc := map[string]any{"_id": id, "name": name}
		if ownership != nil {
			doc["ownership"] = ownership
		}
		return map[string]any{"hook": "updateActor", "args": []any{doc, map[string]any{"_id": id, "name": name}, map[string]any{}}}
	}
	emit("hook-event", hook("hidden", "Hidden", map[string]any{"default": 0}))
	emit("hook-event", hook("open", "Open", nil))
	emit("hook-event", hook("mine", "Mine", map[string]any{"alice00000000001": 3}))

	f := actor.expect("actor-update")[0]
	if d := f.json(t); d["actorUuid"] != "Actor.a" || f.id != "2" {
		t.Fatalf("actor event %+v", f)
	}
	f = alice.expect("updateActor")[0]
	if d := f.json(t); d["uuid"] != "Actor.mine" || d["changes"].(map[string]any)["name"] != "Mine" {
		t.Fatalf("the player got %s", f.data)
	}

	// The tabletop reconnects while streams wait: the relay turns their
	// channels on again, and events flow to the same streams.
	turnedOn := func() int {
		n := 0
		for _, raw := range tt.Received() {
			var m map[string]any
			if json.Unmarshal(raw, &m) == nil && m["type"] == "event-subscription-update" && m["channel"] == "actor-events" && m["count"].(float64) > 0 {
				n++
			}
		}
		return n
	}
	before := turnedOn()
	tt.Drop()
	waitFor(t, "the world to go offline", func() bool { return !tr.Links().Hub().Online(clientID) })
	if err := tt.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the channel turned on again", func() bool { return turnedOn() > before })
	emit("actor-event", map[string]any{"actorUuid": "Actor.a", "eventType": "item-add", "item": map[string]any{"_id": "rope", "name": "Rope"}})
	if f := actor.expect("actor-item-add")[0]; f.id != "6" {
		t.Fatalf("event after the reconnection %+v", f)
	}

	// Resume from before the actor event replays it.
	again := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("clientId", clientID, "actorUuid", "Actor.a"), http.Header{"Last-Event-Id": {"1"}})
	again.expect("connected")
	if r := again.expect("actor-update")[0]; r.id != "2" || r.json(t)["actorUuid"] != "Actor.a" {
		t.Fatalf("replayed %+v", r)
	}
	again.close()
	actor.close()
	alice.close()
	waitFor(t, "the module's channels off", func() bool { c := tt.Channels(); return !c["actor-events"] && !c["hooks"] })
}
