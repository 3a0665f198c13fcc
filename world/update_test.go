package world

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestUpdateSemantics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		diff Document
		want Document // the actor's `system` afterwards
	}{
		{
			name: "dotted path",
			diff: Document{"system.attributes.hp.value": 5},
			want: Document{"attributes": Document{"hp": Document{"value": 5.0, "max": 10.0}}},
		},
		{
			name: "nested objects merge",
			diff: Document{"system": Document{"attributes": Document{"hp": Document{"temp": 3}}}},
			want: Document{"attributes": Document{"hp": Document{"value": 10.0, "max": 10.0, "temp": 3.0}}},
		},
		{
			name: "dotted keys inside objects",
			diff: Document{"system": Document{"attributes.hp.max": 12, "details.level": 2}},
			want: Document{"attributes": Document{"hp": Document{"value": 10.0, "max": 12.0}}, "details": Document{"level": 2.0}},
		},
		{
			name: "object and dotted key together",
			diff: Document{"system": Document{"currency": Document{"gp": 1}}, "system.currency.sp": 4},
			want: Document{"attributes": Document{"hp": Document{"value": 10.0, "max": 10.0}}, "currency": Document{"gp": 1.0, "sp": 4.0}},
		},
		{
			name: "deletion by dotted path",
			diff: Document{"system.attributes.hp.-=max": nil},
			want: Document{"attributes": Document{"hp": Document{"value": 10.0}}},
		},
		{
			name: "deletion inside an object",
			diff: Document{"system": Document{"attributes": Document{"hp": Document{"-=max": nil}}}},
			want: Document{"attributes": Document{"hp": Document{"value": 10.0}}},
		},
		{
			name: "forced replacement",
			diff: Document{"system.attributes.==hp": Document{"value": 1}},
			want: Document{"attributes": Document{"hp": Document{"value": 1.0}}},
		},
		{
			// On a type whose data the system does not check (the
			// fifth-edition rules check characters and NPCs).
			name: "a value replaces an object",
			diff: Document{"type": "vehicle", "system.attributes": "gone"},
			want: Document{"attributes": "gone"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tw := newTestWorld(t)
			got, err := tw.Update(context.Background(), nil, actorNone, tt.diff)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got["system"]); diff != "" {
				t.Errorf("system (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(got, mustGet(t, tw, actorNone)); diff != "" {
				t.Errorf("Update's result differs from Get (-update +get):\n%s", diff)
			}
		})
	}
}

func TestUpdateTopLevelDeletionAndStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	before := mustGet(t, tw, actorOwner)
	later := testEpoch.Add(time.Hour)
	tw.clock = func() time.Time { return later }

	got, err := tw.Update(ctx, nil, actorOwner, Document{"-=flags": nil, "name": "Hero II", "uuid": actorOwner})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["flags"]; ok {
		t.Error("flags not deleted")
	}
	if got["name"] != "Hero II" {
		t.Errorf("name = %v", got["name"])
	}
	stats := got["_stats"].(Document)
	if stats["createdTime"] != float64(testEpoch.UnixMilli()) || stats["modifiedTime"] != float64(later.UnixMilli()) {
		t.Errorf("_stats = %v", stats)
	}
	// The embedded items did not change, so they keep their stamps.
	items := got["items"].([]any)
	if diff := cmp.Diff(before["items"], items); diff != "" {
		t.Errorf("items changed (-before +after):\n%s", diff)
	}
	// Updating an item stamps the item only.
	later2 := later.Add(time.Hour)
	tw.clock = func() time.Time { return later2 }
	sword, err := tw.Update(ctx, nil, swordUUID, Document{"system.quantity": 2})
	if err != nil {
		t.Fatal(err)
	}
	if num(t, sword, "_stats.modifiedTime") != float64(later2.UnixMilli()) {
		t.Errorf("sword _stats = %v", sword["_stats"])
	}
	if num(t, mustGet(t, tw, actorOwner), "_stats.modifiedTime") != float64(later.UnixMilli()) {
		t.Error("updating an item stamped its actor")
	}
}

func TestUpdateValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		uuid string
		diff Document
		kind error
		msg  string
	}{
		{"missing uuid", "", Document{"name": "x"}, ErrInvalid, "'uuid' is required"},
		{"nil data", actorOwner, nil, ErrInvalid, "'data' must be an object"},
		{"malformed uuid", "Actor.short", Document{"name": "x"}, ErrInvalid, "Invalid uuid: Actor.short"},
		{"unknown collection", "Potato.ActorOwner000001", Document{}, ErrInvalid, "Invalid uuid: Potato.ActorOwner000001"},
		{"wrong embedded type", "Actor.ActorOwner000001.Token.ItemSword0000001", Document{}, ErrInvalid, "Invalid uuid: Actor.ActorOwner000001.Token.ItemSword0000001"},
		{"unknown document", "Actor.Unknown000000001", Document{"name": "x"}, ErrNotFound, "Entity not found: Actor.Unknown000000001"},
		{"unknown embedded document", actorOwner + ".Item.Unknown000000001", Document{"name": "x"}, ErrNotFound, "Entity not found: " + actorOwner + ".Item.Unknown000000001"},
		{"empty name", actorOwner, Document{"name": ""}, ErrInvalid, "'name' must be a non-empty string"},
		{"name not a string", actorOwner, Document{"name": 3}, ErrInvalid, "'name' must be a non-empty string"},
		{"name deleted", actorOwner, Document{"-=name": nil}, ErrInvalid, "'name' must be a non-empty string"},
		{"id changed", actorOwner, Document{"_id": "ActorOther000001"}, ErrInvalid, "'_id' cannot be changed"},
		{"id deleted", actorOwner, Document{"-=_id": nil}, ErrInvalid, "'_id' cannot be changed"},
		{"uuid changed", actorOwner, Document{"uuid": "Actor.ActorOther000001"}, ErrInvalid, "'uuid' cannot be changed: it is the document's address"},
		{"uuid deleted", actorOwner, Document{"-=uuid": nil}, ErrInvalid, "'uuid' cannot be changed: it is the document's address"},
		{"uuid nested", actorOwner, Document{"uuid.x": 1}, ErrInvalid, "'uuid' cannot be changed: it is the document's address"},
		{"stats", actorOwner, Document{"_stats.createdTime": 1}, ErrInvalid, "'_stats' is kept by the world and cannot be changed"},
		{"items replaced", actorOwner, Document{"items": []any{}}, ErrInvalid, "'items' holds embedded documents and cannot be changed through its parent; update them through their own uuids"},
		{"effects deleted", actorOwner, Document{"-=effects": nil}, ErrInvalid, "'effects' holds embedded documents and cannot be changed through its parent; update them through their own uuids"},
		{"tokens by path", sceneUUID, Document{"tokens.0.x": 1}, ErrInvalid, "'tokens' holds embedded documents and cannot be changed through its parent; update them through their own uuids"},
		{"combatants", combatUUID, Document{"==combatants": []any{}}, ErrInvalid, "'combatants' holds embedded documents and cannot be changed through its parent; update them through their own uuids"},
		{"deletion inside a path", actorOwner, Document{"-=system.attributes": nil}, ErrInvalid, "Invalid key in 'data': -=system.attributes"},
		{"empty path step", actorOwner, Document{"system..x": 1}, ErrInvalid, "Invalid key in 'data': system..x"},
		{"not JSON", actorOwner, Document{"x": func() {}}, ErrInvalid, ""},
		{"user role", "User." + aliceID, Document{"role": 9}, ErrInvalid, "'role' must be a role number from 0 to 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tw := newTestWorld(t)
			before := mustGet(t, tw, actorOwner)
			_, err := tw.Update(context.Background(), nil, tt.uuid, tt.diff)
			wantError(t, err, tt.kind, tt.msg)
			if diff := cmp.Diff(before, mustGet(t, tw, actorOwner)); diff != "" {
				t.Errorf("a failed update changed the actor:\n%s", diff)
			}
			if n := len(tw.log.all()); n != 0 {
				t.Errorf("a failed update committed %d times", n)
			}
		})
	}
}

func TestUpdateKeepsSameIDAndIgnoresNoOps(t *testing.T) {
	t.Parallel()
	tw := newTestWorld(t)
	if _, err := tw.Update(context.Background(), nil, actorOwner, Document{"_id": "ActorOwner000001", "name": "Hero"}); err != nil {
		t.Fatal(err)
	}
	if n := len(tw.log.all()); n != 0 {
		t.Errorf("an update that changes nothing committed %d times", n)
	}
}

func TestExpandAndMerge(t *testing.T) {
	t.Parallel()
	target := Document{"a": Document{"b": 1.0, "c": 2.0}, "d": 3.0, "e": Document{"f": 1.0}}
	diff, err := expand(Document{"a.b": 5.0, "-=d": nil, "g": Document{"-=x": nil, "y": 1.0}, "==e": Document{"z": 1.0}})
	if err != nil {
		t.Fatal(err)
	}
	merge(target, diff)
	want := Document{"a": Document{"b": 5.0, "c": 2.0}, "e": Document{"z": 1.0}, "g": Document{"y": 1.0}}
	if d := cmp.Diff(want, target); d != "" {
		t.Errorf("merge (-want +got):\n%s", d)
	}
}
