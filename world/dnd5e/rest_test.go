package dnd5e

import (
	"math"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

func TestShortRest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	threshold := func(v float64) *float64 { return &v }

	// Brom: 38 of 49 HP, 3 of 5 d10 left, Action Surge spent. With the
	// system's default threshold (autoSpendHitDice: spend while hit points
	// + 3 are at most the maximum) he spends dice: each d10 + 3 (con),
	// never below 0 (the system's max(0, 1d10 + @abilities.con.mod)):
	// 38 + 7 = 45, then 45 + 3 <= 49 so another, capped at 49.
	f.roll(4, 4)
	r := must(f.rules.ShortRest(f.ctx, f.e, f.user("Bob"), RestParams{Actor: ActorRef{UUID: brom}, AutoHD: true}))(t)
	if r.Type != "short" || r.LongRest || r.DHD != -2 || r.DHP != 11 || len(r.Rolls) != 2 || r.Rolls[0].Formula != "max(0, 1d10 + 3)" {
		t.Fatalf("%+v", r)
	}
	if f.value(surge, "system.uses.spent") != 0.0 {
		t.Fatal("Action Surge (short rest) not recovered")
	}
	if len(r.UpdateItems) != 2 || r.UpdateItems[1].(map[string]any)["_id"] != "actionSurge00001" {
		t.Fatalf("updateItems %v", r.UpdateItems)
	}
	if f.value(brom, "system.attributes.hp.value") != 49.0 || f.value(fighter, "system.hd.spent") != 4.0 || f.value(fighter, "system.hitDiceUsed") != 4.0 {
		t.Fatalf("hp %v, hd spent %v", f.value(brom, "system.attributes.hp.value"), f.value(fighter, "system.hd.spent"))
	}
	if r.Deltas["hitPoints"] != 11.0 || r.Deltas["hitDice"] != -2.0 || r.Clone["uuid"] != brom || r.UpdateData["system.attributes.hp.value"] != 49.0 {
		t.Fatalf("%+v", r)
	}

	// The contract's fraction (0 to 1): below 70% of 49 (34.3) each die is
	// rolled: 30 + 7 = 37, and then he stops.
	f.set(brom, world.Document{"system.attributes.hp.value": 30.0})
	f.set(fighter, world.Document{"system.hd.spent": 2.0, "system.hitDiceUsed": 2.0})
	f.roll(4, 4)
	r = must(f.rules.ShortRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}, AutoHD: true, AutoHDThreshold: threshold(0.7)}))(t)
	if r.DHD != -1 || r.DHP != 7 || f.value(brom, "system.attributes.hp.value") != 37.0 {
		t.Fatalf("fraction: %+v", r)
	}
	// The tabletop's number of missing hit points (above 1): 37 + 10 <= 49,
	// so one die (37 + 4 = 41), then 41 + 10 > 49 and he stops.
	f.roll(1)
	r = must(f.rules.ShortRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}, AutoHD: true, AutoHDThreshold: threshold(10)}))(t)
	if r.DHD != -1 || r.DHP != 4 || f.value(brom, "system.attributes.hp.value") != 41.0 {
		t.Fatalf("missing hit points: %+v", r)
	}
	// A threshold of 1 reads the same both ways (below the maximum): the
	// last die is spent and the hit points cap at the maximum.
	f.roll(10)
	r = must(f.rules.ShortRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}, AutoHD: true, AutoHDThreshold: threshold(1)}))(t)
	if r.DHD != -1 || f.value(brom, "system.attributes.hp.value") != 49.0 {
		t.Fatalf("%+v hp %v", r, f.value(brom, "system.attributes.hp.value"))
	}
	// A hit die never heals less than 0: CON 4 (-3) and a 1 heal nothing.
	f.set(brom, world.Document{"system.attributes.hp.value": 20.0, "system.abilities.con.value": 4.0})
	f.set(fighter, world.Document{"system.hd.spent": 4.0, "system.hitDiceUsed": 4.0})
	f.roll(1)
	r = must(f.rules.ShortRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}, AutoHD: true}))(t)
	if len(r.Rolls) != 1 || r.Rolls[0].Total != 0 || r.Rolls[0].Formula != "max(0, 1d10 - 3)" || r.DHP != 0 || r.DHD != -1 {
		t.Fatalf("negative hit die: %+v", r.Rolls)
	}
	// Without autoHD nothing is rolled.
	f.set(brom, world.Document{"system.attributes.hp.value": 1.0})
	r = must(f.rules.ShortRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}}))(t)
	if r.DHD != 0 || len(r.Rolls) != 0 {
		t.Fatalf("%+v", r)
	}

	for _, bad := range []float64{-0.1, math.NaN(), math.Inf(1)} {
		_, err := f.rules.ShortRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}, AutoHD: true, AutoHDThreshold: threshold(bad)})
		wantErr(t, err, world.ErrInvalid, "autoHDThreshold must be a fraction from 0 to 1 or a number of missing hit points above 1")
	}
	_, err := f.rules.ShortRest(f.ctx, f.e, f.user("Alice"), RestParams{Actor: ActorRef{UUID: brom}})
	wantErr(t, err, world.ErrPermission, "User 'Alice' does not have permission to perform a short rest on 'Brom Ironfist'")
	_, err = f.rules.ShortRest(f.ctx, f.e, nil, RestParams{})
	wantErr(t, err, world.ErrInvalid, "Either actorUuid or selected must be provided")
}

func TestLongRest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// A long-rest-only resource and a daily item use, both spent.
	f.set(aria, world.Document{
		"system.resources.primary.value": 0.0, "system.attributes.hp.temp": 5.0, "system.attributes.exhaustion": 2.0,
		"system.attributes.death.failure": 1.0,
	})
	lr := f.create("Item", aria, world.Document{"name": "Pearl", "type": "loot", "system": world.Document{"uses": world.Document{"max": "2", "spent": 2.0, "recovery": []any{world.Document{"period": "lr", "type": "recoverAll"}}}}})

	// A short rest recovers neither.
	must(f.rules.ShortRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: aria}}))(t)
	if f.value(aria, "system.resources.primary.value") != 0.0 || f.value(lr, "system.uses.spent") != 2.0 {
		t.Fatal("a short rest recovered long-rest uses")
	}

	// No new day: the wand (dawn) stays as it is.
	no := false
	r := must(f.rules.LongRest(f.ctx, f.e, f.user("Alice"), RestParams{Actor: ActorRef{UUID: aria}, NewDay: &no}))(t)
	if !r.LongRest || r.Type != "long" || r.NewDay || r.DHP != 11 || r.DHD != 1 {
		t.Fatalf("%+v", r)
	}
	for path, want := range map[string]any{
		"system.attributes.hp.value": 32.0, "system.attributes.hp.temp": 0.0, "system.spells.spell1.value": 4.0,
		"system.spells.spell3.value": 2.0, "system.resources.primary.value": 1.0, "system.attributes.exhaustion": 1.0,
	} {
		if got := f.value(aria, path); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if f.value(wizard, "system.hd.spent") != 0.0 || f.value(lr, "system.uses.spent") != 0.0 || f.value(wand, "system.uses.spent") != 2.0 {
		t.Fatalf("hd %v, pearl %v, wand %v", f.value(wizard, "system.hd.spent"), f.value(lr, "system.uses.spent"), f.value(wand, "system.uses.spent"))
	}

	// A new day (the default) recovers the wand's 1d6 + 1 charges at dawn.
	f.set(wand, world.Document{"system.uses.spent": 6.0})
	f.roll(3)
	r = must(f.rules.LongRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: aria}}))(t)
	if !r.NewDay || len(r.Rolls) != 1 || r.Rolls[0].Total != 4 || f.value(wand, "system.uses.spent") != 2.0 {
		t.Fatalf("%+v, wand spent %v", r, f.value(wand, "system.uses.spent"))
	}

	// Hit dice come back up to half the total, largest first: Brom (5 d10,
	// all spent) gets 2 back.
	f.set(fighter, world.Document{"system.hd.spent": 5.0})
	r = must(f.rules.LongRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}}))(t)
	if r.DHD != 2 || f.value(fighter, "system.hd.spent") != 3.0 {
		t.Fatalf("%+v", r)
	}
	// At 0 HP the death save counters start over.
	f.set(brom, world.Document{"system.attributes.hp.value": 0.0, "system.attributes.death.failure": 2.0})
	must(f.rules.LongRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}}))(t)
	if f.value(brom, "system.attributes.death.failure") != 0.0 {
		t.Fatal("death saves not reset")
	}
	_, err := f.rules.LongRest(f.ctx, f.e, f.user("Bob"), RestParams{Actor: ActorRef{UUID: aria}})
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to perform a long rest on 'Aria Vale'")
}
