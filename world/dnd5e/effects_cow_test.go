package dnd5e

import (
	"reflect"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

// TestApplyEffectsLeavesTheStoredDocument checks that applying effect
// changes never writes into the stored document it reads (the world shares
// it with every reader), and that parts no change touches stay shared.
func TestApplyEffectsLeavesTheStoredDocument(t *testing.T) {
	doc := world.Document{
		"system": map[string]any{
			"attributes": map[string]any{"ac": map[string]any{"bonus": "1"}, "hp": map[string]any{"max": 20.0}},
			"abilities":  map[string]any{"str": map[string]any{"value": 14.0}},
		},
		"effects": []any{map[string]any{"changes": []any{
			map[string]any{"key": "system.attributes.ac.bonus", "mode": 2.0, "value": "2"},
			map[string]any{"key": "system.attributes.hp.max", "mode": 2.0, "value": "5"},
			map[string]any{"key": "system.bonuses.mwak.attack", "mode": 5.0, "value": "+1"},
		}}},
	}
	before := world.Clone(doc)
	out, _ := applyEffects(doc, nil)
	if !reflect.DeepEqual(doc, before) {
		t.Fatalf("applyEffects changed the stored document:\n%v\nwant\n%v", doc, before)
	}
	attrs := out["attributes"].(map[string]any)
	if got := attrs["ac"].(map[string]any)["bonus"]; got != "1 + 2" {
		t.Errorf("ac bonus %q, want \"1 + 2\"", got)
	}
	if got := attrs["hp"].(map[string]any)["max"]; got != 25.0 {
		t.Errorf("hp max %v, want 25", got)
	}
	if got := out["bonuses"].(map[string]any)["mwak"].(map[string]any)["attack"]; got != "+1" {
		t.Errorf("new bonus %v, want +1", got)
	}
	stored := doc["system"].(map[string]any)["abilities"]
	if reflect.ValueOf(out["abilities"]).UnsafePointer() != reflect.ValueOf(stored).UnsafePointer() {
		t.Error("an untouched part was copied instead of shared")
	}
}
