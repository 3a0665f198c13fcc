package dnd5e

import (
	"context"
	"math"
	"slices"
	"strconv"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// The concentration effect, as the system creates it.
const (
	concentratingStatus = "concentrating"
	concentratingIcon   = "systems/dnd5e/icons/svg/statuses/concentrating.svg"
)

// concentrationEffect returns the actor's first effect marking
// concentration (status `concentrating`, or `concentration` as some
// modules name it), or nil.
func concentrationEffect(actor world.Document) world.Document {
	for _, e := range asList(actor["effects"]) {
		if eff := obj(e); isConcentration(eff) {
			return eff
		}
	}
	return nil
}

// isConcentration reports whether an active effect is a concentration
// effect: one whose statuses include `concentrating` (or `concentration`).
func isConcentration(eff world.Document) bool {
	if eff == nil {
		return false
	}
	for _, s := range asList(eff["statuses"]) {
		if s == concentratingStatus || s == "concentration" {
			return true
		}
	}
	return false
}

// GetConcentration tells whether an actor is concentrating and on what.
// The user needs OBSERVER on the actor; the spell is named only when the
// user may see the document the effect comes from.
func (r *Rules) GetConcentration(ctx context.Context, e *world.Engine, user *world.User, ref ActorRef) (Concentration, error) {
	var out Concentration
	err := e.View(ctx, func(v *world.View) error {
		uuid, doc, err := resolveActor(ctx, e, v, user, ref)
		if err != nil {
			return err
		}
		if err := requireView(v, user, uuid); err != nil {
			return err
		}
		out.ActorUUID = uuid
		eff := concentrationEffect(doc)
		if eff == nil {
			return nil
		}
		out.IsConcentrating = true
		img := eff["img"]
		if img == nil {
			img = eff["icon"]
		}
		origin := eff["origin"]
		out.Effect = map[string]any{
			"id": eff["_id"], "uuid": uuid + ".ActiveEffect." + str(eff["_id"]), "name": eff["name"], "icon": img,
			"statuses": world.Clone(world.Document{"s": eff["statuses"]})["s"], "origin": origin,
		}
		if o := str(origin); o != "" && v.CanSee(user, o) {
			if src, err := v.Get(o); err == nil {
				out.Spell = str(src["name"])
			}
		}
		return nil
	})
	if err != nil {
		return Concentration{}, err
	}
	return out, nil
}

// BreakConcentration ends an actor's concentration by deleting its
// concentration effect; an actor that is not concentrating is an error.
// It returns the actor's uuid and the removed effect's id.
func (r *Rules) BreakConcentration(ctx context.Context, e *world.Engine, user *world.User, ref ActorRef) (string, string, error) {
	var actorUUID, removed string
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, _, eff, err := ownedConcentratingActor(ctx, e, v, user, ref, "break concentration on")
		if err != nil {
			return err
		}
		actorUUID, removed = uuid, str(eff["_id"])
		return tx.Delete(uuid + ".ActiveEffect." + removed)
	})
	return actorUUID, removed, err
}

// ConcentrationDC is the DC of a concentration save after damage:
// max(10, floor(damage / 2)).
func ConcentrationDC(damage float64) int {
	return max(10, int(math.Floor(damage/2)))
}

// ConcentrationSave rolls a concentration save after damage: a
// constitution saving throw (or the actor's concentration ability) with
// the save bonuses and the actor's concentration bonus, against
// [ConcentrationDC]. A failed save removes the concentration effect.
func (r *Rules) ConcentrationSave(ctx context.Context, e *world.Engine, user *world.User, p ConcentrationSaveParams) (ConcentrationSaveResult, error) {
	if math.IsNaN(p.Damage) || math.IsInf(p.Damage, 0) || p.Damage < 0 {
		return ConcentrationSaveResult{}, world.Errorf(world.ErrInvalid, "damage must be a number of at least 0")
	}
	if err := checkBonus(p.Bonus); err != nil {
		return ConcentrationSaveResult{}, err
	}
	var by string
	if p.ChatMessage {
		by = author(ctx, e, user)
	}
	var out ConcentrationSaveResult
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, eff, err := ownedConcentratingActor(ctx, e, v, user, p.Actor, "roll concentration saves for")
		if err != nil {
			return err
		}
		a := deriveFor(v, user, uuid, doc)
		ability := str(at(a.system, "attributes.concentration.ability"))
		if !slices.Contains(abilityKeys, ability) {
			ability = "con"
		}
		parts := append(saveParts(a, ability), nonEmpty(str(at(a.system, "attributes.concentration.bonuses.save")))...)
		mode := a.rollMode(rollSpec{kind: rollSave, ability: ability, extra: "attributes.concentration"}, p.Advantage, p.Disadvantage)
		roll, err := r.d20(a, mode, parts, p.Bonus)
		if err != nil {
			return err
		}
		if err := a.refused(); err != nil {
			return err
		}
		out.RollResult = rollResult(uuid, roll, mode)
		out.DC = ConcentrationDC(p.Damage)
		out.Maintained = out.Total >= out.DC
		if !out.Maintained {
			out.RemovedEffectID = str(eff["_id"])
			if err := tx.Delete(uuid + ".ActiveEffect." + out.RemovedEffectID); err != nil {
				return err
			}
		}
		if !p.ChatMessage {
			return nil
		}
		outcome := "maintained"
		if !out.Maintained {
			outcome = "lost"
		}
		return post(tx, message{
			author: by, actor: a, class: "D20Roll", rolls: []dice.Result{roll},
			flavor:  "Concentration Saving Throw (DC " + strconv.Itoa(out.DC) + ")",
			content: strconv.Itoa(out.Total) + ": concentration " + outcome,
			flags:   map[string]any{"roll": withMode(map[string]any{"type": "concentration", "abilityId": ability, "dc": float64(out.DC)}, mode)},
		})
	})
	if err != nil {
		return ConcentrationSaveResult{}, err
	}
	return out, nil
}

// startConcentration ends any concentration of the actor and starts it on
// a spell.
func startConcentration(tx *world.Tx, actorUUID string, actor world.Document, spell world.Document) error {
	for _, e := range asList(actor["effects"]) {
		if eff := obj(e); isConcentration(eff) {
			if err := tx.Delete(actorUUID + ".ActiveEffect." + str(eff["_id"])); err != nil {
				return err
			}
		}
	}
	_, err := tx.Create("ActiveEffect", actorUUID, world.Document{
		"name":        "Concentrating",
		"img":         concentratingIcon,
		"type":        "base",
		"system":      map[string]any{},
		"changes":     []any{},
		"disabled":    false,
		"transfer":    false,
		"statuses":    []any{concentratingStatus},
		"origin":      itemUUID(actorUUID, spell),
		"description": "Concentrating on " + str(spell["name"]),
		"duration":    map[string]any{"startTime": float64(tx.Now().Unix())},
		"flags":       map[string]any{"dnd5e": map[string]any{"item": map[string]any{"id": spell["_id"], "type": spell["type"]}}},
	})
	return err
}

// ownedConcentratingActor finds the actor of ref, checks that the user owns
// it (operation names the refused action in the permission error) and returns
// its concentration effect; an actor that is not concentrating is a failed
// precondition.
func ownedConcentratingActor(ctx context.Context, e *world.Engine, v *world.View, user *world.User, ref ActorRef, operation string) (uuid string, doc, effect world.Document, err error) {
	uuid, doc, err = resolveActor(ctx, e, v, user, ref)
	if err != nil {
		return "", nil, nil, err
	}
	if err := v.RequireOwner(user, uuid, operation); err != nil {
		return "", nil, nil, err
	}
	effect = concentrationEffect(doc)
	if effect == nil {
		return "", nil, nil, world.Errorf(world.ErrFailedPrecondition, "Actor '%s' is not concentrating", str(doc["name"]))
	}
	return uuid, doc, effect, nil
}
