package dnd5e

import (
	"context"

	"github.com/tabletop-relay/relay/world"
)

// ModifyItemCharges adds amount (negative spends) to an item's charges,
// clamped to 0..max. An item without limited uses is an error.
func (r *Rules) ModifyItemCharges(ctx context.Context, e *world.Engine, user *world.User, actorUUID string, item ItemRef, amount int) (ChargesResult, error) {
	if actorUUID == "" {
		return ChargesResult{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	if item.UUID == "" && item.Name == "" {
		return ChargesResult{}, world.Errorf(world.ErrInvalid, "itemUuid or itemName is required")
	}
	var out ChargesResult
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, err := actorByUUID(v, actorUUID)
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, uuid, "modify item charges on"); err != nil {
			return err
		}
		it, err := findItem(uuid, doc, item, nil, "itemUuid or itemName is required")
		if err != nil {
			return err
		}
		a := deriveFor(v, user, uuid, doc)
		uses := obj(at(it, "system.uses"))
		maxUses, ok := usesMax(a, uses)
		if err := a.refused(); err != nil {
			return err
		}
		if !ok || maxUses <= 0 {
			return world.Errorf(world.ErrFailedPrecondition, "Item '%s' has no charges", str(it["name"]))
		}
		spent := usesSpent(uses, maxUses)
		out.ItemUUID = itemUUID(uuid, it)
		out.OldCharges = maxUses - spent
		out.NewCharges = min(max(out.OldCharges+amount, 0), maxUses)
		change := world.Document{"system.uses.spent": float64(maxUses - out.NewCharges)}
		if _, ok := uses["value"]; ok {
			change["system.uses.value"] = float64(out.NewCharges)
		}
		_, err = tx.Update(out.ItemUUID, change)
		return err
	})
	if err != nil {
		return ChargesResult{}, err
	}
	return out, nil
}

// equippable are the item types that can be equipped.
var equippable = []string{"weapon", "equipment", "consumable", "tool", "container", "backpack", "loot"}

// EquipItem equips or unequips an item of an actor.
func (r *Rules) EquipItem(ctx context.Context, e *world.Engine, user *world.User, actorRef ActorRef, item ItemRef, equipped bool) (ItemToggleResult, error) {
	return r.toggleItem(ctx, e, user, actorRef, item, func(tx *world.Tx, a *actor, it world.Document) error {
		if !ofType(equippable...)(it) {
			return world.Errorf(world.ErrFailedPrecondition, "Item '%s' (%s) cannot be equipped", str(it["name"]), str(it["type"]))
		}
		_, err := tx.Update(itemUUID(a.uuid, it), world.Document{"system.equipped": equipped})
		return err
	}, equipped)
}

// AttuneItem attunes to an item or ends the attunement. Only items that
// need (or allow) attunement can be attuned, and an actor is attuned to at
// most its attunement maximum (3 unless the actor says otherwise).
func (r *Rules) AttuneItem(ctx context.Context, e *world.Engine, user *world.User, actorRef ActorRef, item ItemRef, attuned bool) (ItemToggleResult, error) {
	return r.toggleItem(ctx, e, user, actorRef, item, func(tx *world.Tx, a *actor, it world.Document) error {
		mode := at(it, "system.attunement")
		allowed := mode == "required" || mode == "optional" || mode == 1.0 || mode == 2.0
		if attuned && !allowed {
			return world.Errorf(world.ErrFailedPrecondition, "Item '%s' does not require attunement", str(it["name"]))
		}
		if attuned && at(it, "system.attuned") != true {
			limit := int(numOr(at(a.system, "attributes.attunement.max"), 3))
			count := 0
			for _, other := range a.items {
				if at(other, "system.attuned") == true {
					count++
				}
			}
			if count >= limit {
				return world.Errorf(world.ErrFailedPrecondition, "%s is already attuned to %d items, the most allowed; end an attunement first", a.name(), count)
			}
		}
		_, err := tx.Update(itemUUID(a.uuid, it), world.Document{"system.attuned": attuned})
		return err
	}, attuned)
}

// toggleItem resolves the actor and item, checks OWNER and applies change.
func (r *Rules) toggleItem(ctx context.Context, e *world.Engine, user *world.User, actorRef ActorRef, item ItemRef,
	change func(*world.Tx, *actor, world.Document) error, on bool) (ItemToggleResult, error) {
	var out ItemToggleResult
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, err := resolveActor(ctx, e, v, user, actorRef)
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, uuid, "modify items on"); err != nil {
			return err
		}
		it, err := findItem(uuid, doc, item, nil, "itemUuid or itemName is required")
		if err != nil {
			return err
		}
		out = ItemToggleResult{ActorUUID: uuid, ItemUUID: itemUUID(uuid, it), ItemName: str(it["name"]), On: on}
		a := deriveFor(v, user, uuid, doc)
		if err := change(tx, a, it); err != nil {
			return err
		}
		return a.refused()
	})
	if err != nil {
		return ItemToggleResult{}, err
	}
	return out, nil
}
