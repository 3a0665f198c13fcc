package embedded

import (
	"context"

	"github.com/tabletop-relay/relay/world"
)

// The fifth-edition operations (world/dnd5e), each the rules applied to the
// engine.

// ActorDetails implements [world.Dnd5e].
func (w *World) ActorDetails(ctx context.Context, user *world.User, actorUUID string, details []string) (world.ActorDetails, error) {
	return w.kit.rules.ActorDetails(ctx, w.Engine, user, actorUUID, details)
}

// SkillCheck implements [world.Dnd5e].
func (w *World) SkillCheck(ctx context.Context, user *world.User, p world.CheckParams) (world.RollResult, error) {
	return w.kit.rules.SkillCheck(ctx, w.Engine, user, p)
}

// AbilitySave implements [world.Dnd5e].
func (w *World) AbilitySave(ctx context.Context, user *world.User, p world.CheckParams) (world.RollResult, error) {
	return w.kit.rules.AbilitySave(ctx, w.Engine, user, p)
}

// AbilityCheck implements [world.Dnd5e].
func (w *World) AbilityCheck(ctx context.Context, user *world.User, p world.CheckParams) (world.RollResult, error) {
	return w.kit.rules.AbilityCheck(ctx, w.Engine, user, p)
}

// DeathSave implements [world.Dnd5e].
func (w *World) DeathSave(ctx context.Context, user *world.User, p world.DeathSaveParams) (world.DeathSaveResult, error) {
	return w.kit.rules.DeathSave(ctx, w.Engine, user, p)
}

// ShortRest implements [world.Dnd5e].
func (w *World) ShortRest(ctx context.Context, user *world.User, p world.RestParams) (world.RestResult, error) {
	return w.kit.rules.ShortRest(ctx, w.Engine, user, p)
}

// LongRest implements [world.Dnd5e].
func (w *World) LongRest(ctx context.Context, user *world.User, p world.RestParams) (world.RestResult, error) {
	return w.kit.rules.LongRest(ctx, w.Engine, user, p)
}

// ModifyItemCharges implements [world.Dnd5e].
func (w *World) ModifyItemCharges(ctx context.Context, user *world.User, actorUUID string, item world.ItemRef, amount int) (world.ChargesResult, error) {
	return w.kit.rules.ModifyItemCharges(ctx, w.Engine, user, actorUUID, item, amount)
}

// ModifyExperience implements [world.Dnd5e].
func (w *World) ModifyExperience(ctx context.Context, user *world.User, actor world.ActorRef, amount int) (world.ExperienceChange, error) {
	return w.kit.rules.ModifyExperience(ctx, w.Engine, user, actor, amount)
}

// ModifyCurrency implements [world.Dnd5e].
func (w *World) ModifyCurrency(ctx context.Context, user *world.User, actorUUID, denomination string, amount int) (world.CurrencyChange, error) {
	return w.kit.rules.ModifyCurrency(ctx, w.Engine, user, actorUUID, denomination, amount)
}

// TransferCurrency implements [world.Dnd5e].
func (w *World) TransferCurrency(ctx context.Context, user *world.User, p world.TransferParams) (world.TransferResult, error) {
	return w.kit.rules.TransferCurrency(ctx, w.Engine, user, p)
}

// GetConcentration implements [world.Dnd5e].
func (w *World) GetConcentration(ctx context.Context, user *world.User, actor world.ActorRef) (world.Concentration, error) {
	return w.kit.rules.GetConcentration(ctx, w.Engine, user, actor)
}

// BreakConcentration implements [world.Dnd5e].
func (w *World) BreakConcentration(ctx context.Context, user *world.User, actor world.ActorRef) (world.BrokenConcentration, error) {
	uuid, removed, err := w.kit.rules.BreakConcentration(ctx, w.Engine, user, actor)
	if err != nil {
		return world.BrokenConcentration{}, err
	}
	return world.BrokenConcentration{ActorUUID: uuid, RemovedEffectID: removed}, nil
}

// ConcentrationSave implements [world.Dnd5e].
func (w *World) ConcentrationSave(ctx context.Context, user *world.User, p world.ConcentrationSaveParams) (world.ConcentrationSaveResult, error) {
	return w.kit.rules.ConcentrationSave(ctx, w.Engine, user, p)
}

// EquipItem implements [world.Dnd5e].
func (w *World) EquipItem(ctx context.Context, user *world.User, actor world.ActorRef, item world.ItemRef, equipped bool) (world.ItemToggleResult, error) {
	return w.kit.rules.EquipItem(ctx, w.Engine, user, actor, item, equipped)
}

// AttuneItem implements [world.Dnd5e].
func (w *World) AttuneItem(ctx context.Context, user *world.User, actor world.ActorRef, item world.ItemRef, attuned bool) (world.ItemToggleResult, error) {
	return w.kit.rules.AttuneItem(ctx, w.Engine, user, actor, item, attuned)
}

// PrepareSpell implements [world.Dnd5e].
func (w *World) PrepareSpell(ctx context.Context, user *world.User, actorUUID, spellName string, prepared bool) (world.PrepareResult, error) {
	return w.kit.rules.PrepareSpell(ctx, w.Engine, user, actorUUID, spellName, prepared)
}

// Use implements [world.Dnd5e].
func (w *World) Use(ctx context.Context, user *world.User, p world.UseParams) (world.UseResult, error) {
	return w.kit.rules.Use(ctx, w.Engine, user, p)
}
