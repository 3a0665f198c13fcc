package events

import "github.com/tabletop-relay/relay/world"

// The payload builders below are exported for the relay's linked worlds
// (package link), which rebuild these payloads from the tabletop module's
// event messages: a subscriber must not be able to tell a linked world's
// events from an embedded world's, so both build them with the same code.

// CombatState is a combat's state as combat events and the combatStart,
// combatRound and combatTurn hooks carry it: `{encounterId, uuid, round,
// turn, started, active, combatants}`. forPlayers leaves the hidden
// combatants out.
func CombatState(uuid string, combat world.Document, forPlayers bool) map[string]any {
	return combatState(uuid, combat, forPlayers)
}

// CombatantSummary is one combatant as combat events list it: `{id, uuid,
// name, initiative, defeated, hidden, actorUuid, tokenUuid}`. sceneID is the
// combat's scene, used when the combatant names none.
func CombatantSummary(combatUUID, sceneID string, combatant world.Document) map[string]any {
	return combatantSummary(combatUUID, sceneID, combatant)
}

// PlayerCombatDoc is a combat's data without its hidden combatants, as a
// createCombat hook shows it to players.
func PlayerCombatDoc(uuid string, combat world.Document) map[string]any {
	return playerCombatDoc(uuid, combat)
}

// FullDoc is a document's data with its uuid, as OBSERVER readers get it in
// a payload.
func FullDoc(uuid string, doc world.Document) map[string]any { return fullDoc(uuid, doc) }

// LimitedDoc is what a LIMITED reader gets of a document in a payload:
// `{name, uuid, type, img}`.
func LimitedDoc(documentName, uuid string, doc world.Document) map[string]any {
	return limitedDoc(documentName, uuid, doc)
}

// LimitedChanges keeps the changed fields a LIMITED reader may see (name
// and image); nil when there are none.
func LimitedChanges(changes map[string]any) map[string]any { return limitedChanges(changes) }

// EmbeddedKeys are the fields of a document that hold embedded documents,
// by document name: an update's changes never report them.
func EmbeddedKeys(documentName string) []string { return embeddedKeys[documentName] }
