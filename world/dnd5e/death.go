package dnd5e

import (
	"context"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// DeathSave rolls a death saving throw for an actor at 0 hit points: DC 10,
// with the actor's save and death save bonuses. A success counts one, a
// failure one and a natural 1 two failures; counters stop at three. The
// third success stabilises (both counters back to 0); a natural 20 restores
// 1 hit point and clears the counters; three failures mean death, after
// which no more saves are rolled.
func (r *Rules) DeathSave(ctx context.Context, e *world.Engine, user *world.User, p DeathSaveParams) (DeathSaveResult, error) {
	if p.ActorUUID == "" {
		return DeathSaveResult{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	var by string
	if p.ChatMessage {
		by = author(ctx, e, user)
	}
	var out DeathSaveResult
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, err := actorByUUID(v, p.ActorUUID)
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, uuid, "roll death saves for"); err != nil {
			return err
		}
		a := deriveFor(v, user, uuid, doc)
		hp := numOr(at(a.system, "attributes.hp.value"), 0)
		successes := int(numOr(at(a.system, "attributes.death.success"), 0))
		failures := int(numOr(at(a.system, "attributes.death.failure"), 0))
		switch {
		case failures >= 3:
			return world.Errorf(world.ErrFailedPrecondition, "%s is dead: three death saves failed", a.name())
		case a.exhaustion() >= 6:
			return world.Errorf(world.ErrFailedPrecondition, "%s is dead: exhaustion level 6", a.name())
		case hp > 0:
			return world.Errorf(world.ErrFailedPrecondition, "%s is not at 0 hit points and makes no death saves", a.name())
		}
		parts := nonEmpty(str(at(a.system, "bonuses.abilities.save")), str(at(a.system, "attributes.death.bonuses.save")))
		mode := a.rollMode(rollSpec{kind: rollSave, extra: "attributes.death"}, p.Advantage, false)
		roll, err := r.d20(a, mode, parts, "")
		if err != nil {
			return err
		}
		if err := a.refused(); err != nil {
			return err
		}
		out.RollResult = rollResult(uuid, roll, mode)
		natural, _ := roll.Natural(20)
		update := world.Document{}
		var outcome string
		switch {
		case natural == 20:
			successes, failures = 0, 0
			update["system.attributes.hp.value"] = 1.0
			out.Success, out.Stable = true, true
			outcome = "Critical success: regains 1 hit point"
		case out.Total >= 10:
			out.Success = true
			successes++
			outcome = "Success"
			if successes >= 3 {
				successes, failures = 0, 0
				out.Stable = true
				outcome = "Third success: stable"
			}
		default:
			failures += 1
			outcome = "Failure"
			if natural == 1 {
				failures++
				outcome = "Critical failure: two failures"
			}
			failures = min(failures, 3)
			if failures >= 3 {
				out.Dead = true
				outcome += "; dead"
			}
		}
		update["system.attributes.death.success"] = float64(successes)
		update["system.attributes.death.failure"] = float64(failures)
		out.Successes, out.Failures = successes, failures
		if _, err := tx.Update(uuid, update); err != nil {
			return err
		}
		if !p.ChatMessage {
			return nil
		}
		return post(tx, message{
			author: by, actor: a, class: "D20Roll", rolls: []dice.Result{roll},
			flavor:  "Death Saving Throw",
			content: strings.TrimSpace(outcome),
			flags:   map[string]any{"roll": withMode(map[string]any{"type": "death"}, mode)},
		})
	})
	if err != nil {
		return DeathSaveResult{}, err
	}
	return out, nil
}
