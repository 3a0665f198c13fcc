package linktest

import (
	"encoding/json"
	"strings"
)

// The module adds a token to a combat as `{tokenId, sceneId}` (reference
// §6, start-encounter and add-to-encounter): the tabletop stores such a
// combatant with no `actorId`, its actor being its token's. The embedded
// world the simulator runs on records the actor; the simulator shows its
// combatants as the tabletop stores the module's, in hooks and replies.

// moduleCombatant is a combatant's source as the tabletop keeps one the
// module added: without its actor when it has a token.
func moduleCombatant(cb map[string]any) map[string]any {
	if cb == nil || str(cb["tokenId"]) == "" {
		return cb
	}
	out := make(map[string]any, len(cb))
	for k, v := range cb {
		out[k] = v
	}
	out["actorId"] = nil
	return out
}

// moduleCombat is a combat's source with its combatants as moduleCombatant
// gives them.
func moduleCombat(combat map[string]any) map[string]any {
	list, ok := combat["combatants"].([]any)
	if !ok {
		return combat
	}
	out := make(map[string]any, len(combat))
	for k, v := range combat {
		out[k] = v
	}
	combatants := make([]any, len(list))
	for i, c := range list {
		if cb, ok := c.(map[string]any); ok {
			combatants[i] = moduleCombatant(cb)
		} else {
			combatants[i] = c
		}
	}
	out["combatants"] = combatants
	return out
}

// moduleCombatJSON applies moduleCombat or moduleCombatant to the source
// of a combat or a combatant, by its uuid; other documents stay as they
// are.
func moduleCombatJSON(uuid string, raw json.RawMessage) json.RawMessage {
	if !strings.HasPrefix(uuid, "Combat.") {
		return raw
	}
	var doc map[string]any
	if json.Unmarshal(raw, &doc) != nil {
		return raw
	}
	if strings.Contains(uuid, ".Combatant.") {
		doc = moduleCombatant(doc)
	} else {
		doc = moduleCombat(doc)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return raw
	}
	return out
}
