package dnd5e

import (
	"testing"

	"github.com/tabletop-relay/relay/world"
)

func TestItemCharges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := must(f.rules.ModifyItemCharges(f.ctx, f.e, f.user("Alice"), aria, ItemRef{Name: "wand of magic missiles"}, -2))(t)
	if r.ItemUUID != wand || r.OldCharges != 5 || r.NewCharges != 3 || f.value(wand, "system.uses.spent") != 4.0 {
		t.Fatalf("%+v", r)
	}
	r = must(f.rules.ModifyItemCharges(f.ctx, f.e, nil, aria, ItemRef{UUID: wand}, -10))(t)
	if r.OldCharges != 3 || r.NewCharges != 0 {
		t.Fatalf("clamp at 0: %+v", r)
	}
	r = must(f.rules.ModifyItemCharges(f.ctx, f.e, nil, aria, ItemRef{UUID: wand}, 100))(t)
	if r.NewCharges != 7 || f.value(wand, "system.uses.spent") != 0.0 {
		t.Fatalf("clamp at max: %+v", r)
	}
	_, err := f.rules.ModifyItemCharges(f.ctx, f.e, nil, aria, ItemRef{Name: "Spellbook"}, 1)
	wantErr(t, err, world.ErrFailedPrecondition, "Item 'Spellbook' has no charges")
	_, err = f.rules.ModifyItemCharges(f.ctx, f.e, f.user("Bob"), aria, ItemRef{UUID: wand}, 1)
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to modify item charges on 'Aria Vale'")
	_, err = f.rules.ModifyItemCharges(f.ctx, f.e, nil, aria, ItemRef{UUID: secondWnd}, 1)
	wantErr(t, err, world.ErrInvalid, "does not belong to actor Aria Vale")
	_, err = f.rules.ModifyItemCharges(f.ctx, f.e, nil, aria, ItemRef{Name: "Nothing"}, 1)
	wantErr(t, err, world.ErrNotFound, "Item not found on actor Aria Vale: Nothing")
}

func TestEquipAndAttune(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := must(f.rules.EquipItem(f.ctx, f.e, f.user("Alice"), ActorRef{Name: "Aria Vale"}, ItemRef{Name: "ring of protection"}, true))(t)
	if r.ItemUUID != ring || !r.On || f.value(ring, "system.equipped") != true {
		t.Fatalf("%+v", r)
	}
	_, err := f.rules.EquipItem(f.ctx, f.e, nil, ActorRef{UUID: aria}, ItemRef{Name: "Fire Bolt"}, true)
	wantErr(t, err, world.ErrFailedPrecondition, "cannot be equipped")
	_, err = f.rules.EquipItem(f.ctx, f.e, f.user("Alice"), ActorRef{UUID: brom}, ItemRef{Name: "Shield"}, false)
	wantErr(t, err, world.ErrPermission, "User 'Alice' does not have permission to modify items on 'Brom Ironfist'")

	_, err = f.rules.AttuneItem(f.ctx, f.e, nil, ActorRef{UUID: aria}, ItemRef{UUID: wand}, true)
	wantErr(t, err, world.ErrFailedPrecondition, "Item 'Wand of Magic Missiles' does not require attunement")
	// Three items already attuned: a fourth is refused, and nothing changes.
	for _, name := range []string{"Amulet", "Cloak", "Boots"} {
		f.create("Item", aria, world.Document{"name": name, "type": "equipment", "system": world.Document{"attunement": "required", "attuned": true, "equipped": true}})
	}
	_, err = f.rules.AttuneItem(f.ctx, f.e, nil, ActorRef{UUID: aria}, ItemRef{UUID: ring}, true)
	wantErr(t, err, world.ErrFailedPrecondition, "Aria Vale is already attuned to 3 items")
	if f.value(ring, "system.attuned") != false {
		t.Fatal("refused attunement changed the ring")
	}
	must(f.rules.AttuneItem(f.ctx, f.e, nil, ActorRef{UUID: aria}, ItemRef{Name: "Boots"}, false))(t)
	r = must(f.rules.AttuneItem(f.ctx, f.e, f.user("Alice"), ActorRef{UUID: aria}, ItemRef{UUID: ring}, true))(t)
	if !r.On || f.value(ring, "system.attuned") != true {
		t.Fatalf("%+v", r)
	}
}

func TestCurrency(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := must(f.rules.ModifyCurrency(f.ctx, f.e, f.user("Alice"), aria, "gp", -5))(t)
	if c.OldAmount != 85 || c.NewAmount != 80 || c.Balance["sp"] != 14 {
		t.Fatalf("%+v", c)
	}
	_, err := f.rules.ModifyCurrency(f.ctx, f.e, nil, aria, "gp", -81)
	wantErr(t, err, world.ErrFailedPrecondition, "Insufficient gp: Aria Vale has 80, needs 81")
	_, err = f.rules.ModifyCurrency(f.ctx, f.e, nil, aria, "zz", 1)
	wantErr(t, err, world.ErrInvalid, "currency must be one of pp, gp, ep, sp, cp")
	_, err = f.rules.ModifyCurrency(f.ctx, f.e, f.user("Bob"), aria, "gp", 1)
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to modify currency on 'Aria Vale'")

	// Insufficient funds in any denomination leave both actors unchanged.
	before := []any{f.value(aria, "system.currency"), f.value(brom, "system.currency")}
	_, err = f.rules.TransferCurrency(f.ctx, f.e, nil, TransferParams{Source: ActorRef{UUID: aria}, Target: ActorRef{UUID: brom}, Amount: Currency{"gp": 10, "pp": 1}})
	wantErr(t, err, world.ErrFailedPrecondition, "Insufficient pp: Aria Vale has 0, needs 1")
	after := []any{f.value(aria, "system.currency"), f.value(brom, "system.currency")}
	for i := range before {
		for _, d := range Denominations {
			if before[i].(map[string]any)[d] != after[i].(map[string]any)[d] {
				t.Fatalf("a refused transfer changed %s: %v -> %v", d, before[i], after[i])
			}
		}
	}
	// Both actors need OWNER.
	_, err = f.rules.TransferCurrency(f.ctx, f.e, f.user("Alice"), TransferParams{Source: ActorRef{UUID: aria}, Target: ActorRef{Name: "Brom Ironfist"}, Amount: Currency{"gp": 1}})
	wantErr(t, err, world.ErrPermission, "User 'Alice' does not have permission to transfer currency to 'Brom Ironfist'")
	_, err = f.rules.TransferCurrency(f.ctx, f.e, f.user("Bob"), TransferParams{Source: ActorRef{UUID: aria}, Target: ActorRef{UUID: brom}, Amount: Currency{"gp": 1}})
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to transfer currency from 'Aria Vale'")
	_, err = f.rules.TransferCurrency(f.ctx, f.e, nil, TransferParams{Source: ActorRef{UUID: aria}, Target: ActorRef{UUID: brom}, Amount: Currency{"gp": -1}})
	wantErr(t, err, world.ErrInvalid, "currency.gp must not be negative")
	_, err = f.rules.TransferCurrency(f.ctx, f.e, nil, TransferParams{Source: ActorRef{UUID: aria}, Target: ActorRef{UUID: brom}, Amount: Currency{}})
	wantErr(t, err, world.ErrInvalid, "at least one coin")

	r := must(f.rules.TransferCurrency(f.ctx, f.e, nil, TransferParams{Source: ActorRef{UUID: aria}, Target: ActorRef{UUID: brom}, Amount: Currency{"gp": 10, "sp": 4}}))(t)
	if r.SourceBalance["gp"] != 70 || r.SourceBalance["sp"] != 10 || r.TargetBalance["gp"] != 52 || r.TargetBalance["sp"] != 11 || r.Transferred["gp"] != 10 || r.Transferred["cp"] != 0 {
		t.Fatalf("%+v", r)
	}
	if f.value(aria, "system.currency.gp") != 70.0 || f.value(brom, "system.currency.gp") != 52.0 {
		t.Fatal("balances not stored")
	}
}

func TestExperience(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	x := must(f.rules.ModifyExperience(f.ctx, f.e, f.user("Alice"), ActorRef{UUID: aria}, -500))(t)
	if x.OldXP != 6500 || x.NewXP != 6000 || f.value(aria, "system.details.xp.value") != 6000.0 {
		t.Fatalf("%+v", x)
	}
	_, err := f.rules.ModifyExperience(f.ctx, f.e, nil, ActorRef{UUID: aria}, -6001)
	wantErr(t, err, world.ErrFailedPrecondition, "Cannot remove 6001 XP: Aria Vale has only 6000")
	_, err = f.rules.ModifyExperience(f.ctx, f.e, nil, ActorRef{UUID: goblin}, 10)
	wantErr(t, err, world.ErrFailedPrecondition, "Actor 'Goblin' does not have experience points")
	_, err = f.rules.ModifyExperience(f.ctx, f.e, f.user("Bob"), ActorRef{UUID: aria}, 10)
	wantErr(t, err, world.ErrPermission, "modify experience on 'Aria Vale'")
	// The selected token's actor (the GM's selection).
	must(f.e.Select(f.ctx, nil, world.SelectParams{Name: "Brom Ironfist", Overwrite: true}))(t)
	x = must(f.rules.ModifyExperience(f.ctx, f.e, nil, ActorRef{Selected: true}, 100))(t)
	if x.ActorUUID != brom || x.NewXP != 6600 {
		t.Fatalf("%+v", x)
	}
}

func TestPrepareSpell(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	detect := aria + ".Item.detectMagic00001"
	r := must(f.rules.PrepareSpell(f.ctx, f.e, f.user("Alice"), aria, "detect magic", true))(t)
	if r.SpellUUID != detect || !r.Prepared || f.value(detect, "system.prepared") != 1.0 || f.value(detect, "system.preparation.prepared") != true {
		t.Fatalf("%+v", r)
	}
	must(f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Detect Magic", false))(t)
	if f.value(detect, "system.prepared") != 0.0 {
		t.Fatal("not unprepared")
	}
	_, err := f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Fire Bolt", false)
	wantErr(t, err, world.ErrFailedPrecondition, "Fire Bolt is a cantrip")
	f.set(detect, world.Document{"system.prepared": 2.0})
	_, err = f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Detect Magic", false)
	wantErr(t, err, world.ErrFailedPrecondition, "Detect Magic is always prepared")
	_, err = f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Wish", true)
	wantErr(t, err, world.ErrNotFound, "Spell not found: Wish")
	_, err = f.rules.PrepareSpell(f.ctx, f.e, f.user("Bob"), aria, "Fireball", true)
	wantErr(t, err, world.ErrPermission, "prepare spells on 'Aria Vale'")
	// A class that does not prepare spells.
	f.create("Item", brom, world.Document{"name": "Shield of Faith", "type": "spell", "system": world.Document{"level": 1.0, "method": "spell", "prepared": 0.0, "sourceClass": "fighter"}})
	f.set(fighter, world.Document{"system.spellcasting.progression": "third"})
	_, err = f.rules.PrepareSpell(f.ctx, f.e, nil, brom, "Shield of Faith", true)
	wantErr(t, err, world.ErrFailedPrecondition, "The Fighter class does not prepare spells")
}
