package dnd5e

import (
	"testing"

	"github.com/tabletop-relay/relay/world"
)

func TestDerivedData(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	d := must(f.rules.ActorDetails(f.ctx, f.e, nil, aria, []string{"abilities", "skills", "stats", "spells", "resources", "items", "features", "details", "conditions", "bogus"}))(t)
	ab := d.Abilities["int"].(map[string]any)
	if ab["mod"] != 4.0 || ab["save"] != 7.0 || ab["proficient"] != 1.0 || ab["value"] != 18.0 {
		t.Fatalf("int: %v", ab)
	}
	if d.Abilities["str"].(map[string]any)["mod"] != -1.0 {
		t.Fatalf("str 8 should be -1: %v", d.Abilities["str"])
	}
	arc := d.Skills["arc"].(map[string]any)
	if arc["total"] != 7.0 || arc["mod"] != 4.0 || arc["value"] != 1.0 || arc["passive"] != 17.0 || arc["ability"] != "int" {
		t.Fatalf("arcana: %v", arc)
	}
	if prc := d.Skills["prc"].(map[string]any); prc["passive"] != 11.0 || prc["total"] != 1.0 {
		t.Fatalf("perception: %v", prc)
	}
	if d.Stats["level"] != 5.0 || d.Stats["profBonus"] != 3.0 || d.Stats["ac"] != 12.0 || d.Stats["spellDC"] != 15.0 {
		t.Fatalf("stats: %v", d.Stats)
	}
	if len(d.SpellSlots) != 3 || d.SpellSlots["spell1"].(map[string]any)["value"] != 2.0 || d.SpellSlots["spell3"].(map[string]any)["max"] != 2.0 {
		t.Fatalf("slots: %v", d.SpellSlots)
	}
	if len(d.Spells) != 11 || len(d.Features) != 3 || len(d.Items) != 4 {
		t.Fatalf("%d spells, %d features, %d items", len(d.Spells), len(d.Features), len(d.Items))
	}
	if first := d.Items[0].(world.Document); len(first) != 11 {
		t.Fatalf("item source has %d keys: %v", len(first), first)
	}
	if res := d.Resources.(map[string]any)["primary"].(map[string]any); res["label"] != "Arcane Recovery" || res["lr"] != true {
		t.Fatalf("resources: %v", res)
	}
	if d.Info["class"] != "Wizard" || d.Info["race"] != "?" || d.Info["alignment"] != "Neutral Good" {
		t.Fatalf("details: %v", d.Info)
	}
	if len(d.Conditions) != 0 || d.Concentration["active"] != false {
		t.Fatalf("conditions: %v %v", d.Conditions, d.Concentration)
	}

	// Proficiency multipliers: half (rounded down), expertise; an equipped,
	// attuned Ring of Protection adds +1 to every save.
	f.set(aria, world.Document{"system.skills.ste.value": 0.5, "system.skills.inv.value": 2.0})
	f.set(ring, world.Document{"system.equipped": true, "system.attuned": true})
	d = must(f.rules.ActorDetails(f.ctx, f.e, nil, aria, []string{"skills", "abilities"}))(t)
	if ste := d.Skills["ste"].(map[string]any); ste["total"] != 3.0 { // dex +2, half of 3 rounded down = 1
		t.Fatalf("half proficiency: %v", ste)
	}
	if inv := d.Skills["inv"].(map[string]any); inv["total"] != 10.0 { // int +4, expertise 6
		t.Fatalf("expertise: %v", inv)
	}
	if s := d.Abilities["int"].(map[string]any)["save"]; s != 8.0 {
		t.Fatalf("save with ring: %v", s)
	}
	if d.Stats != nil {
		t.Fatal("stats returned without being asked for")
	}

	// Brom is a level 5 fighter; an NPC takes proficiency from its CR.
	d = must(f.rules.ActorDetails(f.ctx, f.e, nil, brom, []string{"skills", "stats"}))(t)
	if d.Skills["ath"].(map[string]any)["total"] != 7.0 || d.Stats["ac"] != 19.0 {
		t.Fatalf("brom: %v %v", d.Skills["ath"], d.Stats["ac"])
	}
	d = must(f.rules.ActorDetails(f.ctx, f.e, nil, goblin, []string{"stats"}))(t)
	if d.Stats["profBonus"] != 2.0 || d.Stats["level"] != 0.0 {
		t.Fatalf("goblin: %v", d.Stats)
	}

	_, err := f.rules.ActorDetails(f.ctx, f.e, nil, aria, nil)
	wantErr(t, err, world.ErrInvalid, "details array is required and cannot be empty")
	// NONE: the refusal does not name what Alice cannot see.
	_, err = f.rules.ActorDetails(f.ctx, f.e, f.user("Alice"), goblin, []string{"stats"})
	wantErr(t, err, world.ErrPermission, "User 'Alice' does not have permission to view this entity")
	_, err = f.rules.ActorDetails(f.ctx, f.e, nil, "Actor.nobody0000000001", []string{"stats"})
	wantErr(t, err, world.ErrNotFound, "Actor not found with UUID: Actor.nobody0000000001")
	// LIMITED shows a name and an image, not a sheet: Bob (LIMITED on
	// Aria) is refused by name; Alice (OBSERVER on Brom) reads his.
	_, err = f.rules.ActorDetails(f.ctx, f.e, f.user("Bob"), aria, []string{"stats"})
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to view actor 'Aria Vale'")
	must(f.rules.ActorDetails(f.ctx, f.e, f.user("Alice"), brom, []string{"stats"}))(t)
}

func TestChecks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	check := func(fn func() (RollResult, error), total int, formula, result string) {
		t.Helper()
		r, err := fn()
		if err != nil {
			t.Fatal(err)
		}
		if r.Total != total || r.Formula != formula || r.Result != result {
			t.Fatalf("got %d %q %q, want %d %q %q", r.Total, r.Formula, r.Result, total, formula, result)
		}
	}
	p := CheckParams{ActorUUID: aria, Skill: "arc", ChatMessage: true}
	f.roll(14)
	check(func() (RollResult, error) { return f.rules.SkillCheck(f.ctx, f.e, nil, p) }, 21, "1d20 + 4 + 3", "14 + 4 + 3")
	if f.chatCount() != 1 {
		t.Fatalf("%d chat messages", f.chatCount())
	}
	msg := f.chats()[0]
	if msg["flavor"] != "Arcana Skill Check" || msg["author"] != "gamemaster000001" || len(asList(msg["rolls"])) != 1 {
		t.Fatalf("chat message %v", msg)
	}

	// Advantage keeps the higher, disadvantage the lower, both cancel.
	p.Advantage = true
	f.roll(5, 15)
	check(func() (RollResult, error) { return f.rules.SkillCheck(f.ctx, f.e, nil, p) }, 22, "2d20kh + 4 + 3", "15 + 4 + 3")
	p.Advantage, p.Disadvantage = false, true
	f.roll(5, 15)
	check(func() (RollResult, error) { return f.rules.SkillCheck(f.ctx, f.e, nil, p) }, 12, "2d20kl + 4 + 3", "5 + 4 + 3")
	p.Advantage = true
	f.roll(5, 15)
	check(func() (RollResult, error) { return f.rules.SkillCheck(f.ctx, f.e, nil, p) }, 12, "1d20 + 4 + 3", "5 + 4 + 3")

	// A bonus formula, no chat message, a non-proficient skill with a
	// negative modifier.
	p = CheckParams{ActorUUID: aria, Skill: "ath", Bonus: "1d4 + 1"}
	f.roll(10, 3)
	check(func() (RollResult, error) { return f.rules.SkillCheck(f.ctx, f.e, f.user("Alice"), p) }, 13, "1d20 - 1 + 1d4 + 1", "10 - 1 + 3 + 1")
	if f.chatCount() != 4 {
		t.Fatalf("createChatMessage false still posted: %d messages", f.chatCount())
	}

	// Saves and raw checks.
	f.roll(9)
	check(func() (RollResult, error) {
		return f.rules.AbilitySave(f.ctx, f.e, nil, CheckParams{ActorUUID: brom, Ability: "con"})
	}, 15, "1d20 + 3 + 3", "9 + 3 + 3")
	f.roll(9)
	check(func() (RollResult, error) {
		return f.rules.AbilityCheck(f.ctx, f.e, nil, CheckParams{ActorUUID: brom, Ability: "con"})
	}, 12, "1d20 + 3", "9 + 3")

	// Every skill and ability is known.
	for _, s := range skillKeys {
		must(f.rules.SkillCheck(f.ctx, f.e, nil, CheckParams{ActorUUID: brom, Skill: s}))(t)
	}
	_, err := f.rules.SkillCheck(f.ctx, f.e, nil, CheckParams{ActorUUID: brom, Skill: "xyz"})
	wantErr(t, err, world.ErrInvalid, "Invalid skill 'xyz'. Valid skills: acr, ani, arc, ath, dec, his, ins, itm, inv, med, nat, prc, prf, per, rel, slt, ste, sur")
	_, err = f.rules.AbilitySave(f.ctx, f.e, nil, CheckParams{ActorUUID: brom, Ability: "luck"})
	wantErr(t, err, world.ErrInvalid, "Invalid ability 'luck'. Valid abilities: str, dex, con, int, wis, cha")
	_, err = f.rules.SkillCheck(f.ctx, f.e, nil, CheckParams{ActorUUID: brom, Skill: "ath", Bonus: "1d20 +"})
	wantErr(t, err, world.ErrInvalid, "position 7")
	_, err = f.rules.SkillCheck(f.ctx, f.e, nil, CheckParams{ActorUUID: brom, Skill: "ath", Bonus: "10000d10000"})
	wantErr(t, err, world.ErrInvalid, "at most 1000 dice")
	_, err = f.rules.AbilityCheck(f.ctx, f.e, f.user("Bob"), CheckParams{ActorUUID: goblin, Ability: "str"})
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to view this entity")
	_, err = f.rules.SkillCheck(f.ctx, f.e, f.user("Bob"), CheckParams{ActorUUID: aria, Skill: "arc"})
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to view actor 'Aria Vale'")
}

func TestDeathSaves(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := DeathSaveParams{ActorUUID: aria}
	_, err := f.rules.DeathSave(f.ctx, f.e, nil, p)
	wantErr(t, err, world.ErrFailedPrecondition, "not at 0 hit points")

	f.set(aria, world.Document{"system.attributes.hp.value": 0.0})
	save := func(roll int) DeathSaveResult {
		t.Helper()
		f.roll(roll)
		return must(f.rules.DeathSave(f.ctx, f.e, nil, p))(t)
	}
	// A natural 20 restores 1 hit point and clears the counters.
	f.set(aria, world.Document{"system.attributes.death.success": 2.0, "system.attributes.death.failure": 2.0})
	r := save(20)
	if !r.Stable || r.Successes != 0 || r.Failures != 0 || f.value(aria, "system.attributes.hp.value") != 1.0 {
		t.Fatalf("natural 20: %+v hp %v", r, f.value(aria, "system.attributes.hp.value"))
	}

	// A natural 1 counts two failures; counters stop at three.
	f.set(aria, world.Document{"system.attributes.hp.value": 0.0})
	r = save(1)
	if r.Failures != 2 || r.Successes != 0 || r.Dead || r.Total != 1 {
		t.Fatalf("natural 1: %+v", r)
	}
	r = save(1)
	if r.Failures != 3 || !r.Dead {
		t.Fatalf("second natural 1: %+v", r)
	}
	if f.value(aria, "system.attributes.death.failure") != 3.0 {
		t.Fatal("failures not stored")
	}
	_, err = f.rules.DeathSave(f.ctx, f.e, nil, p)
	wantErr(t, err, world.ErrFailedPrecondition, "is dead")

	// Three successes stabilise and clear the counters; 9 fails, 10 succeeds.
	f.set(aria, world.Document{"system.attributes.death.failure": 0.0})
	if r = save(9); r.Success || r.Failures != 1 {
		t.Fatalf("9: %+v", r)
	}
	for i, want := range []int{1, 2, 0} {
		r = save(10)
		if !r.Success || r.Successes != want || (i == 2) != r.Stable {
			t.Fatalf("success %d: %+v", i+1, r)
		}
	}
	if r.Failures != 0 || f.value(aria, "system.attributes.hp.value") != 0.0 {
		t.Fatalf("stable: %+v", r)
	}

	// Advantage; writes need OWNER.
	f.roll(3, 18)
	r = must(f.rules.DeathSave(f.ctx, f.e, f.user("Alice"), DeathSaveParams{ActorUUID: aria, Advantage: true}))(t)
	if r.Formula != "2d20kh" || r.Total != 18 {
		t.Fatalf("advantage: %+v", r)
	}
	_, err = f.rules.DeathSave(f.ctx, f.e, f.user("Bob"), p)
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to roll death saves for 'Aria Vale'")
}

func TestConcentration(t *testing.T) {
	t.Parallel()
	for damage, dc := range map[float64]int{0: 10, 19: 10, 20: 10, 21: 10, 22: 11, 100: 50} {
		if got := ConcentrationDC(damage); got != dc {
			t.Errorf("DC for %v damage = %d, want %d", damage, got, dc)
		}
	}
	f := newFixture(t)
	c := must(f.rules.GetConcentration(f.ctx, f.e, nil, ActorRef{Name: "aria vale"}))(t)
	if c.IsConcentrating || c.ActorUUID != aria {
		t.Fatalf("%+v", c)
	}
	_, _, err := f.rules.BreakConcentration(f.ctx, f.e, nil, ActorRef{UUID: aria})
	wantErr(t, err, world.ErrFailedPrecondition, "Actor 'Aria Vale' is not concentrating")
	_, err = f.rules.ConcentrationSave(f.ctx, f.e, nil, ConcentrationSaveParams{Actor: ActorRef{UUID: aria}, Damage: 10})
	wantErr(t, err, world.ErrFailedPrecondition, "is not concentrating")

	// Casting Hold Person starts concentration; Fly replaces it.
	f.roll(10)
	must(f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "hold person"}}))(t)
	_, err = f.rules.GetConcentration(f.ctx, f.e, f.user("Bob"), ActorRef{UUID: aria})
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to view actor 'Aria Vale'")
	c = must(f.rules.GetConcentration(f.ctx, f.e, f.user("Bob"), ActorRef{UUID: brom}))(t)
	if c.IsConcentrating {
		t.Fatalf("%+v", c)
	}
	c = must(f.rules.GetConcentration(f.ctx, f.e, f.user("Alice"), ActorRef{UUID: aria}))(t)
	if !c.IsConcentrating || c.Spell != "Hold Person" || c.Effect["origin"] != holdPers {
		t.Fatalf("%+v", c)
	}
	must(f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "Fly"}}))(t)
	if effects := asList(f.get(aria)["effects"]); len(effects) != 1 {
		t.Fatalf("%d effects after a second concentration spell", len(effects))
	}
	c = must(f.rules.GetConcentration(f.ctx, f.e, nil, ActorRef{UUID: aria}))(t)
	if c.Spell != "Fly" {
		t.Fatalf("concentrating on %q", c.Spell)
	}

	// DC 15 after 30 damage: con +2, no proficiency. 13 + 2 holds, 12 + 2 fails.
	p := ConcentrationSaveParams{Actor: ActorRef{UUID: aria}, Damage: 30, ChatMessage: true}
	f.roll(13)
	s := must(f.rules.ConcentrationSave(f.ctx, f.e, f.user("Alice"), p))(t)
	if !s.Maintained || s.DC != 15 || s.Total != 15 || s.Formula != "1d20 + 2" {
		t.Fatalf("%+v", s)
	}
	_, err = f.rules.ConcentrationSave(f.ctx, f.e, f.user("Bob"), p)
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to roll concentration saves for 'Aria Vale'")
	f.roll(12)
	s = must(f.rules.ConcentrationSave(f.ctx, f.e, nil, p))(t)
	if s.Maintained || s.RemovedEffectID == "" {
		t.Fatalf("%+v", s)
	}
	if c = must(f.rules.GetConcentration(f.ctx, f.e, nil, ActorRef{UUID: aria}))(t); c.IsConcentrating {
		t.Fatal("a failed save left concentration")
	}

	// Break.
	f.set(aria, world.Document{"system.spells.spell3.value": 2.0})
	must(f.rules.Use(f.ctx, f.e, nil, UseParams{Kind: UseSpell, ActorUUID: aria, Ability: ItemRef{Name: "Fly"}}))(t)
	_, _, err = f.rules.BreakConcentration(f.ctx, f.e, f.user("Bob"), ActorRef{UUID: aria})
	wantErr(t, err, world.ErrPermission, "break concentration on 'Aria Vale'")
	actor, removed, err := f.rules.BreakConcentration(f.ctx, f.e, f.user("Alice"), ActorRef{UUID: aria})
	if err != nil || actor != aria || removed == "" {
		t.Fatalf("break: %v %v %v", actor, removed, err)
	}
	_, err = f.rules.ConcentrationSave(f.ctx, f.e, nil, ConcentrationSaveParams{Actor: ActorRef{UUID: aria}, Damage: -1})
	wantErr(t, err, world.ErrInvalid, "damage")
}
