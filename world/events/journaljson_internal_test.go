package events

import (
	"encoding/json"
	"fmt"
	"maps"
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

// BenchmarkJournalJSON writes an update event's journal record.
func BenchmarkJournalJSON(b *testing.B) {
	ev := &event{Seq: 12345, Channel: "hooks", Name: "updateActor", Key: "Actor.ariaVale00000001",
		Access: access{Type: "Actor", Doc: world.Document{"_id": "ariaVale00000001", "ownership": map[string]any{"default": 0.0, "alice": 3.0}}},
		Full:   json.RawMessage(`{"_id":"ariaVale00000001","system":{"attributes":{"hp":{"value":7}}},"uuid":"Actor.ariaVale00000001"}`),
		Format: eventFormat}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ev.journalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiff diffs two versions of a big document that share all but
// the path an update changed, as an update event's payload is made.
func BenchmarkDiff(b *testing.B) {
	system := map[string]any{}
	for i := range 50 {
		system[fmt.Sprint("k", i)] = map[string]any{"a": float64(i), "b": []any{"x", "y"}, "c": map[string]any{"d": "e"}}
	}
	hp := map[string]any{"value": 5.0, "max": 10.0}
	system["attributes"] = map[string]any{"hp": hp, "ac": 12.0}
	before := map[string]any{"name": "n", "system": system}
	system2 := maps.Clone(system)
	attrs2 := maps.Clone(system["attributes"].(map[string]any))
	attrs2["hp"] = map[string]any{"value": 6.0, "max": 10.0}
	system2["attributes"] = attrs2
	after := map[string]any{"name": "n", "system": system2}
	b.ReportAllocs()
	for b.Loop() {
		if d := diff(before, after, nil); len(d) != 1 {
			b.Fatalf("diff: %v", d)
		}
	}
}
