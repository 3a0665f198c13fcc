package dnd5e

import (
	"testing"

	"github.com/tabletop-relay/relay/world"
)

func TestUseSpells(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice := f.user("Alice")
	use := func(name string) UseResult {
		t.Helper()
		return must(f.rules.Use(f.ctx, f.e, alice, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: name}}))(t)
	}

	// A cantrip attack: no slot; 2d10 at level 5.
	f.roll(15, 6, 7)
	r := use("fire bolt")
	if r.Ability != "Fire Bolt" || r.Attack == nil || r.Attack.Formula != "1d20 + 4 + 3" || r.Attack.Total != 22 || r.Attack.IsCritical {
		t.Fatalf("attack %+v", r.Attack)
	}
	if len(r.Damage) != 1 || r.Damage[0].Formula != "2d10" || r.Damage[0].Total != 13 || r.Damage[0].Type != "fire" || r.Consumed["spellSlot"] != nil {
		t.Fatalf("damage %+v consumed %v", r.Damage, r.Consumed)
	}
	// A natural 20 doubles the dice.
	f.roll(20, 1, 1, 1, 1)
	if r = use("Fire Bolt"); !r.Attack.IsCritical || r.Damage[0].Formula != "4d10" {
		t.Fatalf("critical %+v %+v", r.Attack, r.Damage)
	}

	// Magic Missile spends a first-level slot (2 left).
	f.roll(3)
	r = use("Magic Missile")
	if r.Consumed["spellSlot"] != "spell1" || r.Damage[0].Formula != "1d4 + 1" || r.Damage[0].Total != 4 || f.value(aria, "system.spells.spell1.value") != 1.0 {
		t.Fatalf("%+v", r)
	}
	use("Magic Missile")
	// No first-level slot left: the system refuses rather than spend a
	// higher slot unasked; asked for a second-level slot it spends one,
	// and the spell's damage does not scale (no scaling in its data).
	_, err := f.rules.Use(f.ctx, f.e, alice, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "Magic Missile"}})
	wantErr(t, err, world.ErrFailedPrecondition, "You have no available level 1 spell slots with which to cast Magic Missile.")
	r = must(f.rules.Use(f.ctx, f.e, alice, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "Magic Missile"}, SlotLevel: 2}))(t)
	if r.Consumed["spellSlot"] != "spell2" || r.Consumed["slotLevel"] != 2.0 || f.value(aria, "system.spells.spell2.value") != 2.0 {
		t.Fatalf("%+v", r.Consumed)
	}

	// Fireball: a save at the spell DC (8 + 3 + 4) and 8d6 damage.
	r = use("Fireball")
	if r.Save["ability"] != "dex" || r.Save["dc"] != 15.0 || r.Damage[0].Formula != "8d6" || r.Attack != nil {
		t.Fatalf("%+v", r)
	}
	_, err = f.rules.Use(f.ctx, f.e, alice, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "Fireball"}})
	wantErr(t, err, world.ErrFailedPrecondition, "You have no available level 3 spell slots with which to cast Fireball.")

	// Upcasting at a slot level asked for: a scaling part gains a die per
	// level above.
	f.set(aria, world.Document{"system.spells.spell4.max": 1.0, "system.spells.spell4.value": 1.0})
	r = must(f.rules.Use(f.ctx, f.e, alice, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "Fireball"}, SlotLevel: 4}))(t)
	if r.Consumed["spellSlot"] != "spell4" || r.Damage[0].Formula != "9d6" {
		t.Fatalf("upcast %+v %+v", r.Consumed, r.Damage)
	}

	// Refusals: the wrong kind, another actor's item, permissions.
	_, err = f.rules.Use(f.ctx, f.e, alice, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{UUID: wand}})
	wantErr(t, err, world.ErrInvalid, "'Wand of Magic Missiles' (consumable) is not a spell")
	_, err = f.rules.Use(f.ctx, f.e, alice, UseParams{Kind: UseAbility, ActorUUID: aria, Ability: ItemRef{UUID: secondWnd}})
	wantErr(t, err, world.ErrInvalid, "does not belong to actor Aria Vale")
	_, err = f.rules.Use(f.ctx, f.e, f.user("Bob"), UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "Fire Bolt"}})
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to use abilities on 'Aria Vale'")
	_, err = f.rules.Use(f.ctx, f.e, alice, UseParams{Kind: UseFeature, ActorUUID: aria, Ability: ItemRef{Name: "Fire Bolt"}})
	wantErr(t, err, world.ErrNotFound, "Ability not found on actor Aria Vale: Fire Bolt")
}

func TestUseFeaturesAndItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	bob := f.user("Bob")
	use := func(kind UseKind, ref ItemRef, target string) (UseResult, error) {
		return f.rules.Use(f.ctx, f.e, bob, UseParams{Kind: kind, ActorUUID: brom, Ability: ref, TargetName: target})
	}

	// Second Wind: one use (short rest), 1d10 + fighter level healing.
	f.roll(6)
	r := must(use(UseFeature, ItemRef{Name: "second wind"}, ""))(t)
	if len(r.Damage) != 1 || r.Damage[0].Formula != "1d10 + 5" || r.Damage[0].Total != 11 || r.Damage[0].Type != "healing" || r.Consumed["uses"] != 1.0 {
		t.Fatalf("%+v", r)
	}
	if f.value(secondWnd, "system.uses.spent") != 1.0 {
		t.Fatal("use not spent")
	}
	_, err := use(UseFeature, ItemRef{UUID: secondWnd}, "")
	wantErr(t, err, world.ErrFailedPrecondition, "Second Wind has no uses left (0 of 1)")

	// Bob sees neither the Tavern (NONE) nor the goblin: for him "goblin"
	// names no token, exactly like "Nobody", and the sword swings without
	// a target, as on the tabletop.
	f.roll(12, 3)
	if r = must(use(UseItem, ItemRef{Name: "Longsword"}, "goblin"))(t); r.Target != nil || r.Attack.Hit != nil || len(r.Damage) != 1 {
		t.Fatalf("unseen target: %+v %+v", r.Target, r.Attack)
	}
	// Once the scene is LIMITED to players, the goblin's token is a target;
	// its actor, which Bob still cannot see, is not reported.
	f.set("Scene.tavernScene00001", world.Document{"ownership.default": 1})
	// A longsword attack on the goblin: str +4, proficient +3, 1d8 + 4;
	// the champion crits on 19 and doubles the dice.
	f.roll(19, 5, 6)
	r = must(use(UseItem, ItemRef{Name: "Longsword"}, "goblin"))(t)
	if r.Attack.Formula != "1d20 + 4 + 3" || !r.Attack.IsCritical || r.Damage[0].Formula != "2d8 + 4" || r.Damage[0].Total != 15 || r.Damage[0].Type != "slashing" {
		t.Fatalf("%+v %+v", r.Attack, r.Damage)
	}
	if r.Target["uuid"] != "Scene.tavernScene00001.Token.goblinToken00001" || r.Target["actorUuid"] != nil || r.Target["name"] != "Goblin" {
		t.Fatalf("target %v", r.Target)
	}
	// A GM sees the goblin behind the token.
	f.roll(10, 5)
	r = must(f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseItem, ActorUUID: brom, Ability: ItemRef{Name: "Longsword"}, TargetName: "goblin"}))(t)
	if r.Target["actorUuid"] != goblin {
		t.Fatalf("GM's target %v", r.Target)
	}
	f.roll(1, 5)
	if r = must(use(UseItem, ItemRef{Name: "Longsword"}, ""))(t); !r.Attack.IsFumble || r.Target != nil {
		t.Fatalf("%+v", r)
	}
	if r = must(use(UseItem, ItemRef{Name: "Longsword"}, "Nobody"))(t); r.Target != nil {
		t.Fatalf("target %v", r.Target)
	}
	r = must(f.rules.Use(f.ctx, f.e, bob, UseParams{Kind: UseItem, ActorUUID: brom, Ability: ItemRef{Name: "Longsword"}, TargetUUID: aria}))(t)
	if r.Target["uuid"] != "Scene.tavernScene00001.Token.ariaToken0000001" || r.Target["actorUuid"] != aria {
		t.Fatalf("an actor target: %v", r.Target)
	}
	_, err = f.rules.Use(f.ctx, f.e, bob, UseParams{Kind: UseItem, ActorUUID: brom, Ability: ItemRef{Name: "Longsword"}, TargetUUID: goblin})
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to view this entity")

	// The potion destroys itself with its last use.
	f.roll(2, 3)
	r = must(use(UseItem, ItemRef{UUID: potion}, ""))(t)
	if r.Damage[0].Formula != "2d4 + 2" || r.Damage[0].Total != 7 || r.Consumed["quantity"] != 1.0 {
		t.Fatalf("%+v", r)
	}
	if _, err := f.e.Get(f.ctx, nil, potion); err == nil {
		t.Fatal("the empty potion is still there")
	}
	// One chat card per use made; refused uses post nothing.
	if n := f.chatCount(); n != 8 {
		t.Fatalf("%d chat messages", n)
	}
}
