package events

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

// TestJournalJSONReadsBackAsMarshal: an event's journal record, written by
// hand, reads back as the event json.Marshal wrote did, whichever optional
// fields it has and whatever its strings hold.
func TestJournalJSONReadsBackAsMarshal(t *testing.T) {
	t.Parallel()
	events := []*event{
		{Seq: 1, Channel: "hooks", Name: "updateActor", Access: access{Type: "Actor", Doc: world.Document{"_id": "a", "ownership": map[string]any{"default": 2.0}}},
			Full: json.RawMessage(`{"a":1}`), Format: eventFormat},
		{Seq: 18446744073709551615, Channel: "actor", Name: "na\"me\n<&>\u2028", Key: "Actor.x",
			Access: access{Type: "Actor"}, Full: json.RawMessage(`{"x":[1,2,{"y":null}]}`),
			Player: json.RawMessage(`{"x":[]}`), Limited: json.RawMessage(`{"name":"n"}`), GMOnly: true,
			Embeds: []embed{{Access: access{Type: "Actor", Doc: world.Document{"_id": "b"}}, Need: needPart,
				Strip: []strip{{Path: []string{"delta"}, Keys: []string{"system"}, Required: true}}}}},
		{Seq: 3, Channel: "combat", Name: "x"},
	}
	for i, ev := range events {
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ev.journalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var a, b event
		if err := json.Unmarshal(want, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &b); err != nil {
			t.Fatalf("event %d: %v in %s", i, err, got)
		}
		var ma, mb map[string]any
		_ = json.Unmarshal(want, &ma)
		_ = json.Unmarshal(got, &mb)
		if !reflect.DeepEqual(ma, mb) {
			t.Errorf("event %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
