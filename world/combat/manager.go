package combat

import (
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// Dice rolls one die: a whole number from 1 to faces.
type Dice func(faces int) int

// Manager runs the encounter operations on world engines. It keeps no
// state of its own beyond its dice, so one Manager serves every world.
type Manager struct {
	dice Dice
}

// New returns a Manager rolling initiative with dice; a fair random die
// when nil (tests inject their own for exact results).
func New(dice Dice) *Manager {
	if dice == nil {
		dice = func(faces int) int { return rand.IntN(faces) + 1 }
	}
	return &Manager{dice: dice}
}

// Document names and fields used below.
const (
	combatName      = "Combat"
	combatantName   = "Combatant"
	combatantsField = "combatants"
	defaultName     = "New Encounter"
)

// requireGM fails unless user is a GM, in the tabletop module's words.
func requireGM(user *world.User, operation string) error {
	if user.IsGM() {
		return nil
	}
	return world.Errorf(world.ErrPermission, "User '%s' must be a GM to %s", user.Name, operation)
}

// findCombat returns the uuid and document of the encounter with the given
// id (or `Combat.<id>` uuid), or of the active encounter when id is empty.
// The document is the view's: do not change it.
func findCombat(v *world.View, id string) (string, world.Document, error) {
	if id != "" {
		bare := strings.TrimPrefix(id, combatName+".")
		uuid := combatName + "." + bare
		doc, err := v.Get(uuid)
		if err != nil {
			return "", nil, world.Errorf(world.ErrNotFound, "Encounter with ID %s not found", bare)
		}
		return uuid, doc, nil
	}
	var active world.Document
	v.Each(combatName, func(doc world.Document) bool {
		if doc["active"] == true && (active == nil || str(doc["_id"]) < str(active["_id"])) {
			active = doc
		}
		return true
	})
	if active == nil {
		return "", nil, world.Errorf(world.ErrNotFound, "No active encounter")
	}
	return combatName + "." + str(active["_id"]), active, nil
}

// combatUUIDs lists the uuids of the world's encounters, sorted.
func combatUUIDs(v *world.View, keep func(doc world.Document) bool) []string {
	var uuids []string
	v.Each(combatName, func(doc world.Document) bool {
		if keep(doc) {
			uuids = append(uuids, combatName+"."+str(doc["_id"]))
		}
		return true
	})
	slices.Sort(uuids)
	return uuids
}

// str returns v as a string, or "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

// number returns v as a float64 when it is a JSON number or a string
// holding one.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case string:
		return parseNumber(n)
	}
	return 0, false
}

// combatants returns a combat's combatants.
func combatants(combat world.Document) []any {
	list, _ := combat[combatantsField].([]any)
	return list
}

// intField reads a whole-number field (round, turn), 0 when absent.
func intField(doc world.Document, key string) int {
	n, _ := doc[key].(float64)
	return int(n)
}
