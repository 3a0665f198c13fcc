package world

import (
	"cmp"
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
)

// Give and Remove move items between actors (reference §4.7). Quantities
// live in an item's `system.quantity`.

// Give gives an item to an actor. The item is named by uuid or by name: on
// the source actor when there is one, otherwise among the world's Items
// (the best search hit the user may observe). When the target already has
// an item of exactly the same name with a numeric quantity, the quantity is
// added to it; otherwise a copy of the item with that quantity is created
// on the target, unequipped and unattuned (equipping and attuning are the
// new holder's to do). With a source actor the item must be one of its
// items, the source must hold at least the quantity given (an item without
// a numeric quantity counts as one; more is refused, as transfer-currency
// refuses more coins than there are, so nothing is made from nothing), and
// it leaves the source: its quantity drops when it had more than was
// given, otherwise the item is deleted. The user needs OWNER on the source
// and the target; copying an item without a source needs OBSERVER on it.
// Everything happens in one transaction.
func (e *Engine) Give(ctx context.Context, user *User, p GiveParams) (GiveResult, error) {
	if p.ToUUID == "" {
		return GiveResult{}, Errorf(ErrInvalid, "'toUuid' is required")
	}
	if p.ItemUUID == "" && p.ItemName == "" {
		return GiveResult{}, Errorf(ErrInvalid, "'itemUuid' or 'itemName' is required")
	}
	qty, err := quantity(p.Quantity, 1)
	if err != nil {
		return GiveResult{}, err
	}
	if p.FromUUID != "" && p.FromUUID == p.ToUUID {
		return GiveResult{}, Errorf(ErrInvalid, "'fromUuid' and 'toUuid' must name different actors")
	}
	res := GiveResult{FromUUID: p.FromUUID, ToUUID: p.ToUUID}
	err = e.Mutate(ctx, func(tx *Tx) error {
		v := tx.View()
		var source ref
		if p.FromUUID != "" {
			r, top, doc, err := findActor(v, p.FromUUID, "Source entity", "Source")
			if err != nil {
				return err
			}
			if err := v.requireOwner(user, r, top, doc, "give items from"); err != nil {
				return err
			}
			source = r
		}
		target, top, actor, err := findActor(v, p.ToUUID, "Target entity", "Target")
		if err != nil {
			return err
		}
		if err := v.requireOwner(user, target, top, actor, "give items to"); err != nil {
			return err
		}
		item, itemDoc, err := itemToGive(v, user, p, source)
		if err != nil {
			return err
		}
		if p.FromUUID != "" {
			have, ok := itemQuantity(itemDoc)
			if !ok {
				have = 1
			}
			if qty > have {
				return Errorf(ErrInvalid, "Insufficient quantity of %s: the source has %s, cannot give %s", docName(itemDoc), formatQty(have), formatQty(qty))
			}
		}
		res.ItemUUID = item.uuid
		if res.NewItemUUID, res.Quantity, err = addItem(tx, target, actor, itemDoc, qty); err != nil {
			return err
		}
		if p.FromUUID != "" {
			_, err = takeItem(tx, item, itemDoc, qty)
		}
		return err
	})
	if err != nil {
		return GiveResult{}, err
	}
	return res, nil
}

// itemToGive finds the item a give names: by uuid or by name, on the
// source actor when there is one, else among the world's Items.
func itemToGive(v *View, user *User, p GiveParams, source ref) (ref, Document, error) {
	switch {
	case p.ItemUUID != "" && p.FromUUID != "":
		return findOwnedItem(v, p.ItemUUID, source, "source actor")
	case p.ItemUUID != "":
		item, top, doc, err := findItem(v, p.ItemUUID)
		if err != nil {
			return item, nil, err
		}
		if levelOf(user, item.segs[0].typ, top) < LevelObserver {
			return item, nil, errNoView(user)
		}
		return item, doc, nil
	case p.FromUUID != "":
		return itemByName(v, source, p.ItemName)
	default:
		return worldItemByName(v, user, p.ItemName)
	}
}

// addItem adds qty of an item to an actor: to the stack of an item of
// exactly the same name with a numeric quantity, or as a copy holding qty.
// It returns the uuid and quantity of the actor's item.
func addItem(tx *Tx, actor ref, actorDoc, item Document, qty float64) (string, float64, error) {
	name := docName(item)
	for _, d := range docsOf(actorDoc, actorItems.key) {
		stack := d.(map[string]any)
		have, ok := itemQuantity(stack)
		if !ok || docName(stack) != name {
			continue
		}
		uuid := actor.child(actorItems, str(stack["_id"])).uuid
		_, err := tx.update(uuid, Document{"system.quantity": have + qty})
		return uuid, have + qty, err
	}
	data := Clone(item)
	for _, k := range []string{"_id", "folder", "ownership"} {
		delete(data, k)
	}
	system, _ := data["system"].(map[string]any)
	if system == nil {
		system = Document{}
		data["system"] = system
	}
	system["quantity"] = qty
	for _, k := range []string{"equipped", "attuned"} {
		if _, ok := system[k]; ok {
			system[k] = false
		}
	}
	uuid, err := tx.Create(typeItem.name, actor.uuid, data)
	return uuid, qty, err
}

// takeItem takes qty of an item from its actor: the stack shrinks when its
// numeric quantity is larger, otherwise the item is deleted. It returns
// what is left (0 when deleted).
func takeItem(tx *Tx, item ref, doc Document, qty float64) (float64, error) {
	if have, ok := itemQuantity(doc); ok && have > qty {
		_, err := tx.update(item.uuid, Document{"system.quantity": have - qty})
		return have - qty, err
	}
	return 0, tx.Delete(item.uuid)
}

// Remove removes an item, or part of its stack, from an actor: with a
// quantity smaller than the item's numeric quantity the stack shrinks,
// otherwise (or without a quantity) the item is deleted. The item must
// belong to the actor and the user needs OWNER on the actor.
func (e *Engine) Remove(ctx context.Context, user *User, p RemoveParams) (RemoveResult, error) {
	if p.ActorUUID == "" {
		return RemoveResult{}, Errorf(ErrInvalid, "'actorUuid' is required")
	}
	if p.ItemUUID == "" && p.ItemName == "" {
		return RemoveResult{}, Errorf(ErrInvalid, "'itemUuid' or 'itemName' is required")
	}
	qty, err := quantity(p.Quantity, math.Inf(1)) // no quantity: all of it
	if err != nil {
		return RemoveResult{}, err
	}
	res := RemoveResult{ActorUUID: p.ActorUUID}
	err = e.Mutate(ctx, func(tx *Tx) error {
		v := tx.View()
		actor, top, doc, err := findActor(v, p.ActorUUID, "Target actor", "Target")
		if err != nil {
			return err
		}
		if err := v.requireOwner(user, actor, top, doc, "remove items from"); err != nil {
			return err
		}
		var item ref
		var itemDoc Document
		if p.ItemUUID != "" {
			item, itemDoc, err = findOwnedItem(v, p.ItemUUID, actor, "actor")
		} else {
			item, itemDoc, err = itemByName(v, actor, p.ItemName)
		}
		if err != nil {
			return err
		}
		res.ItemUUID = item.uuid
		res.Quantity, err = takeItem(tx, item, itemDoc, qty)
		res.Deleted = res.Quantity == 0
		return err
	})
	if err != nil {
		return RemoveResult{}, err
	}
	return res, nil
}

// formatQty prints a quantity as JavaScript would.
func formatQty(q float64) string { return strconv.FormatFloat(q, 'f', -1, 64) }

// quantity checks a quantity parameter; zero means def.
func quantity(q, def float64) (float64, error) {
	if math.IsNaN(q) || math.IsInf(q, 0) || q < 0 {
		return 0, Errorf(ErrInvalid, "'quantity' must be a positive number")
	}
	if q == 0 {
		return def, nil
	}
	return q, nil
}

// itemQuantity returns an item's numeric `system.quantity`.
func itemQuantity(item Document) (float64, bool) {
	q, ok := Property(item, "system.quantity")
	if !ok {
		return 0, false
	}
	return number(q)
}

// findActor looks up an actor, with the tabletop module's messages:
// "<missing> not found: <uuid>" and "<role> entity must be an Actor, got <type>".
func findActor(v *View, uuid, missing, role string) (r ref, top, doc Document, err error) {
	r, top, doc, err = v.find(uuid)
	if errors.Is(err, ErrNotFound) {
		return r, nil, nil, Errorf(ErrNotFound, "%s not found: %s", missing, uuid)
	}
	if err != nil {
		return r, nil, nil, err
	}
	if r.typ() != typeActor {
		return r, nil, nil, Errorf(ErrInvalid, "%s entity must be an Actor, got %s", role, r.typ().name)
	}
	return r, top, doc, nil
}

// findItem looks up an item by uuid.
func findItem(v *View, uuid string) (r ref, top, doc Document, err error) {
	r, top, doc, err = v.find(uuid)
	if errors.Is(err, ErrNotFound) {
		return r, nil, nil, Errorf(ErrNotFound, "Item not found: %s", uuid)
	}
	if err != nil {
		return r, nil, nil, err
	}
	if r.typ() != typeItem {
		return r, nil, nil, Errorf(ErrInvalid, "Entity must be an Item, got %s", r.typ().name)
	}
	return r, top, doc, nil
}

// findOwnedItem looks up an item by uuid that must be one of an actor's.
func findOwnedItem(v *View, uuid string, actor ref, what string) (ref, Document, error) {
	r, _, doc, err := findItem(v, uuid)
	if err != nil {
		return r, nil, err
	}
	if !r.embedded() || r.parent().uuid != actor.uuid {
		return r, nil, Errorf(ErrInvalid, "Item %s does not belong to %s %s", uuid, what, actor.uuid)
	}
	return r, doc, nil
}

// itemByName finds an actor's first item with a name, case-insensitively.
func itemByName(v *View, actor ref, name string) (ref, Document, error) {
	_, doc, err := v.lookup(actor)
	if err != nil {
		return ref{}, nil, err
	}
	for _, d := range docsOf(doc, actorItems.key) {
		item := d.(map[string]any)
		if strings.EqualFold(docName(item), name) {
			return actor.child(actorItems, str(item["_id"])), item, nil
		}
	}
	return ref{}, nil, Errorf(ErrNotFound, "Item not found: %s", name)
}

// worldItemByName finds the world Item that best matches a name, by the
// search scores, among those the user may observe.
func worldItemByName(v *View, user *User, name string) (ref, Document, error) {
	query := strings.ToLower(strings.TrimSpace(name))
	var best Document
	bestScore := scoreNone
	v.each(typeItem, func(doc Document) bool {
		if levelOf(user, typeItem, doc) < LevelObserver {
			return true
		}
		score := scoreName(strings.ToLower(docName(doc)), query)
		if score > bestScore || score == bestScore && score != scoreNone && byNameThenID(doc, best) < 0 {
			best, bestScore = doc, score
		}
		return true
	})
	if best == nil || bestScore <= 0 {
		return ref{}, nil, Errorf(ErrNotFound, "Item not found: %s", name)
	}
	id := str(best["_id"])
	return ref{uuid: typeItem.name + "." + id, segs: []segment{{typ: typeItem, id: id}}}, best, nil
}

// byNameThenID orders documents by case-insensitive name, then id, as
// search results are ordered.
func byNameThenID(a, b Document) int {
	return cmp.Or(cmp.Compare(strings.ToLower(docName(a)), strings.ToLower(docName(b))), cmp.Compare(str(a["_id"]), str(b["_id"])))
}
