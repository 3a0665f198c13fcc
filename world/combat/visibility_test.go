package combat_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/combat"
)

// TestHiddenCombatantsThroughEveryDoor: a hidden combatant is, for a
// non-GM who does not own its actor, not there: not in the list, not in a
// read of the combat, not readable by uuid, not removable ("No combatant
// found", as for a token that never was in the encounter), and adding its
// token again reports the permission refusal rather than its presence.
func TestHiddenCombatantsThroughEveryDoor(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, token := range []string{ariaToken, goblinToken} {
		if _, err := f.eng.Update(ctx, nil, token, world.Document{"hidden": true}); err != nil {
			t.Fatal(err)
		}
	}
	m := combat.New(nil)
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{ariaToken, bromToken, goblinToken}})
	if err != nil {
		t.Fatal(err)
	}
	combatUUID := "Combat." + e.ID
	alice, bob := f.user(t, "Alice"), f.user(t, "Bob")
	idOf := map[string]string{}
	for _, c := range e.Combatants {
		idOf[c.Name] = c.ID
	}

	for _, tt := range []struct {
		user *world.User
		want []string
	}{{nil, []string{"Aria Vale", "Brom Ironfist", "Goblin"}}, {alice, []string{"Aria Vale", "Brom Ironfist"}}, {bob, []string{"Brom Ironfist"}}} {
		doc, err := f.eng.Get(ctx, tt.user, combatUUID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range doc["combatants"].([]any) {
			got = append(got, c.(map[string]any)["name"].(string))
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%v reads combatants %v, want %v", tt.user, got, tt.want)
		}
		raw, err := f.eng.GetJSON(ctx, tt.user, combatUUID)
		if err != nil || strings.Contains(string(raw), "Goblin") != (tt.user == nil) {
			t.Errorf("%v: GetJSON shows the goblin: %v (%v)", tt.user, strings.Contains(string(raw), "Goblin"), err)
		}
	}
	goblinCombatant := combatUUID + ".Combatant." + idOf["Goblin"]
	if _, err := f.eng.Get(ctx, alice, goblinCombatant); !errors.Is(err, world.ErrPermission) {
		t.Errorf("Alice reads the hidden goblin combatant: %v", err)
	}
	if _, err := f.eng.Get(ctx, alice, combatUUID+".Combatant."+idOf["Aria Vale"]); err != nil {
		t.Errorf("Alice cannot read her own hidden combatant: %v", err)
	}

	res, err := m.Remove(ctx, f.eng, alice, combat.MembersParams{UUIDs: []string{goblinActor, goblinToken, goblinCombatant}})
	if err != nil {
		t.Fatal(err)
	}
	for _, fl := range res.Failed {
		if fl.Reason != "No combatant found for this entity" {
			t.Errorf("removing the hidden goblin as Alice: %+v", fl)
		}
	}
	if len(res.Done) != 0 || len(res.Failed) != 3 {
		t.Errorf("remove as Alice: %+v", res)
	}
	res, err = m.Add(ctx, f.eng, alice, combat.MembersParams{UUIDs: []string{goblinToken}})
	if err != nil || len(res.Failed) != 1 || !strings.Contains(res.Failed[0].Reason, "does not have permission to add to encounter 'Actor.goblin0000000001'") {
		t.Errorf("adding the hidden goblin again as Alice: %+v %v", res, err)
	}
	res, err = m.Add(ctx, f.eng, nil, combat.MembersParams{UUIDs: []string{goblinToken}})
	if err != nil || len(res.Failed) != 1 || res.Failed[0].Reason != "Already in the encounter" {
		t.Errorf("adding the goblin again as the GM: %+v %v", res, err)
	}
}

// TestEncountersFollowTheCombatsReadLevel: a combat with an ownership of
// its own follows it, for the list and for changes of its combatants.
func TestEncountersFollowTheCombatsReadLevel(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(nil)
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{Name: "Secret ambush", TokenUUIDs: []string{bromToken, goblinToken}})
	if err != nil {
		t.Fatal(err)
	}
	combatUUID := "Combat." + e.ID
	alice := f.user(t, "Alice")
	set := func(level int) {
		t.Helper()
		if _, err := f.eng.Update(ctx, nil, combatUUID, world.Document{"ownership": world.Document{"default": level}}); err != nil {
			t.Fatal(err)
		}
	}

	set(0)
	if list, _ := m.List(ctx, f.eng, alice); len(list) != 0 {
		t.Fatalf("Alice lists a combat she cannot see: %+v", list)
	}
	_, err = m.Add(ctx, f.eng, alice, combat.MembersParams{UUIDs: []string{ariaActor}})
	if !errors.Is(err, world.ErrNotFound) || err.Error() != "No active encounter" {
		t.Fatalf("adding to an invisible active encounter: %v", err)
	}
	_, err = m.Add(ctx, f.eng, alice, combat.MembersParams{EncounterID: e.ID, UUIDs: []string{ariaActor}})
	if !errors.Is(err, world.ErrPermission) || strings.Contains(err.Error(), "Secret") {
		t.Fatalf("adding to an invisible encounter by id: %v", err)
	}

	set(1)
	list, _ := m.List(ctx, f.eng, alice)
	if len(list) != 1 || list[0].Name != "Secret ambush" || len(list[0].Combatants) != 0 || list[0].Round != 0 {
		t.Fatalf("Alice lists a LIMITED combat as %+v", list)
	}
	_, err = m.Remove(ctx, f.eng, alice, combat.MembersParams{EncounterID: e.ID, UUIDs: []string{bromActor}})
	if !errors.Is(err, world.ErrPermission) || !strings.Contains(err.Error(), "view encounter 'Secret ambush'") {
		t.Fatalf("removing from a LIMITED encounter: %v", err)
	}

	set(2)
	if list, _ := m.List(ctx, f.eng, alice); len(list) != 1 || len(list[0].Combatants) != 2 {
		t.Fatalf("Alice lists an observed combat as %+v", list)
	}
	res, err := m.Add(ctx, f.eng, alice, combat.MembersParams{UUIDs: []string{ariaActor}})
	if err != nil || len(res.Done) != 1 {
		t.Fatalf("adding her own actor to an observed encounter: %+v %v", res, err)
	}
}
