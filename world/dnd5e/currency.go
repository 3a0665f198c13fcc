package dnd5e

import (
	"context"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// Denominations are the coin denominations, most valuable first.
var Denominations = []string{"pp", "gp", "ep", "sp", "cp"}

// balance reads an actor's coins (missing denominations are 0).
func balance(actor world.Document) Currency {
	out := Currency{}
	for _, d := range Denominations {
		out[d] = int(numOr(at(actor, "system.currency."+d), 0))
	}
	return out
}

// ModifyCurrency adds amount (negative removes) to one denomination of an
// actor's coins. Going below zero is refused, not clamped.
func (r *Rules) ModifyCurrency(ctx context.Context, e *world.Engine, user *world.User, actorUUID, denomination string, amount int) (CurrencyChange, error) {
	if actorUUID == "" {
		return CurrencyChange{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	if !slices.Contains(Denominations, denomination) {
		return CurrencyChange{}, world.Errorf(world.ErrInvalid, "currency must be one of %s", strings.Join(Denominations, ", "))
	}
	var out CurrencyChange
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, err := actorByUUID(v, actorUUID)
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, uuid, "modify currency on"); err != nil {
			return err
		}
		bal := balance(doc)
		old := bal[denomination]
		if old+amount < 0 {
			return world.Errorf(world.ErrFailedPrecondition, "Insufficient %s: %s has %d, needs %d", denomination, str(doc["name"]), old, -amount)
		}
		bal[denomination] = old + amount
		out = CurrencyChange{ActorUUID: uuid, Currency: denomination, OldAmount: old, NewAmount: old + amount, Balance: bal}
		_, err = tx.Update(uuid, world.Document{"system.currency." + denomination: float64(old + amount)})
		return err
	})
	if err != nil {
		return CurrencyChange{}, err
	}
	return out, nil
}

// TransferCurrency moves coins from one actor to another in one
// transaction. Every denomination is checked before anything changes
// (`Insufficient gp: <name> has X, needs Y`); negative amounts and an empty
// transfer are refused; the user needs OWNER on both actors.
func (r *Rules) TransferCurrency(ctx context.Context, e *world.Engine, user *world.User, p TransferParams) (TransferResult, error) {
	if p.Source.UUID == "" && p.Source.Name == "" {
		return TransferResult{}, world.Errorf(world.ErrInvalid, "sourceActorUuid or sourceActorName is required")
	}
	if p.Target.UUID == "" && p.Target.Name == "" {
		return TransferResult{}, world.Errorf(world.ErrInvalid, "targetActorUuid or targetActorName is required")
	}
	if p.Amount == nil {
		return TransferResult{}, world.Errorf(world.ErrInvalid, "currency object is required")
	}
	moving := false
	for _, d := range Denominations {
		if p.Amount[d] < 0 {
			return TransferResult{}, world.Errorf(world.ErrInvalid, "currency.%s must not be negative", d)
		}
		moving = moving || p.Amount[d] > 0
	}
	if !moving {
		return TransferResult{}, world.Errorf(world.ErrInvalid, "currency must move at least one coin")
	}
	var out TransferResult
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		src, srcDoc, err := resolveActor(ctx, e, v, user, p.Source)
		if err != nil {
			return err
		}
		dst, dstDoc, err := resolveActor(ctx, e, v, user, p.Target)
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, src, "transfer currency from"); err != nil {
			return err
		}
		if err := v.RequireOwner(user, dst, "transfer currency to"); err != nil {
			return err
		}
		if src == dst {
			return world.Errorf(world.ErrInvalid, "The source and target actors are the same")
		}
		from, to := balance(srcDoc), balance(dstDoc)
		for _, d := range Denominations {
			if need := p.Amount[d]; need > from[d] {
				return world.Errorf(world.ErrFailedPrecondition, "Insufficient %s: %s has %d, needs %d", d, str(srcDoc["name"]), from[d], need)
			}
		}
		srcChange, dstChange := world.Document{}, world.Document{}
		for _, d := range Denominations {
			if n := p.Amount[d]; n > 0 {
				from[d] -= n
				to[d] += n
				srcChange["system.currency."+d] = float64(from[d])
				dstChange["system.currency."+d] = float64(to[d])
			}
		}
		if _, err := tx.Update(src, srcChange); err != nil {
			return err
		}
		if _, err := tx.Update(dst, dstChange); err != nil {
			return err
		}
		transferred := Currency{}
		for _, d := range Denominations {
			transferred[d] = p.Amount[d]
		}
		out = TransferResult{SourceUUID: src, TargetUUID: dst, Transferred: transferred, SourceBalance: from, TargetBalance: to}
		return nil
	})
	if err != nil {
		return TransferResult{}, err
	}
	return out, nil
}

// ModifyExperience adds amount (which may be negative) to an actor's
// experience points; the total never goes below 0, so a larger removal is
// refused.
func (r *Rules) ModifyExperience(ctx context.Context, e *world.Engine, user *world.User, ref ActorRef, amount int) (ExperienceChange, error) {
	if ref.UUID == "" && !ref.Selected {
		return ExperienceChange{}, world.Errorf(world.ErrInvalid, "Either actorUuid or selected must be provided")
	}
	var out ExperienceChange
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, err := resolveActor(ctx, e, v, user, ActorRef{UUID: ref.UUID, Selected: ref.Selected})
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, uuid, "modify experience on"); err != nil {
			return err
		}
		xp := obj(at(doc, "system.details.xp"))
		if xp == nil {
			return world.Errorf(world.ErrFailedPrecondition, "Actor '%s' does not have experience points (may be an NPC or using milestone leveling)", str(doc["name"]))
		}
		old := int(numOr(xp["value"], 0))
		if old+amount < 0 {
			return world.Errorf(world.ErrFailedPrecondition, "Cannot remove %d XP: %s has only %d", -amount, str(doc["name"]), old)
		}
		out = ExperienceChange{ActorUUID: uuid, OldXP: old, NewXP: old + amount}
		_, err = tx.Update(uuid, world.Document{"system.details.xp.value": float64(old + amount)})
		return err
	})
	if err != nil {
		return ExperienceChange{}, err
	}
	return out, nil
}
