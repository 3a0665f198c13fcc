package link_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/world"
)

// TestLinkedDnd5e: a linked world of the dnd5e system offers the
// fifth-edition operations, sends each as the module's request type with
// its parameters (createChatMessage always explicit, `spellSlots` asked as
// `spells`), converts the module's replies (a roll's mode from its
// formula, a death save's outcome from the counters), and refuses first,
// with nothing sent, what the module would let through: coins changed by
// a user without OWNER or below 0 (reference §9.8).
func TestLinkedDnd5e(t *testing.T) {
	items := []any{
		map[string]any{"_id": "w1", "name": "Dagger", "type": "weapon", "system": map[string]any{}},
		map[string]any{"_id": "c1", "name": "Bag", "type": "container", "system": map[string]any{}, "uuid": "Actor.a1.Item.c1"},
		map[string]any{"_id": "s1", "name": "Shield", "type": "spell", "system": map[string]any{}},
	}
	actor := map[string]any{"_id": "a1", "name": "Hero", "type": "character", "ownership": map[string]any{"default": 0, "alice00000000001": 2}, "items": items,
		"system": map[string]any{"currency": map[string]any{"gp": 10, "sp": 3}, "attributes": map[string]any{"hp": map[string]any{"value": 0}}}}
	rec := &recorder{replies: map[string]map[string]any{
		"entity":            {"uuid": "Actor.a1", "data": actor},
		"skill-check":       {"data": map[string]any{"actorUuid": "Actor.a1", "skill": "ath", "total": 17, "formula": "2d20kh + 4", "result": "13 + 4"}},
		"get-actor-details": {"data": map[string]any{"uuid": "Actor.a1", "spells": []any{}, "spellSlots": map[string]any{"spell1": map[string]any{"value": 1, "max": 2}}}},
		"death-save":        {"data": map[string]any{"actorUuid": "Actor.a1", "total": 20, "formula": "1d20", "result": "20", "deathSaves": map[string]any{"success": 0, "failure": 0}}},
		"modify-currency":   {"data": map[string]any{"currency": "gp", "previous": 10, "current": 7, "delta": -3}},
		"use-item": {"data": map[string]any{"uuid": "Actor.a1", "ability": "Dagger",
			"roll": map[string]any{"total": 15, "formula": "1d20 + 5", "isCritical": false, "isFumble": false,
				"dice": []any{map[string]any{"faces": 20, "results": []any{map[string]any{"result": 10, "active": true}}}}},
			"damageRolls": []any{map[string]any{"total": 6, "formula": "1d4[piercing] + 3", "type": "piercing", "isCritical": false,
				"dice": []any{map[string]any{"faces": 4, "results": []any{map[string]any{"result": 3}}}}}}}},
	}}
	_, lw, _ := linkedWorld(t, rec)
	rules, err := world.Capability[world.Dnd5e](lw.Resolved(), "dnd5e/skill-check")
	if err != nil {
		t.Fatalf("a dnd5e linked world offers no ruleset: %v", err)
	}
	alice := &world.User{ID: "alice00000000001", Name: "Alice", Role: world.RolePlayer}
	ctx := world.WithCaller(context.Background(), &world.Caller{Scopes: []string{"dnd5e"}})

	roll, err := rules.SkillCheck(ctx, alice, world.CheckParams{ActorUUID: "Actor.a1", Skill: "ath", Advantage: true})
	if err != nil || roll.Total != 17 || roll.Mode.Mode != "advantage" || !reflect.DeepEqual(roll.Mode.Advantage, []string{"requested"}) {
		t.Fatalf("skill check: %+v, %v", roll, err)
	}
	if got := rec.last(); got["type"] != "skill-check" || got["userId"] != alice.ID || got["createChatMessage"] != false ||
		got["advantage"] != true || !reflect.DeepEqual(got["_scopes"], []any{"dnd5e"}) {
		t.Fatalf("skill-check request %v", got)
	}

	d, err := rules.ActorDetails(ctx, nil, "Actor.a1", []string{"spellSlots"})
	if err != nil || d.SpellSlots["spell1"] == nil || d.Spells == nil {
		t.Fatalf("details: %+v, %v", d, err)
	}
	if got := rec.last(); !reflect.DeepEqual(got["details"], []any{"spells"}) {
		t.Fatalf("get-actor-details request %v", got)
	}

	// The module's `items` detail misses containers (reference §9.9):
	// they are added from the actor, in its order, as source objects.
	rec.mu.Lock()
	rec.replies["get-actor-details"] = map[string]any{"data": map[string]any{"uuid": "Actor.a1", "items": []any{items[0]}}}
	rec.replies["prepare-spell"] = map[string]any{"data": map[string]any{"spellName": "Shield", "prepared": true, "uuid": "Actor.a1.Item.s1"}}
	rec.replies["update"] = map[string]any{"uuid": "Actor.a1.Item.s1", "entity": []any{items[2]}}
	rec.mu.Unlock()
	d, err = rules.ActorDetails(ctx, nil, "Actor.a1", []string{"items"})
	if err != nil || len(d.Items) != 2 || d.Items[0].(map[string]any)["_id"] != "w1" || d.Items[1].(map[string]any)["_id"] != "c1" ||
		d.Items[1].(map[string]any)["uuid"] != nil {
		t.Fatalf("items: %+v, %v", d.Items, err)
	}
	// On dnd5e 5 the relay also writes the field the system reads.
	if p, err := rules.PrepareSpell(ctx, nil, "Actor.a1", "shield", true); err != nil || p.SpellUUID != "Actor.a1.Item.s1" || !p.Prepared {
		t.Fatalf("prepare: %+v, %v", p, err)
	}
	if got := rec.last(); got["type"] != "update" || got["uuid"] != "Actor.a1.Item.s1" || !reflect.DeepEqual(got["data"], map[string]any{"system.prepared": 1.0}) {
		t.Fatalf("after prepare-spell %v", got)
	}

	// A rest result as the system serialises it: rolls are the
	// tabletop's own objects, and an actor that does not rest gets
	// `{completed: true}`.
	rec.mu.Lock()
	rec.replies["short-rest"] = map[string]any{"data": map[string]any{"actorUuid": "Actor.a1", "result": map[string]any{
		"type": "short", "deltas": map[string]any{"hitPoints": 5, "hitDice": -1}, "newDay": false, "dhd": -1, "dhp": 5, "longRest": false,
		"rolls": []any{map[string]any{"class": "Roll", "formula": "1d8 + 2", "total": 5, "evaluated": true,
			"terms": []any{map[string]any{"class": "Die", "faces": 8}}, "dice": []any{}, "options": map[string]any{}}}}}}
	rec.replies["long-rest"] = map[string]any{"data": map[string]any{"actorUuid": "Actor.a1", "result": map[string]any{"completed": true}}}
	rec.mu.Unlock()
	rest, err := rules.ShortRest(ctx, nil, world.RestParams{Actor: world.ActorRef{UUID: "Actor.a1"}})
	if err != nil || rest.Type != "short" || rest.DHP != 5 || rest.DHD != -1 || len(rest.Rolls) != 1 || rest.Rolls[0].Formula != "1d8 + 2" || rest.Rolls[0].Total != 5 {
		t.Fatalf("short rest: %+v, %v", rest, err)
	}
	if rest, err := rules.LongRest(ctx, nil, world.RestParams{Actor: world.ActorRef{UUID: "Actor.a1"}}); err != nil || rest.Type != "long" || !rest.LongRest ||
		rest.UpdateData == nil || rest.Rolls == nil {
		t.Fatalf("long rest of a vehicle: %+v, %v", rest, err)
	}
	if got := rec.last(); got["newDay"] != true {
		t.Fatalf("long-rest request %v", got)
	}

	ds, err := rules.DeathSave(ctx, nil, world.DeathSaveParams{ActorUUID: "Actor.a1", ChatMessage: true})
	if err != nil || !ds.Success || !ds.Stable || ds.Dead {
		t.Fatalf("death save: %+v, %v", ds, err)
	}
	if got := rec.last(); got["createChatMessage"] != true {
		t.Fatalf("death-save request %v", got)
	}

	use, err := rules.Use(ctx, nil, world.UseParams{Kind: world.UseItem, ActorUUID: "Actor.a1", Ability: world.ItemRef{Name: "Dagger"}})
	if err != nil || use.Attack == nil || use.Attack.Result.Result != "10 + 5" || len(use.Damage) != 1 || use.Damage[0].Result.Result != "3 + 3" ||
		use.Damage[0].Type != "piercing" || use.Damage[0].Dice[0].Total != 3 {
		t.Fatalf("use: %+v, %v", use, err)
	}
	if _, err := rules.Use(ctx, nil, world.UseParams{Kind: world.UseSpell, ActorUUID: "Actor.a1", Ability: world.ItemRef{Name: "Fireball"}, SlotLevel: 4}); !errors.Is(err, world.ErrUnimplemented) {
		t.Fatalf("use with a slot level: %v", err)
	}
	// The module would use any item by uuid, another actor's too: the
	// relay requires one of the actor's items, of the use's kind.
	sent := len(rec.since(0))
	if _, err := rules.Use(ctx, alice, world.UseParams{Kind: world.UseItem, ActorUUID: "Actor.a1", Ability: world.ItemRef{UUID: "Actor.b2.Item.w9"}}); !errors.Is(err, world.ErrPermission) {
		t.Fatalf("use on an actor Alice observes: %v", err)
	}
	if _, err := rules.Use(ctx, nil, world.UseParams{Kind: world.UseItem, ActorUUID: "Actor.a1", Ability: world.ItemRef{UUID: "Actor.b2.Item.w9"}}); !errors.Is(err, world.ErrInvalid) ||
		err.Error() != "Item Actor.b2.Item.w9 does not belong to actor Hero" {
		t.Fatalf("use of another actor's item: %v", err)
	}
	if _, err := rules.Use(ctx, nil, world.UseParams{Kind: world.UseSpell, ActorUUID: "Actor.a1", Ability: world.ItemRef{UUID: "Actor.a1.Item.w1"}}); !errors.Is(err, world.ErrInvalid) ||
		err.Error() != "'Dagger' (weapon) is not a spell" {
		t.Fatalf("a weapon cast as a spell: %v", err)
	}
	if _, err := rules.Use(ctx, nil, world.UseParams{Kind: world.UseFeature, ActorUUID: "Actor.a1", Ability: world.ItemRef{Name: "dagger"}}); !errors.Is(err, world.ErrNotFound) ||
		err.Error() != "Ability not found on actor Hero: dagger" {
		t.Fatalf("a weapon used as a feature: %v", err)
	}
	for _, r := range rec.since(sent) {
		if r["type"] != "entity" {
			t.Fatalf("a refused use was sent: %v", r)
		}
	}

	// Coins: the relay's checks come first; only a change they allow is
	// sent, and the balance is the one read with the new amount.
	bob := &world.User{ID: "bob0000000000001", Name: "Bob", Role: world.RolePlayer}
	sent = len(rec.since(0))
	if _, err := rules.ModifyCurrency(ctx, bob, "Actor.a1", "gp", 1); !errors.Is(err, world.ErrPermission) ||
		err.Error() != "User 'Bob' does not have permission to modify currency on 'Actor.a1'" {
		t.Fatalf("coins of an actor Bob cannot see: %v", err)
	}
	if _, err := rules.ModifyCurrency(ctx, alice, "Actor.a1", "gp", 1); !errors.Is(err, world.ErrPermission) ||
		err.Error() != "User 'Alice' does not have permission to modify currency on 'Hero'" {
		t.Fatalf("coins of an actor Alice observes: %v", err)
	}
	if _, err := rules.ModifyCurrency(ctx, nil, "Actor.a1", "gp", -11); !errors.Is(err, world.ErrFailedPrecondition) ||
		err.Error() != "Insufficient gp: Hero has 10, needs 11" {
		t.Fatalf("too many coins: %v", err)
	}
	for _, r := range rec.since(sent) {
		if r["type"] != "entity" {
			t.Fatalf("a refused change was sent: %v", r)
		}
	}
	ch, err := rules.ModifyCurrency(ctx, nil, "Actor.a1", "gp", -3)
	if err != nil || ch.OldAmount != 10 || ch.NewAmount != 7 || ch.Balance["gp"] != 7 || ch.Balance["sp"] != 3 || ch.Balance["pp"] != 0 {
		t.Fatalf("coins: %+v, %v", ch, err)
	}
	// The module's refusals name the actor to anyone; the relay gives a
	// user who cannot see it its uuid, as an embedded world does.
	rec.mu.Lock()
	rec.replies["death-save"] = map[string]any{"error": "User 'Bob' does not have permission to roll death saves for 'Hero'"}
	rec.mu.Unlock()
	if _, err := rules.DeathSave(ctx, bob, world.DeathSaveParams{ActorUUID: "Actor.a1"}); !errors.Is(err, world.ErrPermission) ||
		err.Error() != "User 'Bob' does not have permission to roll death saves for 'Actor.a1'" {
		t.Fatalf("death save refused to a user who cannot see the actor: %v", err)
	}
	rec.mu.Lock()
	rec.replies["death-save"] = map[string]any{"error": "User 'Alice' does not have permission to roll death saves for 'Hero'"}
	rec.mu.Unlock()
	if _, err := rules.DeathSave(ctx, alice, world.DeathSaveParams{ActorUUID: "Actor.a1"}); err == nil ||
		err.Error() != "User 'Alice' does not have permission to roll death saves for 'Hero'" {
		t.Fatalf("death save refused to an observer: %v", err)
	}
	// Reading a sheet needs OBSERVER, checked against the actor's ownership.
	if _, err := rules.PrepareSpell(ctx, alice, "Actor.a1", "Shield", true); !errors.Is(err, world.ErrPermission) {
		t.Fatalf("prepare a spell of an observed actor: %v", err)
	}
}

// TestLinkedDnd5eOtherSystems: a linked world of another system offers no
// ruleset: the services answer 501 naming the operation.
func TestLinkedDnd5eOtherSystems(t *testing.T) {
	e := newEnv(t)
	tt := e.connected(func(c *linktest.Config) { c.SystemID = "pf2e" })
	clientID, _ := tt.Credentials()
	w := link.NewLinked(e.svc.Hub(), clientID, world.Info{})
	e.wait("the connection", func() bool { return e.svc.Hub().Online(clientID) })
	if _, err := world.Capability[world.Dnd5e](w.Resolved(), "dnd5e/long-rest"); !errors.Is(err, world.ErrUnimplemented) ||
		err.Error() != "World '"+clientID+"' does not offer dnd5e/long-rest" {
		t.Fatalf("pf2e world: %v", err)
	}
}

// since returns the requests seen after the first n.
func (r *recorder) since(n int) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.requests[n:]...)
}
