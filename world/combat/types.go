package combat

import "github.com/tabletop-relay/relay/world"

// The encounter types are the world's (the vocabulary every kind of world
// shares, see [world.Encounters]); the names below let this package read in
// its own words.
type (
	// Combatant is one participant of an encounter, as callers see it.
	Combatant = world.Combatant
	// Encounter summarises one encounter.
	Encounter = world.Encounter
	// StartParams describes a new encounter.
	StartParams = world.StartEncounterParams
	// Action names a turn or round move.
	Action = world.EncounterAction
	// Position reports an encounter after a turn or round move.
	Position = world.EncounterPosition
	// MembersParams names what to add to or remove from an encounter.
	MembersParams = world.EncounterMembersParams
	// Failed is a uuid that could not be handled, with the reason.
	Failed = world.FailedUUID
	// MembersResult reports an add or a remove.
	MembersResult = world.EncounterMembersResult
)

// The navigation actions.
const (
	NextTurn      = world.NextTurn
	NextRound     = world.NextRound
	PreviousTurn  = world.PreviousTurn
	PreviousRound = world.PreviousRound
)
