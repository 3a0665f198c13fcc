package world

import "github.com/tabletop-relay/relay/world/dice"

// The vocabulary of the fifth-edition ruleset (the [Dnd5e] capability).
// Rolls are world/dice results: plain data, like everything here.

// ActorRef names an actor: by uuid, else by name, else (with Selected) the
// actor of the first selected token.
type ActorRef struct {
	UUID     string
	Name     string
	Selected bool
}

// ItemRef names an item of an actor by uuid or name.
type ItemRef struct {
	UUID string
	Name string
}

// ActorDetails is what get-actor-details returns: one field per detail asked
// for, nil for those not asked for.
type ActorDetails struct {
	UUID          string
	Resources     any
	Items         []any
	Spells        []any
	SpellSlots    map[string]any
	Features      []any
	Stats         map[string]any
	Abilities     map[string]any
	Skills        map[string]any
	Info          map[string]any // the `details` detail
	Conditions    []any
	Concentration map[string]any
}

// CheckParams are the parameters of a skill check, an ability check or a
// saving throw.
type CheckParams struct {
	ActorUUID string
	// Skill is the skill's abbreviation (skill checks only).
	Skill string
	// Ability is the ability's abbreviation (ability checks and saves).
	Ability      string
	Advantage    bool
	Disadvantage bool
	// Bonus is an extra formula added to the roll (`1d4`, `+2`).
	Bonus string
	// ChatMessage posts the roll to chat.
	ChatMessage bool
}

// RollMode is the mode a d20 roll was made with and why: every source of
// advantage and of disadvantage found, even when they cancel out.
type RollMode struct {
	// Mode is `advantage`, `disadvantage` or `normal`.
	Mode string `json:"mode"`
	// Advantage and Disadvantage name the sources of each, such as
	// `requested`, `Exhaustion 3`, `Poisoned`, `Chain Mail`, or the name
	// of an active effect.
	Advantage    []string `json:"advantage"`
	Disadvantage []string `json:"disadvantage"`
	// Override names what forced the mode regardless of the other
	// sources (an effect overriding a roll mode), "" when nothing did.
	Override string `json:"override"`
}

// RollResult is a d20 roll of an actor.
type RollResult struct {
	ActorUUID string
	// Total is the roll's total, rounded down to a whole number.
	Total int
	// Formula is the formula as evaluated (`1d20 + 4 + 3`).
	Formula string
	// Result shows the terms' values (`14 + 4 + 3`).
	Result string
	// Roll is the full roll, with its dice.
	Roll dice.Result
	// Mode is the roll's mode and its sources.
	Mode RollMode
}

// DeathSaveParams are the parameters of a death save.
type DeathSaveParams struct {
	ActorUUID   string
	Advantage   bool
	ChatMessage bool
}

// DeathSaveResult is a death save and the counters after it.
type DeathSaveResult struct {
	RollResult
	Successes int
	Failures  int
	// Success tells whether this save succeeded (10 or more).
	Success bool
	// Stable is set when this save stabilised the actor: the third success,
	// or a natural 20 (which also restores 1 hit point).
	Stable bool
	// Dead is set at three failures.
	Dead bool
}

// RestParams are the parameters of a rest.
type RestParams struct {
	Actor ActorRef
	// AutoHD spends hit dice on a short rest, one at a time, while the
	// hit points stay short of AutoHDThreshold, read two ways: from 0 to 1
	// a fraction of the maximum (the relay's contract: spend while hit
	// points are below that share), above 1 a number of missing hit points
	// (the tabletop's: spend while hit points plus it are at most the
	// maximum). Nil means the tabletop's default, 3 missing hit points. At
	// exactly 1 both readings agree: spend while below the maximum.
	AutoHD          bool
	AutoHDThreshold *float64
	// NewDay (long rests) also recovers what recovers daily, at dawn or at
	// dusk; nil means true.
	NewDay *bool
}

// RestResult reports a rest in the system's shape.
type RestResult struct {
	ActorUUID string
	// Type is `short` or `long`.
	Type string
	// Deltas are `{hitPoints, hitDice}`.
	Deltas map[string]any
	// UpdateData are the actor's changes by dotted path.
	UpdateData map[string]any
	// UpdateItems are the items' changes, each with its `_id`.
	UpdateItems []any
	NewDay      bool
	// Rolls are the hit dice and recovery formulas rolled.
	Rolls []dice.Result
	// Clone is the actor after the rest, with its uuid. Its values are
	// shared with the world's stored version and must not be changed.
	Clone Document
	// DHD and DHP are the change in remaining hit dice and in hit points.
	DHD, DHP int
	LongRest bool
}

// ChargesResult reports a change of an item's charges.
type ChargesResult struct {
	ItemUUID   string
	OldCharges int
	NewCharges int
}

// ExperienceChange reports a change of experience points.
type ExperienceChange struct {
	ActorUUID string
	OldXP     int
	NewXP     int
}

// Currency is an amount of coins by denomination.
type Currency map[string]int

// CurrencyChange reports a change of one denomination.
type CurrencyChange struct {
	ActorUUID string
	Currency  string
	OldAmount int
	NewAmount int
	Balance   Currency
}

// TransferParams describe coins moving between actors.
type TransferParams struct {
	Source ActorRef
	Target ActorRef
	Amount Currency
}

// TransferResult reports a transfer.
type TransferResult struct {
	SourceUUID    string
	TargetUUID    string
	Transferred   Currency
	SourceBalance Currency
	TargetBalance Currency
}

// Concentration is an actor's concentration.
type Concentration struct {
	ActorUUID       string
	IsConcentrating bool
	// Effect is `{id, uuid, name, icon, statuses, origin}`, nil when not
	// concentrating.
	Effect map[string]any
	// Spell is the name of the spell at the effect's origin, "" when none.
	Spell string
}

// ConcentrationSaveParams are the parameters of a concentration save.
type ConcentrationSaveParams struct {
	Actor        ActorRef
	Damage       float64
	Advantage    bool
	Disadvantage bool
	Bonus        string
	ChatMessage  bool
}

// ConcentrationSaveResult is a concentration save.
type ConcentrationSaveResult struct {
	RollResult
	DC         int
	Maintained bool
	// RemovedEffectID is the concentration effect removed by a failed save.
	RemovedEffectID string
}

// BrokenConcentration reports a concentration ended on purpose.
type BrokenConcentration struct {
	ActorUUID string
	// RemovedEffectID is the concentration effect removed.
	RemovedEffectID string
}

// ItemToggleResult reports an item equipped or attuned.
type ItemToggleResult struct {
	ActorUUID string
	ItemUUID  string
	ItemName  string
	// On is the item's new state: equipped, or attuned.
	On bool
}

// PrepareResult reports a spell prepared or unprepared.
type PrepareResult struct {
	ActorUUID string
	SpellUUID string
	SpellName string
	Prepared  bool
}

// UseKind is what a use operation looks for.
type UseKind int

// The use operations.
const (
	// UseAbility uses any item of the actor.
	UseAbility UseKind = iota
	// UseFeature uses a feature: feat, class, subclass or background.
	UseFeature
	// UseSpell casts a spell.
	UseSpell
	// UseItem uses anything that is neither a feature nor a spell.
	UseItem
)

// UseParams are the parameters of a use operation.
type UseParams struct {
	Kind       UseKind
	ActorUUID  string
	Ability    ItemRef
	TargetUUID string
	TargetName string
	// SlotLevel is the level of the spell slot to cast a spell with (0:
	// the spell's own level). A use of anything but a levelled spell cast
	// with slots refuses one.
	SlotLevel int
}

// AttackRoll is a use's attack roll.
type AttackRoll struct {
	dice.Result
	IsCritical bool
	IsFumble   bool
	// Hit tells whether the attack hit its target: a natural 1 always
	// misses, a critical hit (a natural 20, or the actor's lower
	// threshold) always hits, any other roll hits when its total reaches
	// the target's armour class. Nil without a target.
	Hit *bool
	// Mode is the roll's mode and its sources.
	Mode RollMode
}

// DamageRoll is a use's damage (or healing) roll.
type DamageRoll struct {
	dice.Result
	Type       string // the damage type (`fire`, `healing`), "" when none
	IsCritical bool
}

// UseResult reports a use.
type UseResult struct {
	ActorUUID string
	// Ability is the name of what was used.
	Ability  string
	ItemUUID string
	// Attack is nil when the use makes no attack.
	Attack *AttackRoll
	Damage []DamageRoll
	// Consumed tells what the use spent: `spellSlot` (`spell2`, `pact` or
	// nil), `slotLevel` (or nil), `uses`, `quantity`.
	Consumed map[string]any
	// Target is `{uuid, name, actorUuid}`, nil without one.
	Target map[string]any
	// Save is `{ability, dc}` for uses that call for a saving throw.
	Save map[string]any
	// Concentration tells whether the use started concentration.
	Concentration bool
}
