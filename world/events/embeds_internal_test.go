package events

import (
	"encoding/json"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

var player = &world.User{ID: "player0000000001", Name: "Player", Role: world.RolePlayer}

// chatCreate is the change that creates a public chat message speaking for
// an actor the player owns.
func chatCreate() world.Change {
	return world.Change{Op: world.ChangeCreate, UUID: "ChatMessage.message000000001", DocumentName: "ChatMessage", After: world.Document{
		"_id": "message000000001", "author": player.ID, "whisper": []any{}, "content": "17",
		"speaker": map[string]any{"actor": "hero000000000001"},
	}}
}

// TestUnknownEmbeddedDocumentsAreNone: without the world's state (a world
// published without the journal), a document a change refers to cannot be
// judged, and the event reaches GMs only; with the state, it is judged.
func TestUnknownEmbeddedDocumentsAreNone(t *testing.T) {
	t.Parallel()
	evs := buildEvents([]world.Change{chatCreate()}, nil)
	if len(evs) != 1 || len(evs[0].Embeds) != 1 {
		t.Fatalf("events %+v, want one with its speaker", evs)
	}
	if data := evs[0].viewFor(player); data != nil {
		t.Fatalf("a player got %s of a message whose speaker is unknown", data)
	}
	if data := evs[0].viewFor(nil); data == nil {
		t.Fatal("GM-level readers get everything")
	}

	// The speaker changed in the same transaction is judged from it.
	hero := world.Change{Op: world.ChangeCreate, UUID: "Actor.hero000000000001", DocumentName: "Actor", After: world.Document{
		"_id": "hero000000000001", "name": "Hero", "ownership": map[string]any{"default": 0.0, player.ID: 3.0},
	}}
	evs = buildEvents([]world.Change{hero, chatCreate()}, nil)
	last := evs[len(evs)-1]
	if data := last.viewFor(player); data == nil {
		t.Fatal("the owner of the speaker got nothing")
	}
}

// TestOldJournalEventsThatMayEmbedReachGMsOnly: events written by a hub
// that did not record embedded documents are withheld from non-GMs when
// their kind may carry some, and kept as they were otherwise.
func TestOldJournalEventsThatMayEmbedReachGMsOnly(t *testing.T) {
	t.Parallel()
	public := `"acc":{"type":"ChatMessage","doc":{"_id":"m","author":"x","whisper":[]}},"full":{"uuid":"ChatMessage.m"},"limited":{"uuid":"ChatMessage.m"}`
	actor := `"acc":{"type":"Actor","doc":{"_id":"a","ownership":{"default":2}}},"full":{"uuid":"Actor.a"}`
	cases := []struct {
		record string
		shown  bool
	}{
		{`{"seq":1,"ch":"hooks","name":"createChatMessage",` + public + `}`, false},
		{`{"seq":2,"ch":"hooks","name":"createChatMessage","v":2,` + public + `}`, true},
		{`{"seq":3,"ch":"hooks","name":"updateActor",` + actor + `}`, true},
		{`{"seq":4,"ch":"scene","name":"scene-token-update",` + actor + `}`, false},
		{`{"seq":5,"ch":"hooks","name":"createScene",` + actor + `}`, false},
	}
	for _, c := range cases {
		ev := &event{}
		if err := json.Unmarshal([]byte(c.record), ev); err != nil {
			t.Fatal(err)
		}
		ev.loaded()
		if data := ev.viewFor(player); (data != nil) != c.shown {
			t.Errorf("%s: shown to a player %v, want %v", ev.Name, data != nil, c.shown)
		}
		if data := ev.viewFor(nil); data == nil {
			t.Errorf("%s: not shown to GMs", ev.Name)
		}
	}
}

// TestUnknownNeedsShowNothing: an embed whose need this hub does not know
// (written by a newer relay) withholds the event from non-GMs.
func TestUnknownNeedsShowNothing(t *testing.T) {
	t.Parallel()
	ev := &event{Access: access{Type: "Actor", Doc: world.Document{"ownership": map[string]any{"default": 3.0}}}, Full: json.RawMessage(`{}`),
		Embeds: []embed{{Access: access{Type: "Actor", Doc: world.Document{"ownership": map[string]any{"default": 3.0}}}, Need: "future"}}}
	if data := ev.viewFor(player); data != nil {
		t.Fatalf("an unknown need let %s through", data)
	}
}
