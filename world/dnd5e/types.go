package dnd5e

import "github.com/tabletop-relay/relay/world"

// The ruleset's parameter and result types are the world's (the vocabulary
// every kind of world shares, see [world.Dnd5e]); the names below let this
// package read in its own words.
type (
	ActorRef                = world.ActorRef
	ItemRef                 = world.ItemRef
	Details                 = world.ActorDetails
	CheckParams             = world.CheckParams
	RollMode                = world.RollMode
	RollResult              = world.RollResult
	DeathSaveParams         = world.DeathSaveParams
	DeathSaveResult         = world.DeathSaveResult
	RestParams              = world.RestParams
	RestResult              = world.RestResult
	ChargesResult           = world.ChargesResult
	ExperienceChange        = world.ExperienceChange
	Currency                = world.Currency
	CurrencyChange          = world.CurrencyChange
	TransferParams          = world.TransferParams
	TransferResult          = world.TransferResult
	Concentration           = world.Concentration
	ConcentrationSaveParams = world.ConcentrationSaveParams
	ConcentrationSaveResult = world.ConcentrationSaveResult
	ItemToggleResult        = world.ItemToggleResult
	PrepareResult           = world.PrepareResult
	UseKind                 = world.UseKind
	UseParams               = world.UseParams
	AttackRoll              = world.AttackRoll
	DamageRoll              = world.DamageRoll
	UseResult               = world.UseResult
)

// The use operations.
const (
	UseAbility = world.UseAbility
	UseFeature = world.UseFeature
	UseSpell   = world.UseSpell
	UseItem    = world.UseItem
)
