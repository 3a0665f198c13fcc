package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/embedded"
	"github.com/tabletop-relay/relay/world/events"
)

// linkDemoCopyWithEvents is linkDemoCopy with the copy's own event hub: the
// simulated tabletop sends the copy's events in the module's shapes for
// the channels the relay turns on. It returns the linked world's clientId
// and the tabletop.
func linkDemoCopyWithEvents(tb testing.TB, r *node.Node) (string, *linktest.Tabletop) {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	hub := events.New(events.Options{})
	tb.Cleanup(hub.Close)
	host, err := world.OpenHost(dir, world.Options{Journal: hub})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { host.Close() })
	host.Watch(hub.Committed)
	seed, err := demo.Seed()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := host.Create(ctx, demo.ClientID, seed); err != nil {
		tb.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "worlds", demo.ClientID, "files"), demo.Files()); err != nil {
		tb.Fatal(err)
	}
	w, err := embedded.NewRegistry(host, embedded.Options{DataDir: dir, Hub: hub}).World(ctx, demo.ClientID)
	if err != nil {
		tb.Fatal(err)
	}
	players, err := linktest.Players(ctx, w)
	if err != nil {
		tb.Fatal(err)
	}
	code, _, err := r.Links().CreatePairingCode(ctx, "", "test")
	if err != nil {
		tb.Fatal(err)
	}
	tt := linktest.New(linktest.Config{RelayURL: "http://" + r.Addr(), WorldID: "demo-copy", WorldTitle: w.Info().Title,
		FoundryVersion: "13.345", SystemID: "dnd5e", SystemVersion: "5.0.4", ServerFingerprint: "fp-demo-copy-events",
		Players: players, Handler: linktest.WorldHandler(w)})
	stop, err := tt.MirrorEvents(ctx, w)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	if _, err := tt.Pair(ctx, code); err != nil {
		tb.Fatal(err)
	}
	if err := tt.Connect(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tt.Drop)
	clientID, _ := tt.Credentials()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if info, _ := r.Links().Hub().Info(clientID); len(info.Players) == len(players) {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatal("timed out waiting for the player list")
		}
	}
	return clientID, tt
}

// eventStreamCase is one subscriber of the event comparison.
type eventStreamCase struct {
	name string
	// open opens the stream on a world and returns it, its first event
	// (`connected`) read.
	open func(tr *testRelay, conn *grpc.ClientConn, clientID string) eventSource
	// last says whether an event is the last one the stream waits for.
	last func(streamEvent) bool
	// ignore are keys left out of the payloads (what the module's
	// messages do not carry).
	ignore []string
}

// hpIs reports whether an event's changes set Aria's hit points to v.
func hpIs(ev streamEvent, v float64) bool {
	changes, _ := ev.data["changes"].(map[string]any)
	system, _ := changes["system"].(map[string]any)
	attrs, _ := system["attributes"].(map[string]any)
	hp, _ := attrs["hp"].(map[string]any)
	return hp["value"] == v && ev.data["uuid"] == relaytest.AriaUUID
}

// sseStream opens an SSE stream for the comparison.
func sseStream(path string, pairs ...string) func(*testRelay, *grpc.ClientConn, string) eventSource {
	return func(tr *testRelay, _ *grpc.ClientConn, clientID string) eventSource {
		s := sseSource{tr.openStream(path, tr.AdminKey, relaytest.Q(append([]string{"clientId", clientID}, pairs...)...), nil)}
		if ev := s.next(tr.t); ev.name != "connected" {
			tr.t.Fatalf("%s: first event %s", path, ev.name)
		}
		return s
	}
}

// grpcActors opens a gRPC actor stream for the comparison.
func grpcActors(userID, actorUUID string) func(*testRelay, *grpc.ClientConn, string) eventSource {
	return func(tr *testRelay, conn *grpc.ClientConn, clientID string) eventSource {
		s := openGRPCStream(tr.t, tr.AdminKey, func(ctx context.Context) (func() (*relayv1.Event, error), error) {
			st, err := relayv1.NewEventServiceClient(conn).SubscribeActors(ctx, &relayv1.SubscribeActorsRequest{ClientId: clientID, UserId: userID, ActorUuid: actorUUID})
			if err != nil {
				return nil, err
			}
			return func() (*relayv1.Event, error) { r, err := st.Recv(); return r.GetEvent(), err }, nil
		})
		if ev := s.next(tr.t); ev.name != "connected" {
			tr.t.Fatalf("gRPC: first event %s", ev.name)
		}
		return s
	}
}

// grpcHooks opens a gRPC hooks stream for the comparison.
func grpcHooks(userID, hooks string) func(*testRelay, *grpc.ClientConn, string) eventSource {
	return func(tr *testRelay, conn *grpc.ClientConn, clientID string) eventSource {
		s := openGRPCStream(tr.t, tr.AdminKey, func(ctx context.Context) (func() (*relayv1.Event, error), error) {
			st, err := relayv1.NewEventServiceClient(conn).SubscribeHooks(ctx, &relayv1.SubscribeHooksRequest{ClientId: clientID, UserId: userID, Hooks: hooks})
			if err != nil {
				return nil, err
			}
			return func() (*relayv1.Event, error) { r, err := st.Recv(); return r.GetEvent(), err }, nil
		})
		if ev := s.next(tr.t); ev.name != "connected" {
			tr.t.Fatalf("gRPC: first event %s", ev.name)
		}
		return s
	}
}

// TestLinkedEventsMatchEmbedded makes the same changes to the embedded
// demo world and to a copy of it linked through the simulator, which sends
// the copy's events in the module's shapes, and requires every subscriber
// (SSE and gRPC, GM and the player Alice, with hook-name, actorUuid,
// sceneId and encounterId filters) to receive the same events: the same
// names and payloads, ids and times aside. The changes cover actors (hit
// points, a name a LIMITED reader sees, an actor Alice cannot see, items
// given), tokens (one whose changes belong to an actor Alice cannot see),
// a scene opened to Alice, and an encounter from its start to its end with
// a hidden combatant. The one difference allowed: the module has no event
// for a change of the scene itself (scene-update).
func TestLinkedEventsMatchEmbedded(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked, tt := linkDemoCopyWithEvents(t, tr.Node)
	conn := tr.h2cConn()
	hooks := "updateActor,createItem,updateItem,deleteItem,updateToken,updateScene,createCombat,createCombatant,updateCombatant,deleteCombatant,deleteCombat,combatStart,combatTurn,combatRound"
	lastHook := func(ev streamEvent) bool { return ev.name == "updateActor" && hpIs(ev, 7) }
	lastActor := func(ev streamEvent) bool { return ev.name == "actor-update" && hpIs(ev, 7) }
	lastCombat := func(ev streamEvent) bool { return ev.name == "combat-end" }
	lastScene := func(ev streamEvent) bool {
		changes, _ := ev.data["changes"].(map[string]any)
		return ev.name == "scene-token-update" && changes["x"] == 600.0
	}
	cases := []eventStreamCase{
		{name: "GM hooks, by name", open: sseStream("/hooks/subscribe", "hooks", hooks), last: lastHook},
		{name: "GM hooks over gRPC", open: grpcHooks("", hooks), last: lastHook},
		{name: "GM actor, by actorUuid", open: sseStream("/actor/subscribe", "actorUuid", relaytest.AriaUUID), last: lastActor},
		{name: "GM actors over gRPC", open: grpcActors("", ""), last: lastActor},
		{name: "GM scene, by sceneId", open: sseStream("/scene/subscribe", "sceneId", "tavernScene00001"), last: lastScene},
		{name: "GM combat", open: sseStream("/encounters/subscribe"), last: lastCombat},
		{name: "Alice hooks", open: sseStream("/hooks/subscribe", "hooks", hooks, "userId", "Alice"), last: lastHook},
		{name: "Alice hooks over gRPC", open: grpcHooks("Alice", hooks), last: lastHook},
		{name: "Alice actors", open: sseStream("/actor/subscribe", "userId", "Alice"), last: lastActor},
		{name: "Alice actors over gRPC", open: grpcActors("Alice", ""), last: lastActor},
		{name: "Alice scenes", open: sseStream("/scene/subscribe", "userId", "Alice"), last: lastScene},
		{name: "Alice combat", open: sseStream("/encounters/subscribe", "userId", "Alice"), last: lastCombat},
	}
	got := make([][]*bufferedSource, 2)
	for i, clientID := range []string{demo.ClientID, linked} {
		for _, c := range cases {
			got[i] = append(got[i], &bufferedSource{src: c.open(tr, conn, clientID)})
		}
	}
	gmCombat := slices.IndexFunc(cases, func(c eventStreamCase) bool { return c.name == "GM combat" })
	waitFor(t, "the module's channels", func() bool {
		c := tt.Channels()
		return c["hooks"] && c["actor-events"] && c["scene-events"] && c["combat-events"]
	})

	// The same changes to both worlds; the ids each world makes up are
	// replaced by names before the comparison.
	fresh := make([]map[string]string, 2)
	filtered := make([]*bufferedSource, 2)
	for i, clientID := range []string{demo.ClientID, linked} {
		fresh[i] = map[string]string{}
		call := func(method, path string, query map[string]string, body map[string]any) map[string]any {
			t.Helper()
			qv := relaytest.Q("clientId", clientID)
			for k, v := range query {
				qv.Set(k, v)
			}
			var b any // a nil map would be sent as a JSON null
			if body != nil {
				b = body
			}
			r := tr.Do(method, path, tr.AdminKey, qv, b)
			if r.Status != http.StatusOK {
				t.Fatalf("%s %s on %s: %d %s", method, path, clientID, r.Status, r.Body)
			}
			return r.Data(t)
		}
		hp := func(uuid string, v float64) {
			call("PUT", "/update", map[string]string{"uuid": uuid}, map[string]any{"data": map[string]any{"system.attributes.hp.value": v}})
		}
		// The relay learns who may see the scene from this reply; had it
		// to ask the module later, it would judge the first token move
		// by the scene as it is then, after Alice was let in.
		call("GET", "/get", map[string]string{"uuid": "Scene.tavernScene00001"}, nil)
		hp(relaytest.AriaUUID, 20)
		call("PUT", "/update", map[string]string{"uuid": relaytest.GuardUUID}, map[string]any{"data": map[string]any{"name": "Captain of the Guard"}})
		hp(relaytest.GuardUUID, 5)
		hp(relaytest.GoblinUUID, 3)
		g := call("POST", "/give", nil, map[string]any{"fromUuid": relaytest.BromUUID, "toUuid": relaytest.AriaUUID, "itemName": "Longsword"})
		newItem, _ := g["newItemUuid"].(string)
		if newItem == "" {
			t.Fatalf("give answered %v", g)
		}
		fresh[i][newItem[strings.LastIndexByte(newItem, '.')+1:]] = "<new item>"
		move := func(token string, data map[string]any) {
			call("PUT", "/update", map[string]string{"uuid": token}, map[string]any{"data": data})
		}
		move(ariaTokenUUID, map[string]any{"x": 500, "y": 400})
		// The scene becomes Alice's to see (the scene channel has no
		// event for it: the module sends none).
		call("PUT", "/update", map[string]string{"uuid": "Scene.tavernScene00001"}, map[string]any{"data": map[string]any{"ownership.aliceUser0000001": 2}})
		move(goblinTokenUUID, map[string]any{"x": 300})
		// The goblin's token changes its actor's data: not for Alice.
		move(goblinTokenUUID, map[string]any{"delta": map[string]any{"system": map[string]any{"attributes": map[string]any{"hp": map[string]any{"value": 2}}}}})
		enc := call("POST", "/start-encounter", nil, map[string]any{"name": "Brawl", "tokenUuids": []string{ariaTokenUUID, bromTokenUUID}})
		encounter := enc["encounter"].(map[string]any)
		id := encounter["id"].(string)
		fresh[i][id] = "<encounter>"
		for n, c := range encounter["combatants"].([]any) {
			fresh[i][c.(map[string]any)["id"].(string)] = "<combatant " + string(rune('A'+n)) + ">"
		}
		// The encounter's own stream opens once the start reached
		// subscribers (the module's event may come after the reply).
		got[i][gmCombat].waitFor(t, "combat-start")
		filtered[i] = &bufferedSource{src: sseStream("/encounters/subscribe", "encounterId", id)(tr, conn, clientID)}
		// A hidden goblin joins: players see neither it nor its removal.
		call("POST", "/add-to-encounter", nil, map[string]any{"encounterId": id, "uuids": []string{goblinTokenUUID}})
		var goblin string
		for _, e := range call("GET", "/encounters", nil, nil)["encounters"].([]any) {
			for _, c := range e.(map[string]any)["combatants"].([]any) {
				if c := c.(map[string]any); c["tokenUuid"] == goblinTokenUUID {
					goblin = c["id"].(string)
				}
			}
		}
		if goblin == "" {
			t.Fatal("the goblin did not join")
		}
		fresh[i][goblin] = "<goblin combatant>"
		// The relay completes a combat event with the combat as the
		// module gives it when asked, which is the combat as it is then:
		// each change of the combat waits for the event of the last.
		got[i][gmCombat].waitFor(t, "combat-combatant-add")
		call("PUT", "/update", map[string]string{"uuid": "Combat." + id + ".Combatant." + goblin}, map[string]any{"data": map[string]any{"hidden": true}})
		call("POST", "/next-turn", nil, map[string]any{})
		got[i][gmCombat].waitFor(t, "combat-turn")
		call("POST", "/remove-from-encounter", nil, map[string]any{"encounterId": id, "uuids": []string{goblinTokenUUID}})
		got[i][gmCombat].waitFor(t, "combat-combatant-remove")
		call("POST", "/end-encounter", nil, map[string]any{"encounterId": id})
		move(ariaTokenUUID, map[string]any{"x": 600})
		hp(relaytest.AriaUUID, 7)
	}
	cases = append(cases, eventStreamCase{name: "GM combat, by encounterId", last: lastCombat})
	got[0] = append(got[0], filtered[0])
	got[1] = append(got[1], filtered[1])

	for n, c := range cases {
		var lists [2][]any
		for i := range 2 {
			for {
				ev := got[i][n].next(t)
				if ev.name == "scene-update" && i == 0 {
					// The module has no event for a change of the
					// scene itself (reference §7.5).
					continue
				}
				lists[i] = append(lists[i], map[string]any{"name": ev.name, "data": renameIDs(normalise(ev.data, append(c.ignore, "_stats")), fresh[i])})
				if c.last(ev) {
					break
				}
			}
		}
		if !reflect.DeepEqual(lists[0], lists[1]) {
			e, _ := json.MarshalIndent(lists[0], "", " ")
			l, _ := json.MarshalIndent(lists[1], "", " ")
			t.Errorf("%s:\nembedded %s\nlinked %s", c.name, e, l)
		}
		if strings.HasPrefix(c.name, "Alice actors") {
			// The player gets her own actor, the LIMITED guard's new name
			// and not its hit points, and nothing of the goblin.
			var got []string
			for _, ev := range lists[1] {
				d := ev.(map[string]any)["data"].(map[string]any)
				changes, _ := json.Marshal(d["changes"])
				got = append(got, d["uuid"].(string)+" "+string(changes))
			}
			want := []string{relaytest.AriaUUID + ` {"system":{"attributes":{"hp":{"value":20}}}}`, relaytest.GuardUUID + ` {"name":"Captain of the Guard"}`,
				relaytest.AriaUUID + ".Item.<new item> null", relaytest.BromUUID + ".Item.bromLongsword001 null", relaytest.AriaUUID + ` {"system":{"attributes":{"hp":{"value":7}}}}`}
			if !slices.Equal(got, want) {
				t.Errorf("%s: %q, want %q", c.name, got, want)
			}
		}
	}
}

// bufferedSource is an event source whose events can be looked ahead at.
type bufferedSource struct {
	src  eventSource
	seen []streamEvent
}

// waitFor reads events until one is named name; next returns them again.
func (b *bufferedSource) waitFor(t *testing.T, name string) {
	t.Helper()
	for {
		ev := b.src.next(t)
		b.seen = append(b.seen, ev)
		if ev.name == name {
			return
		}
	}
}

func (b *bufferedSource) next(t *testing.T) streamEvent {
	t.Helper()
	if len(b.seen) > 0 {
		ev := b.seen[0]
		b.seen = b.seen[1:]
		return ev
	}
	return b.src.next(t)
}

// renameIDs replaces the ids a world made up (keys of names) by their
// names, in every string of v.
func renameIDs(v any, names map[string]string) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = renameIDs(x, names)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = renameIDs(x, names)
		}
		return out
	case string:
		for id, name := range names {
			v = strings.ReplaceAll(v, id, name)
		}
		return v
	}
	return v
}
