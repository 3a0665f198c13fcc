package dnd5e

import (
	"slices"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

// effect is the data of an active effect with changes (key, mode, value)
// and statuses.
func effect(name string, statuses []any, changes ...[3]any) world.Document {
	list := []any{}
	for _, c := range changes {
		list = append(list, map[string]any{"key": c[0], "mode": c[1], "value": c[2]})
	}
	return world.Document{"name": name, "statuses": statuses, "changes": list, "disabled": false}
}

// TestRollModes: SRD 5.1 Appendix A (Exhaustion: level 1 disadvantage on
// ability checks, level 3 on attack rolls and saving throws; Poisoned:
// disadvantage on attack rolls and ability checks), the system's armour
// with stealth disadvantage, its roll mode fields and the effects that
// change them (its AdvantageModeField), and "Advantage and Disadvantage":
// both cancel out, whatever their numbers. The result names the mode and
// every source.
func TestRollModes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	check := func(p CheckParams, roll func(*Rules) func() (RollResult, error)) RollResult {
		t.Helper()
		return must(roll(f.rules)())(t)
	}
	skill := func(actor, s string, adv, dis bool) RollResult {
		t.Helper()
		f.roll(5, 15)
		return check(CheckParams{}, func(r *Rules) func() (RollResult, error) {
			return func() (RollResult, error) {
				return r.SkillCheck(f.ctx, f.e, nil, CheckParams{ActorUUID: actor, Skill: s, Advantage: adv, Disadvantage: dis})
			}
		})
	}
	save := func(actor, ab string) RollResult {
		t.Helper()
		f.roll(5, 15)
		return must(f.rules.AbilitySave(f.ctx, f.e, nil, CheckParams{ActorUUID: actor, Ability: ab}))(t)
	}
	abilityCheck := func(actor, ab string) RollResult {
		t.Helper()
		f.roll(5, 15)
		return must(f.rules.AbilityCheck(f.ctx, f.e, nil, CheckParams{ActorUUID: actor, Ability: ab}))(t)
	}
	wantMode := func(what string, got RollMode, mode string, adv, dis []string) {
		t.Helper()
		if got.Mode != mode || !slices.Equal(got.Advantage, adv) || !slices.Equal(got.Disadvantage, dis) {
			t.Fatalf("%s: mode %+v, want %s, advantage %v, disadvantage %v", what, got, mode, adv, dis)
		}
	}
	none := []string{}

	// Nothing: a plain d20.
	r := skill(aria, "arc", false, false)
	wantMode("plain", r.Mode, "normal", none, none)
	if r.Formula != "1d20 + 4 + 3" {
		t.Fatalf("formula %s", r.Formula)
	}
	// Brom's Chain Mail hinders his Stealth, and only his Stealth.
	r = skill(brom, "ste", false, false)
	wantMode("stealth", r.Mode, "disadvantage", none, []string{"Chain Mail"})
	if r.Formula != "2d20kl + 1" || r.Total != 6 {
		t.Fatalf("stealth in chain mail: %s = %d", r.Formula, r.Total)
	}
	wantMode("athletics", skill(brom, "ath", false, false).Mode, "normal", none, none)
	// Asking for advantage cancels the armour out.
	r = skill(brom, "ste", true, false)
	wantMode("stealth with advantage", r.Mode, "normal", []string{"requested"}, []string{"Chain Mail"})
	if r.Formula != "1d20 + 1" {
		t.Fatalf("cancelled: %s", r.Formula)
	}

	// Exhaustion 1: ability checks (skills too), not saves.
	f.set(aria, world.Document{"system.attributes.exhaustion": 1.0})
	wantMode("exhaustion 1 skill", skill(aria, "arc", false, false).Mode, "disadvantage", none, []string{"Exhaustion 1"})
	wantMode("exhaustion 1 check", abilityCheck(aria, "int").Mode, "disadvantage", none, []string{"Exhaustion 1"})
	wantMode("exhaustion 1 save", save(aria, "int").Mode, "normal", none, none)
	// Exhaustion 3: saves as well, and attacks.
	f.set(aria, world.Document{"system.attributes.exhaustion": 3.0})
	r = save(aria, "wis")
	wantMode("exhaustion 3 save", r.Mode, "disadvantage", none, []string{"Exhaustion 3"})
	if r.Formula != "2d20kl + 1 + 3" || r.Total != 9 {
		t.Fatalf("save: %s = %d", r.Formula, r.Total)
	}
	f.roll(5, 15, 4, 4)
	u := must(f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "Fire Bolt"}}))(t)
	wantMode("exhaustion 3 attack", u.Attack.Mode, "disadvantage", none, []string{"Exhaustion 3"})
	if u.Attack.Formula != "2d20kl + 4 + 3" {
		t.Fatalf("attack %s", u.Attack.Formula)
	}
	f.set(aria, world.Document{"system.attributes.exhaustion": 0.0})

	// Poisoned: attacks and ability checks, not saves.
	f.create("ActiveEffect", brom, effect("Poisoned", []any{"poisoned"}))
	wantMode("poisoned check", abilityCheck(brom, "str").Mode, "disadvantage", none, []string{"Poisoned"})
	wantMode("poisoned save", save(brom, "con").Mode, "normal", none, none)
	f.roll(5, 15, 3)
	u = must(f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseItem, ActorUUID: brom, Ability: ItemRef{Name: "Longsword"}}))(t)
	wantMode("poisoned attack", u.Attack.Mode, "disadvantage", none, []string{"Poisoned"})
	// Poisoned and in chain mail: two sources, still one disadvantage.
	wantMode("poisoned stealth", skill(brom, "ste", false, false).Mode, "disadvantage", none, []string{"Poisoned", "Chain Mail"})

	// An effect granting advantage on Athletics through the system's roll
	// mode field cancels the poison out; one that overrides the mode wins
	// over every other source.
	f.create("ActiveEffect", brom, effect("Bull's Strength", nil, [3]any{"system.skills.ath.roll.mode", 2.0, "1"}))
	r = skill(brom, "ath", false, false)
	wantMode("effect advantage", r.Mode, "normal", []string{"Bull's Strength"}, []string{"Poisoned"})
	f.create("ActiveEffect", brom, effect("Guidance of the Gods", nil, [3]any{"system.abilities.str.check.roll.mode", 5.0, "1"}))
	r = skill(brom, "ath", false, false)
	if r.Mode.Mode != "advantage" || r.Mode.Override != "Guidance of the Gods" || r.Formula != "2d20kh + 4 + 3" || r.Total != 22 {
		t.Fatalf("override: %+v %s = %d", r.Mode, r.Formula, r.Total)
	}
	// The actor's own roll mode field counts as a source too.
	f.set(brom, world.Document{"system.abilities.con.save.roll.mode": -1.0})
	wantMode("actor field", save(brom, "con").Mode, "disadvantage", none, []string{"abilities.con.save.roll.mode"})

	// The chat card records the mode the roll was made with.
	f.roll(5, 15)
	must(f.rules.AbilitySave(f.ctx, f.e, nil, CheckParams{ActorUUID: brom, Ability: "con", ChatMessage: true}))(t)
	var flags map[string]any
	for _, c := range f.chats() {
		if at(c, "flags.dnd5e.roll.type") == "save" {
			flags = obj(at(c, "flags.dnd5e.roll"))
		}
	}
	if flags["disadvantage"] != true || flags["advantage"] != false || flags["advantageMode"] != -1.0 {
		t.Fatalf("chat flags %v", flags)
	}
}

// TestAttacksAgainstTargets: SRD 5.1 "Making an Attack" and "Rolling 1 or
// 20": a roll hits when its total meets the target's armour class; a
// natural 1 always misses and a natural 20 always hits; damage is rolled
// on a hit only.
func TestAttacksAgainstTargets(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	attack := func(rolls ...int) UseResult {
		t.Helper()
		f.roll(rolls...)
		return must(f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseItem, ActorUUID: brom, Ability: ItemRef{Name: "Longsword"}, TargetUUID: goblin}))(t)
	}
	hit := func(r UseResult) bool { return r.Attack.Hit != nil && *r.Attack.Hit }
	// The goblin's AC is 15; Brom adds +7.
	if r := attack(7, 5); hit(r) || len(r.Damage) != 0 || r.Attack.Total != 14 {
		t.Fatalf("14 against 15 hit: %+v %+v", r.Attack, r.Damage)
	}
	if r := attack(8, 5); !hit(r) || len(r.Damage) != 1 || r.Damage[0].Total != 9 || r.Attack.IsCritical {
		t.Fatalf("15 against 15 missed: %+v %+v", r.Attack, r.Damage)
	}
	// A natural 1 misses an AC it would beat; a natural 20 (and Brom's
	// champion 19) hits one it would not, critically.
	f.set(goblin, world.Document{"system.attributes.ac.flat": 5.0})
	if r := attack(1, 5); hit(r) || !r.Attack.IsFumble || len(r.Damage) != 0 {
		t.Fatalf("natural 1: %+v", r.Attack)
	}
	f.set(goblin, world.Document{"system.attributes.ac.flat": 30.0})
	if r := attack(20, 5, 6); !hit(r) || !r.Attack.IsCritical || r.Damage[0].Formula != "2d8 + 4" {
		t.Fatalf("natural 20: %+v %+v", r.Attack, r.Damage)
	}
	if r := attack(19, 5, 6); !hit(r) || !r.Attack.IsCritical {
		t.Fatalf("champion 19: %+v", r.Attack)
	}
	if r := attack(18, 5); hit(r) {
		t.Fatalf("18 + 7 against 30: %+v", r.Attack)
	}
	// Without a target nothing is decided and damage is rolled.
	f.roll(2, 5)
	r := must(f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseItem, ActorUUID: brom, Ability: ItemRef{Name: "Longsword"}}))(t)
	if r.Attack.Hit != nil || len(r.Damage) != 1 {
		t.Fatalf("no target: %+v %+v", r.Attack, r.Damage)
	}
	// The chat cards say hit or miss.
	cards := map[string]bool{}
	for _, c := range f.chats() {
		cards[str(c["content"])] = true
	}
	if !cards["Attack: 25, miss; Target: Goblin"] || !cards["Attack: 15, hit; slashing: 9; Target: Goblin"] {
		t.Fatalf("chat cards %v", cards)
	}
}

// TestArmorClass: the system's armour class calculations: an equipped
// shield adds to every calculation but flat; `custom` evaluates its
// formula with the armour's parts.
func TestArmorClass(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Brom: Chain Mail 16 (no DEX), Shield +2, Fighting Style +1 (an
	// effect on the AC bonus); DEX +1, WIS +1, CON +3.
	ac := func(calc string, extra world.Document) int {
		t.Helper()
		d := world.Document{"system.attributes.ac.calc": calc}
		for k, v := range extra {
			d[k] = v
		}
		f.set(brom, d)
		var out int
		if err := f.e.View(f.ctx, func(v *world.View) error {
			doc, err := v.Get(brom)
			out = armorClass(derive(brom, doc))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tt := range []struct {
		calc  string
		extra world.Document
		want  int
	}{
		{"flat", world.Document{"system.attributes.ac.flat": 12.0}, 12},
		{"default", nil, 16 + 2 + 1},
		{"natural", world.Document{"system.attributes.ac.flat": 13.0}, 13 + 2 + 1},
		{"mage", nil, 13 + 1 + 2 + 1},
		{"unarmoredMonk", nil, 10 + 1 + 1 + 2 + 1},
		{"unarmoredBarb", nil, 10 + 1 + 3 + 2 + 1},
		{"custom", world.Document{"system.attributes.ac.formula": "@attributes.ac.armor + @attributes.ac.dex + @abilities.con.mod"}, 16 + 0 + 3 + 2 + 1},
		{"custom", world.Document{"system.attributes.ac.formula": "12 + @prof"}, 12 + 3 + 2 + 1},
		// A formula that does not give a number without dice falls back to
		// the default calculation.
		{"custom", world.Document{"system.attributes.ac.formula": "1d4 + 10"}, 16 + 2 + 1},
	} {
		if got := ac(tt.calc, tt.extra); got != tt.want {
			t.Errorf("%s %v: AC %d, want %d", tt.calc, tt.extra, got, tt.want)
		}
	}
}

// TestEffectOrder: the system applies changes by priority (the mode × 10
// unless given), so an override (mode 5, priority 50) beats an addition
// (mode 2, priority 20) listed after it, and a given priority moves a
// change.
func TestEffectOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.create("ActiveEffect", aria, effect("Headband", nil,
		[3]any{"system.abilities.int.value", 5.0, "19"},
		[3]any{"system.abilities.int.value", 2.0, "2"}))
	abilities := must(f.rules.ActorDetails(f.ctx, f.e, nil, aria, []string{"abilities"}))(t).Abilities
	if v := at(abilities, "int.value"); v != 19.0 {
		t.Fatalf("int %v, want 19 (18 + 2 = 20, then overridden)", v)
	}
	f.create("ActiveEffect", aria, world.Document{"name": "Late boost", "disabled": false,
		"changes": []any{map[string]any{"key": "system.abilities.int.value", "mode": 2.0, "value": "1", "priority": 60.0}}})
	abilities = must(f.rules.ActorDetails(f.ctx, f.e, nil, aria, []string{"abilities"}))(t).Abilities
	if v := at(abilities, "int.value"); v != 20.0 {
		t.Fatalf("int %v, want 20 (an addition of priority 60 after the override)", v)
	}
}

// TestSpellSlotsAndPreparation: casting at a slot level asked for; no
// silent upcast (the system's "You have no available ... spell slots"
// refusal); SRD 5.1 Wizard "Preparing and Casting Spells": INT modifier +
// wizard level prepared spells, and only prepared spells are cast.
func TestSpellSlotsAndPreparation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cast := func(name string, slot int) (UseResult, error) {
		f.roll(3, 3, 3, 3, 3, 3, 3, 3, 3, 3)
		return f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: name}, SlotLevel: slot})
	}
	r := must(cast("Hold Person", 3))(t)
	if r.Consumed["spellSlot"] != "spell3" || f.value(aria, "system.spells.spell3.value") != 0.0 {
		t.Fatalf("%+v", r.Consumed)
	}
	_, err := cast("Hold Person", 3)
	wantErr(t, err, world.ErrFailedPrecondition, "You have no available level 3 spell slots with which to cast Hold Person.")
	_, err = cast("Hold Person", 1)
	wantErr(t, err, world.ErrInvalid, "slotLevel 1 is below the level of Hold Person (2)")
	_, err = cast("Fire Bolt", 1)
	wantErr(t, err, world.ErrInvalid, "slotLevel: Fire Bolt is cast without a spell slot")
	_, err = cast("Hold Person", 10)
	wantErr(t, err, world.ErrInvalid, "slotLevel must be a spell slot level from 1 to 9, got 10")
	if f.value(aria, "system.spells.spell2.value") != 3.0 {
		t.Fatal("a refused cast spent a slot")
	}

	// Detect Magic is not prepared: it cannot be cast.
	_, err = cast("Detect Magic", 0)
	wantErr(t, err, world.ErrFailedPrecondition, "Detect Magic is not prepared: Aria Vale must prepare it before casting it")
	// Aria may prepare 4 + 5 = 9 and has 7: two more, then no more.
	must(f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Detect Magic", true))(t)
	must(cast("Detect Magic", 0))(t)
	f.create("Item", aria, world.Document{"name": "Sleep", "type": "spell", "system": map[string]any{"level": 1.0, "method": "spell", "prepared": 0.0, "sourceClass": "wizard"}})
	f.create("Item", aria, world.Document{"name": "Shatter", "type": "spell", "system": map[string]any{"level": 2.0, "method": "spell", "prepared": 0.0, "sourceClass": "wizard"}})
	must(f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Sleep", true))(t)
	_, err = f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Shatter", true)
	wantErr(t, err, world.ErrFailedPrecondition, "Aria Vale can prepare at most 9 Wizard spells and has 9 prepared: unprepare one first")
	// Preparing again what is prepared, or unpreparing, is never limited.
	must(f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Sleep", true))(t)
	must(f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Sleep", false))(t)
	must(f.rules.PrepareSpell(f.ctx, f.e, nil, aria, "Shatter", true))(t)
}

// TestExhaustionLevels: SRD 5.1 Appendix A: level 2 halves speed, level 4
// halves the hit point maximum (a long rest restores only that much), level
// 5 makes speed 0, level 6 is death.
func TestExhaustionLevels(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stats := func() map[string]any {
		t.Helper()
		return must(f.rules.ActorDetails(f.ctx, f.e, nil, brom, []string{"stats", "conditions"}))(t).Stats
	}
	f.set(brom, world.Document{"system.attributes.exhaustion": 2.0})
	if s := stats(); s["speed"] != 15.0 || at(s, "hp.max") != 49.0 {
		t.Fatalf("level 2: %v %v", s["speed"], s["hp"])
	}
	f.set(brom, world.Document{"system.attributes.exhaustion": 4.0})
	if s := stats(); s["speed"] != 15.0 || at(s, "hp.max") != 24.0 {
		t.Fatalf("level 4: %v %v", s["speed"], s["hp"])
	}
	r := must(f.rules.LongRest(f.ctx, f.e, nil, RestParams{Actor: ActorRef{UUID: brom}}))(t)
	if f.value(brom, "system.attributes.hp.value") != 24.0 || f.value(brom, "system.attributes.exhaustion") != 3.0 || r.DHP != 24-38 {
		t.Fatalf("long rest at level 4: hp %v exhaustion %v", f.value(brom, "system.attributes.hp.value"), f.value(brom, "system.attributes.exhaustion"))
	}
	f.set(brom, world.Document{"system.attributes.exhaustion": 5.0})
	if s := stats(); s["speed"] != 0.0 {
		t.Fatalf("level 5: speed %v", s["speed"])
	}
	f.set(brom, world.Document{"system.attributes.exhaustion": 6.0, "system.attributes.hp.value": 0.0})
	d := must(f.rules.ActorDetails(f.ctx, f.e, nil, brom, []string{"conditions"}))(t)
	ids := []string{}
	for _, c := range d.Conditions {
		ids = append(ids, str(obj(c)["id"]))
	}
	if !slices.Equal(ids, []string{"exhaustion", "dead"}) || at(obj(d.Conditions[0]), "level") != 6.0 {
		t.Fatalf("level 6 conditions %v", d.Conditions)
	}
	_, err := f.rules.DeathSave(f.ctx, f.e, nil, DeathSaveParams{ActorUUID: brom})
	wantErr(t, err, world.ErrFailedPrecondition, "Brom Ironfist is dead: exhaustion level 6")
}
