package dnd5e

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// validSkills lists the skills in an error message.
var validSkills = strings.Join(skillKeys, ", ")

// validAbilities lists the abilities in an error message.
var validAbilities = strings.Join(abilityKeys, ", ")

// checkSkill validates a skill abbreviation.
func checkSkill(skill string) error {
	if skill == "" {
		return world.Errorf(world.ErrInvalid, "skill is required")
	}
	if _, ok := skillAbility[skill]; !ok {
		return world.Errorf(world.ErrInvalid, "Invalid skill '%s'. Valid skills: %s", skill, validSkills)
	}
	return nil
}

// checkAbility validates an ability abbreviation.
func checkAbility(ability string) error {
	if ability == "" {
		return world.Errorf(world.ErrInvalid, "ability is required")
	}
	if !slices.Contains(abilityKeys, ability) {
		return world.Errorf(world.ErrInvalid, "Invalid ability '%s'. Valid abilities: %s", ability, validAbilities)
	}
	return nil
}

// checkBonus validates an extra bonus formula.
func checkBonus(bonus string) error {
	if strings.TrimSpace(bonus) == "" {
		return nil
	}
	if _, err := dice.Parse(bonus); err != nil {
		return diceError("bonus", err)
	}
	return nil
}

// SkillCheck rolls a skill check: d20 (2d20kh with advantage, 2d20kl with
// disadvantage) + the ability modifier + the skill's proficiency (0, half
// rounded down, full or double) + the actor's check bonuses + Bonus.
func (r *Rules) SkillCheck(ctx context.Context, e *world.Engine, user *world.User, p CheckParams) (RollResult, error) {
	if p.ActorUUID == "" {
		return RollResult{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	if err := checkSkill(p.Skill); err != nil {
		return RollResult{}, err
	}
	return r.d20Read(ctx, e, user, p, func(a *actor) ([]string, rollSpec, string, map[string]any) {
		s := a.skill(p.Skill)
		parts := []string{strconv.Itoa(s.mod)}
		if s.profBonus != 0 {
			parts = append(parts, strconv.Itoa(s.profBonus))
		}
		return append(parts, s.bonuses...), rollSpec{kind: rollCheck, ability: s.ability, skill: p.Skill}, skillLabel(p.Skill) + " Skill Check",
			map[string]any{"type": "skill", "skillId": p.Skill, "abilityId": s.ability}
	})
}

// AbilitySave rolls a saving throw: d20 + modifier + proficiency when
// proficient + save bonuses + Bonus.
func (r *Rules) AbilitySave(ctx context.Context, e *world.Engine, user *world.User, p CheckParams) (RollResult, error) {
	if p.ActorUUID == "" {
		return RollResult{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	if err := checkAbility(p.Ability); err != nil {
		return RollResult{}, err
	}
	return r.d20Read(ctx, e, user, p, func(a *actor) ([]string, rollSpec, string, map[string]any) {
		return saveParts(a, p.Ability), rollSpec{kind: rollSave, ability: p.Ability}, abilityLabel(p.Ability) + " Saving Throw",
			map[string]any{"type": "save", "abilityId": p.Ability}
	})
}

// AbilityCheck rolls a raw ability check: d20 + modifier (+ half
// proficiency with Jack of All Trades) + check bonuses + Bonus.
func (r *Rules) AbilityCheck(ctx context.Context, e *world.Engine, user *world.User, p CheckParams) (RollResult, error) {
	if p.ActorUUID == "" {
		return RollResult{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	if err := checkAbility(p.Ability); err != nil {
		return RollResult{}, err
	}
	return r.d20Read(ctx, e, user, p, func(a *actor) ([]string, rollSpec, string, map[string]any) {
		parts := []string{strconv.Itoa(a.mods[p.Ability])}
		if a.jackOfAllTrades() {
			if half := a.profContribution(0.5); half != 0 {
				parts = append(parts, strconv.Itoa(half))
			}
		}
		parts = append(parts, nonEmpty(
			str(at(a.system, "abilities."+p.Ability+".bonuses.check")),
			str(at(a.system, "bonuses.abilities.check")))...)
		return parts, rollSpec{kind: rollCheck, ability: p.Ability}, abilityLabel(p.Ability) + " Ability Check",
			map[string]any{"type": "ability", "abilityId": p.Ability}
	})
}

// saveParts are the terms of a saving throw after the d20.
func saveParts(a *actor, ability string) []string {
	s := a.save(ability)
	parts := []string{strconv.Itoa(s.mod)}
	if s.profBonus != 0 {
		parts = append(parts, strconv.Itoa(s.profBonus))
	}
	return append(parts, s.bonuses...)
}

// d20Read runs a check that needs OBSERVER on the actor (its result shows
// the actor's modifiers, which LIMITED does not): it reads,
// rolls, and writes nothing but the chat message (in one transaction).
func (r *Rules) d20Read(ctx context.Context, e *world.Engine, user *world.User, p CheckParams,
	build func(*actor) (parts []string, spec rollSpec, flavor string, flags map[string]any)) (RollResult, error) {
	if err := checkBonus(p.Bonus); err != nil {
		return RollResult{}, err
	}
	var by string
	if p.ChatMessage {
		by = author(ctx, e, user)
	}
	var res RollResult
	roll := func(v *world.View, tx *world.Tx) error {
		uuid, doc, err := actorByUUID(v, p.ActorUUID)
		if err != nil {
			return err
		}
		if err := requireView(v, user, uuid); err != nil {
			return err
		}
		a := deriveFor(v, user, uuid, doc)
		parts, spec, flavor, flags := build(a)
		mode := a.rollMode(spec, p.Advantage, p.Disadvantage)
		roll, err := r.d20(a, mode, parts, p.Bonus)
		if err != nil {
			return err
		}
		if err := a.refused(); err != nil {
			return err
		}
		res = rollResult(uuid, roll, mode)
		if tx == nil {
			return nil
		}
		modeFlags(flags, mode)
		return post(tx, message{author: by, actor: a, flavor: flavor, class: "D20Roll", rolls: []dice.Result{roll}, flags: map[string]any{"roll": flags}})
	}
	var err error
	if p.ChatMessage {
		err = e.Mutate(ctx, func(tx *world.Tx) error { return roll(tx.View(), tx) })
	} else {
		// Without a chat message nothing is written: a read suffices and
		// does not wait for the world's writer.
		err = e.View(ctx, func(v *world.View) error { return roll(v, nil) })
	}
	if err != nil {
		return RollResult{}, err
	}
	return res, nil
}

// d20 rolls a d20 test in a mode with the given terms and an extra bonus.
func (r *Rules) d20(a *actor, mode RollMode, parts []string, bonus string) (dice.Result, error) {
	terms := append([]string{dice.Check(sign(mode) > 0, sign(mode) < 0)}, parts...)
	if strings.TrimSpace(bonus) != "" {
		terms = append(terms, bonus)
	}
	roll, err := a.evaluate(strings.Join(terms, " + "), r.dice)
	if err != nil {
		return dice.Result{}, diceError("roll", err)
	}
	return roll, nil
}

// rollResult is a roll as an operation returns it.
func rollResult(uuid string, roll dice.Result, mode RollMode) RollResult {
	return RollResult{ActorUUID: uuid, Total: int(math.Floor(roll.Total)), Formula: roll.Formula, Result: roll.Result, Roll: roll, Mode: mode}
}

// withMode returns roll flags with the roll's mode recorded.
func withMode(flags map[string]any, mode RollMode) map[string]any {
	modeFlags(flags, mode)
	return flags
}

// modeFlags records a roll's mode in its chat message's roll flags.
func modeFlags(flags map[string]any, mode RollMode) {
	flags["advantage"], flags["disadvantage"] = sign(mode) > 0, sign(mode) < 0
	flags["advantageMode"] = float64(sign(mode))
}

// skillLabels and abilityLabels name skills and abilities in chat.
var (
	skillLabels = map[string]string{
		"acr": "Acrobatics", "ani": "Animal Handling", "arc": "Arcana", "ath": "Athletics", "dec": "Deception",
		"his": "History", "ins": "Insight", "itm": "Intimidation", "inv": "Investigation", "med": "Medicine",
		"nat": "Nature", "prc": "Perception", "prf": "Performance", "per": "Persuasion", "rel": "Religion",
		"slt": "Sleight of Hand", "ste": "Stealth", "sur": "Survival",
	}
	abilityLabels = map[string]string{
		"str": "Strength", "dex": "Dexterity", "con": "Constitution", "int": "Intelligence", "wis": "Wisdom", "cha": "Charisma",
	}
)

func skillLabel(s string) string   { return skillLabels[s] }
func abilityLabel(a string) string { return abilityLabels[a] }
