package world

import (
	"fmt"
	"testing"
)

// bigActor builds an actor of about the size of the demo's wizard: a
// system of nested objects and forty items.
func bigActor() Document {
	system := map[string]any{}
	for i := range 12 {
		group := map[string]any{}
		for j := range 10 {
			group[fmt.Sprintf("field%02d", j)] = map[string]any{"value": float64(j), "max": float64(10 * j), "label": fmt.Sprintf("Field %d.%d", i, j)}
		}
		system[fmt.Sprintf("group%02d", i)] = group
	}
	system["attributes"] = map[string]any{"hp": map[string]any{"value": 10.0, "max": 20.0, "temp": nil}, "ac": map[string]any{"value": 12.0}}
	items := make([]any, 40)
	for i := range items {
		items[i] = map[string]any{"_id": fmt.Sprintf("item%012d", i), "name": fmt.Sprintf("Item %d", i), "type": "loot",
			"system": map[string]any{"description": map[string]any{"value": "<p>A thing of some length, described at some length.</p>"}, "quantity": 1.0, "weight": 0.5}}
	}
	return Document{"_id": "bigActor00000001", "name": "Big", "type": "character", "system": system, "items": items, "effects": []any{}, "flags": map[string]any{}}
}

// withHP returns a new version of an actor with another hit point value,
// sharing what it does not change, as an update makes it.
func withHP(doc Document, hp float64) Document {
	next := Document{}
	for k, v := range doc {
		next[k] = v
	}
	system := map[string]any{}
	for k, v := range doc["system"].(map[string]any) {
		system[k] = v
	}
	attrs := map[string]any{}
	for k, v := range system["attributes"].(map[string]any) {
		attrs[k] = v
	}
	hpObj := map[string]any{}
	for k, v := range attrs["hp"].(map[string]any) {
		hpObj[k] = v
	}
	hpObj["value"] = hp
	attrs["hp"], system["attributes"], next["system"] = hpObj, attrs, system
	return next
}

// BenchmarkEncodeFull serialises a big actor for its row and its readers
// with nothing known of it: every object written.
func BenchmarkEncodeFull(b *testing.B) {
	doc := bigActor()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := encodeFull(nil, typeActor, "Actor.bigActor00000001", doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeFullNextVersion serialises a new version of a big actor
// that differs in one value, as a commit does: its items come from the
// registry and its unchanged objects from the version before.
func BenchmarkEncodeFullNextVersion(b *testing.B) {
	const uuid = "Actor.bigActor00000001"
	var reg embeddedJSON
	doc := bigActor()
	_, _, fresh, err := encodeFull(&reg, typeActor, uuid, doc)
	if err != nil {
		b.Fatal(err)
	}
	reg.commit(nil, fresh)
	b.ReportAllocs()
	hp := 0.0
	for b.Loop() {
		hp++
		doc = withHP(doc, hp)
		if _, _, _, err := encodeFull(&reg, typeActor, uuid, doc); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeFullNextVersionMatches: a version serialised with the parts of
// the one before is byte for byte what serialising it from scratch gives.
func TestEncodeFullNextVersionMatches(t *testing.T) {
	const uuid = "Actor.bigActor00000001"
	var reg embeddedJSON
	doc := bigActor()
	if _, _, fresh, err := encodeFull(&reg, typeActor, uuid, doc); err != nil {
		t.Fatal(err)
	} else {
		reg.commit(nil, fresh)
	}
	for hp := range 3 {
		doc = withHP(doc, float64(hp))
		full, data, _, err := encodeFull(&reg, typeActor, uuid, doc)
		if err != nil {
			t.Fatal(err)
		}
		wantFull, wantData, _, err := encodeFull(nil, typeActor, uuid, doc)
		if err != nil {
			t.Fatal(err)
		}
		if string(full) != string(wantFull) || string(data) != string(wantData) {
			t.Fatalf("version %d differs from its serialisation from scratch", hp)
		}
	}
}
