// Package dnd5e is the fifth-edition ruleset on top of the world engine:
// the actor's derived data (ability modifiers, proficiency, skills, saves,
// passives, spell slots) and every `/dnd5e/*` operation, each a read
// through [world.Engine.View] or one transaction through
// [world.Engine.Mutate]. It works on the engine itself; package
// world/embedded applies it to the relay's own worlds as their
// [world.Dnd5e], and its parameter and result types are the world's.
//
// Permissions follow the read rules of a single read (`/get`): an operation
// that hands out an actor's data (its details, a check's modifiers, its
// concentration) needs OBSERVER on it, as LIMITED shows only a name and an
// image; writes need OWNER (both actors for a transfer); a nil user is
// GM-level access. Lookups by name (actorName, targetName) and the selected
// tokens consider only what the user can see, so an actor they cannot see
// is "not found" like a missing one. Formulas read only what the user may
// read: a reference to anything else is a permission error, never a silent
// 0 (see actor.resolve). Chat messages about an actor reach only those who
// may read it (see post). Rolls come from an injected [dice.Source]; time
// comes from the world's own clock, so tests assert exact outcomes.
package dnd5e

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// Rules runs the ruleset's operations. It holds no state besides its dice,
// so one Rules serves every world.
type Rules struct {
	dice dice.Source
}

// New returns the rules rolling with src; nil means [dice.NewRandom].
func New(src dice.Source) *Rules {
	if src == nil {
		src = dice.NewRandom()
	}
	return &Rules{dice: src}
}

// resolveActor finds an actor in a view for user. A linked token's uuid
// stands for its actor. By name and through the selection it finds only
// actors the user can see (LIMITED or more): one they cannot see is not
// found, with the same error as one that does not exist.
func resolveActor(ctx context.Context, e *world.Engine, v *world.View, user *world.User, ref ActorRef) (string, world.Document, error) {
	switch {
	case ref.UUID != "":
		return actorByUUID(v, ref.UUID)
	case ref.Name != "":
		var found world.Document
		v.Each("Actor", func(doc world.Document) bool {
			if strings.EqualFold(str(doc["name"]), ref.Name) && (found == nil || str(doc["_id"]) < str(found["_id"])) &&
				v.CanSee(user, "Actor."+str(doc["_id"])) {
				found = doc
			}
			return true
		})
		if found == nil {
			return "", nil, world.Errorf(world.ErrNotFound, "Actor not found: %s", ref.Name)
		}
		return "Actor." + str(found["_id"]), found, nil
	case ref.Selected:
		// The selection is the table's (the GM's); reading it needs no
		// rights, but only the actors the user can see count, and
		// changing the actor found still needs OWNER.
		tokens, err := e.Selected(ctx, nil)
		if err != nil && !errors.Is(err, world.ErrFailedPrecondition) {
			return "", nil, err
		}
		for _, t := range tokens {
			if t.ActorUUID != "" && v.CanSee(user, t.ActorUUID) {
				return actorByUUID(v, t.ActorUUID)
			}
		}
		return "", nil, world.Errorf(world.ErrFailedPrecondition, "No token selected")
	}
	return "", nil, world.Errorf(world.ErrInvalid, "actorUuid or actorName is required")
}

// actorByUUID looks an actor up by its uuid or a linked token's.
func actorByUUID(v *world.View, uuid string) (string, world.Document, error) {
	doc, err := v.Get(uuid)
	if err != nil {
		if errors.Is(err, world.ErrNotFound) {
			return "", nil, world.Errorf(world.ErrNotFound, "Actor not found with UUID: %s", uuid)
		}
		return "", nil, err
	}
	parts := strings.Split(uuid, ".")
	switch {
	case len(parts) == 2 && parts[0] == "Actor":
		return uuid, doc, nil
	case len(parts) == 4 && parts[0] == "Scene" && parts[2] == "Token":
		actorID := str(doc["actorId"])
		if actorID == "" {
			return "", nil, world.Errorf(world.ErrInvalid, "Token %s has no actor", uuid)
		}
		if doc["actorLink"] != true {
			return "", nil, world.Errorf(world.ErrInvalid, "Token %s is not linked to its actor; use the actor's uuid", uuid)
		}
		return actorByUUID(v, "Actor."+actorID)
	}
	return "", nil, world.Errorf(world.ErrInvalid, "%s is not an actor", uuid)
}

// requireView fails unless user may read the actor in full (OBSERVER):
// the operations that need it hand out the actor's data, which LIMITED
// does not show. The message is the module's for ruleset reads,
// `User '<n>' does not have permission to view actor '<name>'`, naming
// the actor only to a user who may see its name (LIMITED); to others it
// is the single read's `... to view this entity`.
func requireView(v *world.View, user *world.User, uuid string) error {
	return v.RequireLevel(user, uuid, world.LevelObserver, "view actor")
}

// Item types by what they are to the operations.
var (
	inventoryTypes = []string{"weapon", "equipment", "consumable", "tool", "loot", "container", "backpack"}
	featureTypes   = []string{"feat", "background", "class", "subclass"}
)

// items returns an actor's embedded items (shared; do not change).
func items(actor world.Document) []world.Document {
	raw, _ := actor["items"].([]any)
	out := make([]world.Document, 0, len(raw))
	for _, it := range raw {
		if doc, ok := it.(map[string]any); ok {
			out = append(out, doc)
		}
	}
	return out
}

// itemUUID is the uuid of an actor's item.
func itemUUID(actorUUID string, item world.Document) string {
	return actorUUID + ".Item." + str(item["_id"])
}

// findItem finds an item of an actor by uuid (which must be the actor's) or
// by case-insensitive name among items that pass keep (nil: all).
func findItem(actorUUID string, actor world.Document, ref ItemRef, keep func(world.Document) bool, missing string) (world.Document, error) {
	if ref.UUID == "" && ref.Name == "" {
		return nil, world.Errorf(world.ErrInvalid, "%s", missing)
	}
	if ref.UUID != "" {
		id, ok := strings.CutPrefix(ref.UUID, actorUUID+".Item.")
		if !ok || strings.Contains(id, ".") {
			return nil, world.Errorf(world.ErrInvalid, "Item %s does not belong to actor %s", ref.UUID, str(actor["name"]))
		}
		for _, it := range items(actor) {
			if str(it["_id"]) == id {
				return it, nil
			}
		}
		return nil, world.Errorf(world.ErrNotFound, "Item not found on actor %s: %s", str(actor["name"]), ref.UUID)
	}
	for _, it := range items(actor) {
		if strings.EqualFold(str(it["name"]), ref.Name) && (keep == nil || keep(it)) {
			return it, nil
		}
	}
	return nil, world.Errorf(world.ErrNotFound, "Item not found on actor %s: %s", str(actor["name"]), ref.Name)
}

// ofType returns a filter on item types.
func ofType(types ...string) func(world.Document) bool {
	return func(it world.Document) bool { return slices.Contains(types, str(it["type"])) }
}

// str returns v when it is a string, else "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

// num returns v as a number: a JSON number, or a string holding one.
func num(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case string:
		r, err := dice.Evaluate(strings.TrimSpace(n), nil, dice.NewSequence())
		if err != nil || len(r.Dice) > 0 {
			return 0, false
		}
		return r.Total, true
	}
	return 0, false
}

// numOr returns v as a number, or def.
func numOr(v any, def float64) float64 {
	if n, ok := num(v); ok {
		return n
	}
	return def
}

// obj returns v as an object, or nil.
func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// at follows a dotted path through nested objects.
func at(doc map[string]any, path string) any {
	var cur any = doc
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

// diceError turns a formula error into a world error.
func diceError(what string, err error) error {
	var de *dice.Error
	if errors.As(err, &de) {
		return world.Errorf(world.ErrInvalid, "%s: %s", what, de.Error())
	}
	return err
}
