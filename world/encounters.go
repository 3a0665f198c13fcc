package world

// The vocabulary of encounters (the [Encounters] capability).

// Combatant is one participant of an encounter, as callers see it.
type Combatant struct {
	ID        string
	Name      string
	TokenUUID string // empty when the combatant has no token
	ActorUUID string // empty when the combatant has no actor
	Img       string
	// Initiative is nil until it was rolled or set.
	Initiative *float64
	Hidden     bool
	Defeated   bool
}

// Encounter summarises one encounter.
type Encounter struct {
	ID      string
	Name    string
	Round   int
	Turn    int
	Current bool // the world's active encounter
	Started bool
	// Combatants are in initiative order; Turn indexes this list.
	Combatants []Combatant
}

// StartEncounterParams describes a new encounter. Combatants come from
// TokenUUIDs (tokens, or actors standing for their token on the active
// scene), then from the player-owned tokens of the active scene
// (WithPlayers), then from the selected tokens (WithSelected); a token is
// added once.
type StartEncounterParams struct {
	Name         string // "New Encounter" when empty
	TokenUUIDs   []string
	WithSelected bool
	WithPlayers  bool
	RollNPC      bool // roll initiative for combatants without a player owner
	RollAll      bool // roll initiative for every combatant
}

// EncounterAction names a turn or round move, with the names of the
// tabletop module's responses.
type EncounterAction string

// The navigation actions.
const (
	NextTurn      EncounterAction = "nextTurn"
	NextRound     EncounterAction = "nextRound"
	PreviousTurn  EncounterAction = "previousTurn"
	PreviousRound EncounterAction = "previousRound"
)

// EncounterPosition reports an encounter after a turn or round move.
type EncounterPosition struct {
	EncounterID string
	Action      EncounterAction
	Round       int
	Turn        int
	// ActorUUID and TokenUUID are the current combatant's; empty when the
	// encounter has no combatant.
	ActorUUID string
	TokenUUID string
	Encounter Encounter
}

// EncounterMembersParams names what to add to or remove from an encounter:
// token or actor uuids (an actor stands for its token on the active scene
// when adding, and for all its combatants when removing), and the selected
// tokens when Selected is set.
type EncounterMembersParams struct {
	EncounterID string // the active encounter when empty
	UUIDs       []string
	Selected    bool
	// RollInitiative rolls for what was added (adding only).
	RollInitiative bool
}

// FailedUUID is a uuid that could not be handled, with the reason.
type FailedUUID struct {
	UUID   string
	Reason string
}

// EncounterMembersResult reports an add or a remove.
type EncounterMembersResult struct {
	EncounterID string
	// Done lists the uuids added (or removed), in the order given.
	Done   []string
	Failed []FailedUUID
}
