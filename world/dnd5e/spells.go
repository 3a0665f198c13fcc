package dnd5e

import (
	"context"
	"math"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
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

// spellPrepared reports whether a spell is prepared: `system.prepared` 1
// (or 2, always) in the current form, `system.preparation.prepared` in the
// older one.
func spellPrepared(spell world.Document) bool {
	if p, ok := num(at(spell, "system.prepared")); ok {
		return p >= 1
	}
	return at(spell, "system.preparation.prepared") == true
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

// checkPreparedLimit refuses preparing one more spell of a class that has
// as many prepared as its preparation formula allows (SRD 5.1: a wizard
// prepares INT modifier + wizard level spells, at least one; the system
// reads the class's `spellcasting.preparation.formula`).
func checkPreparedLimit(a *actor, caster world.Document) error {
	formula := str(at(caster, "system.spellcasting.preparation.formula"))
	r, err := a.evaluate(formula, dice.NewSequence())
	if err != nil {
		return diceError(str(caster["name"])+" preparation formula", err)
	}
	if err := a.refused(); err != nil {
		return err
	}
	limit := max(1, int(math.Floor(r.Total)))
	id := str(at(caster, "system.identifier"))
	count := 0
	for _, it := range a.items {
		if str(it["type"]) != "spell" || spellLevel(it) == 0 || spellMethod(it) != "spell" || !spellPrepared(it) {
			continue
		}
		if src := str(at(it, "system.sourceClass")); src != "" && !strings.EqualFold(src, id) {
			continue
		}
		count++
	}
	if count >= limit {
		return world.Errorf(world.ErrFailedPrecondition, "%s can prepare at most %d %s spells and has %d prepared: unprepare one first",
			a.name(), limit, str(caster["name"]), count)
	}
	return nil
}

// PrepareSpell prepares or unprepares a spell. Only spells of classes that
// prepare spells can be, never cantrips or always-prepared spells, and no
// more than the class's limit (see checkPreparedLimit).
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
		a := deriveFor(v, user, uuid, doc)
		caster, reason := preparingClass(a, spell)
		if reason != "" {
			return world.Errorf(world.ErrFailedPrecondition, "%s", reason)
		}
		if prepared && !spellPrepared(spell) {
			if err := checkPreparedLimit(a, caster); err != nil {
				return err
			}
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
