package events_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

const (
	brom        = "Actor.bromIronfist0001"
	tavern      = "Scene.tavernScene00001"
	goblinToken = "Scene.tavernScene00001.Token.goblinToken00001"
)

var (
	gm   = &world.User{ID: "gamemaster000001", Name: "Gamemaster", Role: world.RoleGamemaster}
	tess = &world.User{ID: "tessUser00000001", Name: "Tess", Role: world.RoleTrusted}
)

// post creates a chat message in its own transaction, after more (changes
// made in the same transaction, before the message).
func post(t *testing.T, e *world.Engine, msg world.Document, more ...func(tx *world.Tx) error) {
	t.Helper()
	err := e.Mutate(context.Background(), func(tx *world.Tx) error {
		for _, fn := range more {
			if err := fn(tx); err != nil {
				return err
			}
		}
		_, err := tx.Create("ChatMessage", "", msg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// roll is a chat message that posts a roll for an actor, as the
// fifth-edition rules write one.
func roll(author, actorUUID, flavor string, kv ...any) world.Document {
	msg := world.Document{
		"author":  author,
		"speaker": map[string]any{"scene": nil, "actor": strings.TrimPrefix(actorUUID, "Actor."), "token": nil, "alias": "Speaker of " + flavor},
		"flavor":  flavor,
		"content": "17",
		"rolls":   []any{`{"formula":"1d20 + 4 + 3","total":17}`},
		"whisper": []any{},
		"blind":   false,
		"flags":   map[string]any{"dnd5e": map[string]any{"roll": map[string]any{"type": "skill"}}},
	}
	for i := 0; i+1 < len(kv); i += 2 {
		msg[kv[i].(string)] = kv[i+1]
	}
	return msg
}

// drain returns the payloads of the events waiting for sub, by flavor
// (or by event name for payloads without one), waiting quiet for more.
func drain(t *testing.T, sub *events.Subscription, quiet time.Duration) []map[string]any {
	t.Helper()
	var out []map[string]any
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		ev, err := sub.Next(ctx)
		cancel()
		if err != nil {
			return out
		}
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		data["event"] = ev.Name
		out = append(out, data)
	}
}

// flavors lists what each chat event shows: the flavor of a whole message,
// "limited" for the LIMITED payload.
func flavors(t *testing.T, got []map[string]any) []string {
	t.Helper()
	var out []string
	for _, d := range got {
		data, _ := d["data"].(map[string]any)
		switch {
		case data == nil:
			t.Fatalf("chat event without data: %v", d)
		case data["flavor"] != nil:
			if data["rolls"] == nil || data["speaker"] == nil {
				t.Fatalf("whole message without its rolls or speaker: %v", data)
			}
			out = append(out, data["flavor"].(string))
		default:
			if len(data) != 4 || data["type"] != "ChatMessage" || data["name"] != nil || data["img"] != nil || data["uuid"] == nil {
				t.Fatalf("LIMITED chat message %v, want name, uuid, type and img only", data)
			}
			out = append(out, "limited")
		}
	}
	return out
}

// TestChatMessagesFollowTheirSpeakersAndTargets: a chat message carries
// its speaker's data, so each reader gets it as they may read the speaker
// (and the message itself: whispers, blind rolls), and only when they may
// see the targets it names.
func TestChatMessagesFollowTheirSpeakersAndTargets(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	chat := func(user *world.User) *events.Subscription {
		return subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Hooks: []string{"createChatMessage"}}, User: user})
	}
	gmSub, aliceSub, bobSub, tessSub, nobody := chat(gm), chat(alice), chat(bob), chat(tess), chat(nil)

	post(t, e, roll(gm.ID, goblin, "goblin"))       // NONE for the players
	post(t, e, roll(gm.ID, guard, "guard"))         // LIMITED for the players
	post(t, e, roll(bob.ID, brom, "brom"))          // Alice OBSERVER, Bob OWNER
	post(t, e, roll(alice.ID, aria, "aria"))        // Alice OWNER, Bob LIMITED
	post(t, e, roll(gm.ID, "goblin0000000001", "")) // speaker as a bare id, no flavor: still the goblin
	post(t, e, roll(alice.ID, aria, "aria at the goblin", "flags", map[string]any{"dnd5e": map[string]any{"targets": []any{map[string]any{"uuid": goblin, "name": "Goblin"}}}}))
	post(t, e, roll(alice.ID, aria, "aria at the guard", "flags", map[string]any{"dnd5e": map[string]any{"targets": []any{map[string]any{"uuid": guard, "name": "Town Guard"}}}}))
	post(t, e, roll(alice.ID, aria, "aria at a goblin token", "flags", map[string]any{"dnd5e": map[string]any{"targets": []any{map[string]any{"uuid": goblinToken}}}})) // the scene is NONE to players
	post(t, e, roll(alice.ID, aria, "aria to bob", "whisper", []any{bob.ID}))
	post(t, e, roll(alice.ID, aria, "aria blind", "whisper", []any{gm.ID}, "blind", true))
	post(t, e, roll(gm.ID, "Actor.nobody0000000001", "nobody")) // an actor that does not exist
	// The goblin is shown to Alice in the same transaction as the
	// message: the message is judged as the transaction left the world.
	post(t, e, roll(gm.ID, goblin, "goblin shown"), func(tx *world.Tx) error {
		_, err := tx.Update(goblin, world.Document{"ownership." + alice.ID: float64(world.LevelObserver)})
		return err
	})

	all := []string{"goblin", "guard", "brom", "aria", "", "aria at the goblin", "aria at the guard", "aria at a goblin token", "aria to bob", "aria blind", "nobody", "goblin shown"}
	want := map[string][]string{
		"gm":    all,
		"nil":   all,
		"alice": {"limited", "brom", "aria", "aria at the guard", "aria to bob", "limited", "goblin shown"},
		"bob":   {"limited", "brom", "limited", "limited", "limited"},
		"tess":  {"limited"},
	}
	subs := map[string]*events.Subscription{"gm": gmSub, "nil": nobody, "alice": aliceSub, "bob": bobSub, "tess": tessSub}
	for name, sub := range subs {
		got := drain(t, sub, 300*time.Millisecond)
		var shown []string
		if name == "gm" || name == "nil" {
			for _, d := range got {
				shown = append(shown, d["data"].(map[string]any)["flavor"].(string))
			}
		} else {
			shown = flavors(t, got)
		}
		if !equal(shown, want[name]) {
			t.Errorf("%s got %q, want %q", name, shown, want[name])
		}
	}

	// A resume replays the same, judged as at the time of each event:
	// Alice seeing the goblin now does not show her its first roll.
	replay := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Hooks: []string{"createChatMessage"}, Resume: true, After: 0}, User: alice})
	var replayed []map[string]any
	for _, ev := range replay.Replay() {
		var d map[string]any
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		replayed = append(replayed, d)
	}
	if got := flavors(t, replayed); !equal(got, want["alice"]) {
		t.Errorf("Alice's replay %q, want %q", got, want["alice"])
	}
}

// TestChatEventsAreJudgedAsRecordedAfterARestart: the embedded documents'
// access is kept in the journal, so a resume after a restart withholds the
// same messages.
func TestChatEventsAreJudgedAsRecordedAfterARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, hub := openDemo(t, dir, events.Options{})
	post(t, e, roll(gm.ID, goblin, "goblin"))
	post(t, e, roll(gm.ID, guard, "guard"))
	post(t, e, roll(bob.ID, brom, "brom"))
	hub.Close()
	e.Close()

	e2, hub2 := openDemo(t, dir, events.Options{})
	sub := subscribe(t, hub2, e2, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Hooks: []string{"createChatMessage"}, Resume: true, After: 0}, User: alice})
	var got []map[string]any
	for _, ev := range sub.Replay() {
		var d map[string]any
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if shown := flavors(t, got); !equal(shown, []string{"limited", "brom"}) {
		t.Fatalf("Alice's replay after a restart %q, want [limited brom]", shown)
	}
}

// showTavern makes the tavern scene OBSERVER for everyone and gives the
// goblin's token its own hit points, as an unlinked token keeps them.
func showTavern(t *testing.T, e *world.Engine) {
	t.Helper()
	update(t, e, tavern, world.Document{"ownership.default": float64(world.LevelObserver)})
}

// TestTokenDeltasFollowTheirActors: an unlinked token's `delta` is its
// actor's data: a reader who sees the scene but not the actor gets the
// token without it, and no event for a change of the delta alone.
func TestTokenDeltasFollowTheirActors(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	showTavern(t, e)
	sceneOf := func(user *world.User) *events.Subscription {
		return subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelScene}, User: user})
	}
	tokenHooks := func(user *world.User) *events.Subscription {
		return subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Hooks: []string{"createToken", "updateToken", "createScene"}}, User: user})
	}
	gmScene, aliceScene := sceneOf(gm), sceneOf(alice)
	gmHooks, aliceHooks := tokenHooks(gm), tokenHooks(alice)

	update(t, e, goblinToken, world.Document{"delta.system.attributes.hp.value": 3})                                       // the delta alone
	update(t, e, goblinToken, world.Document{"x": 900, "delta.system.attributes.hp.value": 2})                             // with a position
	update(t, e, "Scene.tavernScene00001.Token.ariaToken0000001", world.Document{"delta": map[string]any{"name": "Aria"}}) // Alice owns Aria
	if _, err := e.Create(context.Background(), nil, world.CreateParams{Type: "Token", ParentUUID: tavern, Data: world.Document{"name": "Second goblin", "actorId": "goblin0000000001", "delta": map[string]any{"system": map[string]any{"attributes": map[string]any{"hp": map[string]any{"value": 5}}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Create(context.Background(), nil, world.CreateParams{Type: "Scene", Data: world.Document{"name": "Cave", "ownership": map[string]any{"default": float64(world.LevelObserver)}, "tokens": []any{
		map[string]any{"_id": "caveGoblin000001", "name": "Cave goblin", "actorId": "goblin0000000001", "delta": map[string]any{"system": map[string]any{"attributes": map[string]any{"hp": map[string]any{"value": 1}}}}},
		map[string]any{"_id": "caveBrom00000001", "name": "Brom", "actorId": "bromIronfist0001", "delta": map[string]any{"name": "Brom in the cave"}},
		map[string]any{"_id": "caveGoblin000002", "name": "Cave goblin 2", "actorId": "goblin0000000001", "delta": map[string]any{"system": map[string]any{}}},
	}}}); err != nil {
		t.Fatal(err)
	}

	got := drain(t, gmScene, 300*time.Millisecond)
	if names := eventNames(got); !equal(names, []string{"scene-token-update", "scene-token-update", "scene-token-update", "scene-token-create"}) {
		t.Fatalf("GM scene events %v", names)
	}
	if _, ok := got[0]["changes"].(map[string]any)["delta"]; !ok {
		t.Fatalf("GM must get the delta: %v", got[0])
	}
	got = drain(t, aliceScene, 300*time.Millisecond)
	if names := eventNames(got); !equal(names, []string{"scene-token-update", "scene-token-update", "scene-token-create"}) {
		t.Fatalf("Alice's scene events %v: a change of the goblin's delta alone must not reach her", names)
	}
	if c := got[0]["changes"].(map[string]any); len(c) != 1 || c["x"] != 900.0 {
		t.Fatalf("Alice's goblin token changes %v, want x only", c)
	}
	if c := got[1]["changes"].(map[string]any); c["delta"] == nil {
		t.Fatalf("Alice owns Aria and gets her token's delta: %v", c)
	}
	if tok := got[2]["token"].(map[string]any); tok["name"] != "Second goblin" || tok["delta"] != nil || tok["actorId"] == nil {
		t.Fatalf("Alice's new goblin token %v, want it without the delta", tok)
	}

	gmGot := drain(t, gmHooks, 300*time.Millisecond)
	if names := eventNames(gmGot); !equal(names, []string{"updateToken", "updateToken", "updateToken", "createToken", "createScene"}) {
		t.Fatalf("GM hooks %v", names)
	}
	got = drain(t, aliceHooks, 300*time.Millisecond)
	if names := eventNames(got); !equal(names, []string{"updateToken", "updateToken", "createToken", "createScene"}) {
		t.Fatalf("Alice's hooks %v", names)
	}
	if c := got[0]["changes"].(map[string]any); len(c) != 1 || c["x"] != 900.0 {
		t.Fatalf("Alice's updateToken changes %v", c)
	}
	if d := got[2]["data"].(map[string]any); d["delta"] != nil || d["name"] != "Second goblin" {
		t.Fatalf("Alice's createToken data %v", d)
	}
	tokens := got[3]["data"].(map[string]any)["tokens"].([]any)
	for i, want := range []bool{false, true, false} {
		tok := tokens[i].(map[string]any)
		if _, has := tok["delta"]; has != want || tok["name"] == nil {
			t.Errorf("Alice's new scene token %d %v: delta shown %v, want %v", i, tok, has, want)
		}
	}
	for i, tok := range gmGot[4]["data"].(map[string]any)["tokens"].([]any) {
		if tok.(map[string]any)["delta"] == nil {
			t.Errorf("GM's new scene token %d lost its delta", i)
		}
	}
}

func eventNames(got []map[string]any) []string {
	out := make([]string, len(got))
	for i, d := range got {
		out[i] = d["event"].(string)
	}
	return out
}

// TestVariantsAreSharedByWhatReadersReceive: readers are grouped by what
// they receive, not by who they are: two players who both may not see the
// goblin share one payload of the token change without its delta.
func TestVariantsAreSharedByWhatReadersReceive(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	showTavern(t, e)
	// Two users with the same levels, and Alice twice through distinct
	// requests (classes of their own).
	alice2 := *alice
	subs := []*events.Subscription{
		subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelScene}, User: alice}),
		subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelScene}, User: &alice2}),
		subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelScene}, User: bob}),
	}
	gmSub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelScene}, User: gm})
	update(t, e, goblinToken, world.Document{"x": 1000, "delta.system.attributes.hp.value": 1})

	var payloads [][]byte
	for _, sub := range subs {
		ev, _ := next(t, sub)
		payloads = append(payloads, ev.Data)
	}
	ev, _ := next(t, gmSub)
	for i := range payloads {
		if &payloads[i][0] != &payloads[0][0] {
			t.Fatalf("player %d got a payload of their own", i)
		}
	}
	if &ev.Data[0] == &payloads[0][0] {
		t.Fatal("the GM got the players' payload")
	}
	if strings.Contains(string(payloads[0]), "delta") || !strings.Contains(string(ev.Data), "delta") {
		t.Fatalf("players' payload %s, GM's %s", payloads[0], ev.Data)
	}
}
