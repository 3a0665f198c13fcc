package world

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSystemNumbers: the fifth-edition data model (its NumberFields) on
// every write of a character's or NPC's system data: numeric strings are
// converted, integers round, hit points stop at 0, and anything else is
// refused with ErrInvalid naming the field, changing nothing.
func TestSystemNumbers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)

	for _, tt := range []struct {
		diff Document
		path string
		want any
	}{
		{Document{"system.attributes.hp.value": "7"}, "system.attributes.hp.value", 7.0},
		{Document{"system.attributes.hp.value": " 8 "}, "system.attributes.hp.value", 8.0},
		{Document{"system.attributes.hp.value": 6.5}, "system.attributes.hp.value", 7.0},
		{Document{"system.attributes.hp.value": -4}, "system.attributes.hp.value", 0.0},
		{Document{"system": Document{"attributes": Document{"hp": Document{"value": "9"}}}}, "system.attributes.hp.value", 9.0},
		{Document{"system.abilities.str.value": "15.4"}, "system.abilities.str.value", 15.0},
		{Document{"system.abilities": Document{"dex": Document{"value": 13}}}, "system.abilities.dex.value", 13.0},
		{Document{"system.attributes.hp.max": nil}, "system.attributes.hp.max", nil},
		{Document{"system.currency.gp": "12"}, "system.currency.gp", 12.0},
		{Document{"system.skills.ste.value": 0.5}, "system.skills.ste.value", 0.5},
		{Document{"system.attributes.exhaustion": "2"}, "system.attributes.exhaustion", 2.0},
		// Fields the system does not make numbers are left alone.
		{Document{"system.details.biography.value": "12"}, "system.details.biography.value", "12"},
	} {
		got, err := tw.Update(ctx, nil, actorOwner, tt.diff)
		if err != nil {
			t.Fatalf("%v: %v", tt.diff, err)
		}
		if v := propertyOr(got, tt.path); v != tt.want {
			t.Errorf("%v: %s = %#v, want %#v", tt.diff, tt.path, v, tt.want)
		}
	}

	before := mustGet(t, tw, actorOwner)
	for _, tt := range []struct {
		diff Document
		msg  string
	}{
		{Document{"system.attributes.hp.value": "abc"}, `system.attributes.hp.value must be an integer, got "abc"`},
		{Document{"system.attributes.hp.value": true}, "system.attributes.hp.value must be an integer, got true"},
		{Document{"system.attributes.hp.value": nil}, "system.attributes.hp.value must be an integer, got null"},
		{Document{"system.attributes.hp.value": Document{"a": 1}}, "system.attributes.hp.value must be an integer, got an object"},
		{Document{"system.attributes.hp.value": []any{1.0}}, "system.attributes.hp.value must be an integer, got an array"},
		{Document{"system.abilities.str.value": "strong"}, `system.abilities.str.value must be an integer, got "strong"`},
		{Document{"system": Document{"abilities": Document{"con": Document{"value": "x"}}}}, `system.abilities.con.value must be an integer, got "x"`},
		{Document{"system.skills.ste.value": "expert"}, `system.skills.ste.value must be a number, got "expert"`},
		{Document{"system.attributes.hp": 5}, "system.attributes.hp must be an object, got 5"},
		{Document{"system": "none"}, `system must be an object, got "none"`},
		{Document{"system.attributes.hp.-=value": nil}, "system.attributes.hp.value cannot be deleted"},
		{Document{"system.attributes.-=hp": nil}, "system.attributes.hp cannot be deleted"},
		{Document{"system.attributes.==hp": Document{"value": "lots"}}, `system.attributes.hp.value must be an integer, got "lots"`},
	} {
		_, err := tw.Update(ctx, nil, actorOwner, tt.diff)
		wantError(t, err, ErrInvalid, tt.msg)
	}
	if diff := cmp.Diff(before, mustGet(t, tw, actorOwner)); diff != "" {
		t.Fatalf("a refused write changed the actor (-before +after):\n%s", diff)
	}

	// The bug this closes: text in hp.value made /increase fail forever.
	// Numeric text is a number now, and other text never gets in.
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"system.attributes.hp.value": "5"}); err != nil {
		t.Fatal(err)
	}
	if res, err := tw.ModifyAttribute(ctx, nil, actorOwner, "system.attributes.hp.value", 3); err != nil || res.NewValue != 8 {
		t.Fatalf("increase after a numeric string: %+v %v", res, err)
	}

	// Creating: an actor's data is cleaned and checked the same way.
	created, err := tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"name": "Fresh", "type": "npc",
		"system": Document{"attributes": Document{"hp": Document{"value": "4", "max": 4}}, "abilities": Document{"str": Document{"value": 12.6}}}}})
	if err != nil || propertyOr(created, "system.attributes.hp.value") != 4.0 || propertyOr(created, "system.abilities.str.value") != 13.0 {
		t.Fatalf("create: %v %v", created, err)
	}
	_, err = tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"name": "Broken", "type": "character",
		"system": Document{"attributes": Document{"hp": Document{"value": "many"}}}}})
	wantError(t, err, ErrInvalid, `system.attributes.hp.value must be an integer, got "many"`)

	// An unlinked token's own changes to its actor obey the same rules.
	_, err = tw.Update(ctx, nil, tokenGoblin, Document{"delta.system.attributes.hp.value": "lots"})
	wantError(t, err, ErrInvalid, `delta.system.attributes.hp.value must be an integer, got "lots"`)
	tok, err := tw.Update(ctx, nil, tokenGoblin, Document{"delta.system.attributes.hp.value": "-3"})
	if err != nil || propertyOr(tok, "delta.system.attributes.hp.value") != 0.0 {
		t.Fatalf("token delta: %v %v", propertyOr(tok, "delta"), err)
	}
	// Other actor types are the system's to check (a vehicle's hit points
	// may be null, for one); they are left as written.
	if _, err := tw.Update(ctx, nil, actorBob, Document{"type": "vehicle", "system.attributes.hp.value": nil}); err != nil {
		t.Fatal(err)
	}
}

// TestDeathSavesReset: SRD 5.1 "Death Saving Throws": both counters reset
// to zero when the creature regains any hit points, through every door
// that raises hit points from 0: an update, /increase, and a document put
// whole.
func TestDeathSavesReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	dying := Document{"system.attributes.hp.value": 0, "system.attributes.death.success": 2, "system.attributes.death.failure": 1}
	counters := func() (any, any) {
		doc := mustGet(t, tw, actorOwner)
		return propertyOr(doc, "system.attributes.death.success"), propertyOr(doc, "system.attributes.death.failure")
	}
	// Writes that leave the hit points at 0 keep the counters.
	if _, err := tw.Update(ctx, nil, actorOwner, dying); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.ModifyAttribute(ctx, nil, actorOwner, "system.attributes.hp.value", -2); err != nil {
		t.Fatal(err)
	}
	if s, f := counters(); s != 2.0 || f != 1.0 {
		t.Fatalf("at 0: %v %v", s, f)
	}
	// An update that heals.
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"system.attributes.hp.value": 3}); err != nil {
		t.Fatal(err)
	}
	if s, f := counters(); s != 0.0 || f != 0.0 {
		t.Fatalf("after an update: %v %v", s, f)
	}
	// /increase.
	if _, err := tw.Update(ctx, nil, actorOwner, dying); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.ModifyAttribute(ctx, nil, actorOwner, "system.attributes.hp.value", 1); err != nil {
		t.Fatal(err)
	}
	if s, f := counters(); s != 0.0 || f != 0.0 {
		t.Fatalf("after /increase: %v %v", s, f)
	}
	// A whole document put back with hit points (as a script or a ruleset
	// operation writes it).
	if _, err := tw.Update(ctx, nil, actorOwner, dying); err != nil {
		t.Fatal(err)
	}
	err := tw.Mutate(ctx, func(tx *Tx) error {
		doc, err := tx.Get(actorOwner)
		if err != nil {
			return err
		}
		doc["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"] = 2.0
		return tx.Put(actorOwner, doc)
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, f := counters(); s != 0.0 || f != 0.0 {
		t.Fatalf("after a put: %v %v", s, f)
	}
}

// TestGiveRules: give refuses more than the giver holds (nothing is made
// from nothing, as transfer-currency refuses more coins than there are),
// and a given item arrives unequipped and unattuned.
func TestGiveRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	before, after := mustGet(t, tw, actorOwner), mustGet(t, tw, actorBob)
	_, err := tw.Give(ctx, nil, GiveParams{FromUUID: actorOwner, ToUUID: actorBob, ItemUUID: potionUUID, Quantity: 4})
	wantError(t, err, ErrInvalid, "Insufficient quantity of Potion: the source has 3, cannot give 4")
	_, err = tw.Give(ctx, nil, GiveParams{FromUUID: actorOwner, ToUUID: actorBob, ItemName: "sword", Quantity: 2})
	wantError(t, err, ErrInvalid, "Insufficient quantity of Sword: the source has 1, cannot give 2")
	if cmp.Diff(before, mustGet(t, tw, actorOwner)) != "" || cmp.Diff(after, mustGet(t, tw, actorBob)) != "" {
		t.Fatal("a refused give changed an actor")
	}
	if _, err := tw.Update(ctx, nil, swordUUID, Document{"system.equipped": true, "system.attuned": true}); err != nil {
		t.Fatal(err)
	}
	res, err := tw.Give(ctx, nil, GiveParams{FromUUID: actorOwner, ToUUID: actorBob, ItemUUID: swordUUID})
	if err != nil {
		t.Fatal(err)
	}
	given := mustGet(t, tw, res.NewItemUUID)
	if propertyOr(given, "system.equipped") != false || propertyOr(given, "system.attuned") != false || propertyOr(given, "system.quantity") != 1.0 {
		t.Fatalf("given sword %v", given["system"])
	}
}
