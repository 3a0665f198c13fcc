package world

import (
	"context"
	"math"
	"slices"
)

// ModifyAttribute adds delta to the number at a dotted attribute path of a
// document (`system.attributes.hp.value`): the increase and decrease
// operations. The world clamps nothing itself, but the write passes the
// system's rules like any update (a fifth-edition actor's hit points stop
// at 0, integers round; see systemRules), and NewValue is the value
// stored. The user needs OWNER; the permission error names
// the operation by the sign of delta ("increase attribute on", "decrease
// attribute on"). A value that is not a number is ErrInvalid
// `Attribute <path> is not a number, found: <type>`.
func (e *Engine) ModifyAttribute(ctx context.Context, user *User, uuid, attribute string, delta float64) (AttributeChange, error) {
	if uuid == "" {
		return AttributeChange{}, Errorf(ErrInvalid, "'uuid' is required")
	}
	if attribute == "" {
		return AttributeChange{}, Errorf(ErrInvalid, "'attribute' is required")
	}
	if math.IsNaN(delta) || math.IsInf(delta, 0) {
		return AttributeChange{}, Errorf(ErrInvalid, "'amount' must be a number")
	}
	operation := "increase attribute on"
	if delta < 0 {
		operation = "decrease attribute on"
	}
	res := AttributeChange{UUID: uuid, Attribute: attribute}
	err := e.Mutate(ctx, func(tx *Tx) error {
		v := tx.View()
		r, top, doc, err := v.find(uuid)
		if err != nil {
			return err
		}
		if err := v.requireOwner(user, r, top, doc, operation); err != nil {
			return err
		}
		if !user.IsGM() && topField(attribute) == "ownership" {
			return errNoWrite(user, "change the ownership of", r.uuid, doc)
		}
		value, present := Property(doc, attribute)
		old, ok := number(value)
		if !ok {
			return Errorf(ErrInvalid, "Attribute %s is not a number, found: %s", attribute, jsTypeOf(value, present))
		}
		res.OldValue, res.NewValue = old, old+delta
		next, err := tx.update(uuid, Document{attribute: res.NewValue})
		if err != nil {
			return err
		}
		// The system's rules may have cleaned the value (hit points stop
		// at 0): report what is stored.
		if stored, ok := number(propertyOr(next, attribute)); ok {
			res.NewValue = stored
		}
		return tx.before().checkWrite(user, r, doc, next)
	})
	if err != nil {
		return AttributeChange{}, err
	}
	return res, nil
}

// The status effect kill applies.
const (
	deadStatus = "dead"
	deadName   = "Dead"
	deadIcon   = "icons/svg/skull.svg"
)

// Kill marks an actor or a token defeated. It sets, never toggles, so a
// second kill changes nothing and still succeeds:
//
//   - the hit points (`system.attributes.hp.value`, when the actor has
//     `system.attributes.hp`) become 0;
//   - a "Dead" ActiveEffect with `statuses: ["dead"]` is added unless one
//     with that status is there already;
//   - the combatants of that actor (for a token: of that token) in every
//     Combat get `defeated: true`.
//
// A token linked to its actor (`actorLink: true`) kills the actor. An
// unlinked token is a copy of its actor with its own changes in `delta`, as
// in the tabletop: its hit points and the effect go into the token's
// `delta`, leaving the actor (and the other tokens made from it) alone. The
// user needs OWNER on what changes: the actor or token, and a linked
// token's actor.
func (e *Engine) Kill(ctx context.Context, user *User, uuid string) (KillResult, error) {
	if uuid == "" {
		return KillResult{}, Errorf(ErrInvalid, "'uuid' is required")
	}
	res := KillResult{UUID: uuid}
	err := e.Mutate(ctx, func(tx *Tx) error {
		v := tx.View()
		r, top, doc, err := v.find(uuid)
		if err != nil {
			return err
		}
		if r.typ() != typeActor && r.typ() != typeToken {
			return Errorf(ErrInvalid, "Cannot mark entity type %s as defeated", r.typ().name)
		}
		if err := v.requireOwner(user, r, top, doc, "kill"); err != nil {
			return err
		}
		if r.typ() == typeActor {
			res.Message = "Actor marked as defeated, HP set to 0, and dead effect applied"
			if err := killActor(tx, r, doc); err != nil {
				return err
			}
			return markDefeated(tx, func(c Document) bool { return c["actorId"] == r.id() })
		}

		res.Message = "Token marked as defeated, HP set to 0, and dead effect applied"
		actorID := str(doc["actorId"])
		actorRef, actorTop, actor, err := v.find(typeActor.name + "." + actorID)
		if actorID == "" || err != nil {
			return Errorf(ErrFailedPrecondition, "Token has no associated actor")
		}
		sceneID := r.segs[0].id
		ofToken := func(c Document) bool {
			return c["tokenId"] == r.id() && (c["sceneId"] == nil || c["sceneId"] == sceneID)
		}
		if doc["actorLink"] != true {
			if err := killUnlinkedToken(tx, r, doc, actor); err != nil {
				return err
			}
			return markDefeated(tx, ofToken)
		}
		if err := v.requireOwner(user, actorRef, actorTop, actor, "kill"); err != nil {
			return err
		}
		if err := killActor(tx, actorRef, actor); err != nil {
			return err
		}
		return markDefeated(tx, func(c Document) bool { return ofToken(c) || c["actorId"] == actorID })
	})
	if err != nil {
		return KillResult{}, err
	}
	return res, nil
}

// killActor sets an actor's hit points to 0 and adds the dead effect.
func killActor(tx *Tx, actor ref, doc Document) error {
	if hp, ok := Property(doc, "system.attributes.hp"); ok {
		if hp, ok := hp.(map[string]any); ok && hp["value"] != 0.0 {
			if _, err := tx.update(actor.uuid, Document{"system.attributes.hp.value": 0.0}); err != nil {
				return err
			}
		}
	}
	if hasStatus(docsOf(doc, actorEffects.key), deadStatus) {
		return nil
	}
	_, err := tx.Create(typeActiveEffect.name, actor.uuid, deadEffect())
	return err
}

// killUnlinkedToken writes the hit points and the dead effect into an
// unlinked token's `delta`.
func killUnlinkedToken(tx *Tx, token ref, doc, actor Document) error {
	delta, _ := doc["delta"].(map[string]any)
	diff := Document{}
	hp, actorHasHP := Property(actor, "system.attributes.hp")
	if _, isObject := hp.(map[string]any); actorHasHP && isObject {
		value, overridden := Property(delta, "system.attributes.hp.value")
		if !overridden {
			value, _ = Property(actor, "system.attributes.hp.value")
		}
		if value != 0.0 {
			diff["delta.system.attributes.hp.value"] = 0.0
		}
	}
	own := docsOf(delta, actorEffects.key)
	if !hasStatus(own, deadStatus) && !hasStatus(docsOf(actor, actorEffects.key), deadStatus) {
		effect := deadEffect()
		effect["_id"] = tx.NewID()
		diff["delta.effects"] = append(slices.Clip(own), any(effect))
	}
	if len(diff) == 0 {
		return nil
	}
	_, err := tx.update(token.uuid, diff)
	return err
}

// markDefeated sets `defeated` on every combatant, in every combat, that
// match selects.
func markDefeated(tx *Tx, match func(combatant Document) bool) error {
	var uuids []string
	tx.View().each(typeCombat, func(combat Document) bool {
		for _, d := range docsOf(combat, combatCombatants.key) {
			if c := d.(map[string]any); match(c) && c["defeated"] != true {
				uuids = append(uuids, typeCombat.name+"."+str(combat["_id"])+"."+typeCombatant.name+"."+str(c["_id"]))
			}
		}
		return true
	})
	slices.Sort(uuids)
	for _, uuid := range uuids {
		if _, err := tx.update(uuid, Document{"defeated": true}); err != nil {
			return err
		}
	}
	return nil
}

// hasStatus reports whether one of the effects carries a status.
func hasStatus(effects []any, status string) bool {
	for _, d := range effects {
		statuses, _ := d.(map[string]any)["statuses"].([]any)
		if slices.Contains(statuses, any(status)) {
			return true
		}
	}
	return false
}

// deadEffect is the data of a new dead status effect.
func deadEffect() Document {
	return Document{
		"name":     deadName,
		"img":      deadIcon,
		"statuses": []any{deadStatus},
		"disabled": false,
		"changes":  []any{},
		"flags":    Document{},
	}
}
