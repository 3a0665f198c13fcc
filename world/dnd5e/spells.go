package dnd5e

import (
	"context"
	"strings"

	"relay/world"
)

// spellMethod is how a spell is cast: `spell` (prepared from a class),
// `always`, `pact`, `innate`, `atwill`, `ritual`... from the current
// `system.method`/`system.prepared` fields or the older
// `system.preparation.mode`.
func spellMethod(spell world.Document) string {
	sys := obj(spell["system"])
	if m := str(sys["method"]); m != "" {
		if m == "spell" && numOr(sys["prepared"], 0) == 2 {
			return "always"
		}
		return m
	}
	switch mode := str(at(sys, "preparation.mode")); mode {
	case "prepared", "":
		return "spell"
	default:
		return mode
	}
}

// spellLevel is a spell's level; 0 is a cantrip.
func spellLevel(spell world.Document) int { return int(numOr(at(spell, "system.level"), 0)) }

// preparingClass returns the class item that casts a spell, when it is one
// that prepares its spells (a class with a preparation formula: wizards,
// clerics, druids, paladins, artificers), else a reason.
func preparingClass(a *actor, spell world.Document) (world.Document, string) {
	source := str(at(spell, "system.sourceClass"))
	var caster world.Document
	for _, it := range a.items {
		if str(it["type"]) != "class" {
			continue
		}
		if source != "" && !strings.EqualFold(str(at(it, "system.identifier")), source) {
			continue
		}
		if p := str(at(it, "system.spellcasting.progression")); p == "" || p == "none" {
			continue
		}
		caster = it
		break
	}
	if caster == nil {
		return nil, a.name() + " has no spellcasting class that casts " + str(spell["name"])
	}
	if strings.TrimSpace(str(at(caster, "system.spellcasting.preparation.formula"))) == "" {
		return nil, "The " + str(caster["name"]) + " class does not prepare spells"
	}
	return caster, ""
}

// PrepareSpell prepares or unprepares a spell. Only spells of classes that
// prepare spells can be, never cantrips or always-prepared spells.
func (r *Rules) PrepareSpell(ctx context.Context, e *world.Engine, user *world.User, actorUUID, spellName string, prepared bool) (PrepareResult, error) {
	if actorUUID == "" {
		return PrepareResult{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	if spellName == "" {
		return PrepareResult{}, world.Errorf(world.ErrInvalid, "spellName is required")
	}
	var out PrepareResult
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, err := actorByUUID(v, actorUUID)
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, uuid, "prepare spells on"); err != nil {
			return err
		}
		var spell world.Document
		for _, it := range items(doc) {
			if str(it["type"]) == "spell" && strings.EqualFold(str(it["name"]), spellName) {
				spell = it
				break
			}
		}
		if spell == nil {
			return world.Errorf(world.ErrNotFound, "Spell not found: %s", spellName)
		}
		name := str(spell["name"])
		switch method := spellMethod(spell); {
		case spellLevel(spell) == 0:
			return world.Errorf(world.ErrFailedPrecondition, "%s is a cantrip: cantrips are always prepared", name)
		case method == "always":
			return world.Errorf(world.ErrFailedPrecondition, "%s is always prepared", name)
		case method != "spell":
			return world.Errorf(world.ErrFailedPrecondition, "%s is cast as %s and is not prepared", name, method)
		}
		if _, reason := preparingClass(deriveFor(v, user, uuid, doc), spell); reason != "" {
			return world.Errorf(world.ErrFailedPrecondition, "%s", reason)
		}
		change := world.Document{"system.prepared": 0.0}
		if prepared {
			change["system.prepared"] = 1.0
		}
		if obj(at(spell, "system.preparation")) != nil {
			change["system.preparation.prepared"] = prepared
		}
		out = PrepareResult{ActorUUID: uuid, SpellUUID: itemUUID(uuid, spell), SpellName: name, Prepared: prepared}
		_, err = tx.Update(out.SpellUUID, change)
		return err
	})
	if err != nil {
		return PrepareResult{}, err
	}
	return out, nil
}
