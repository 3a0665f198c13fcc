package server

import (
	"context"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/world"
)

// dnd5eService implements relayv1.Dnd5EServiceServer over the worlds'
// fifth-edition ruleset ([world.Dnd5e]).
type dnd5eService struct {
	relayv1.UnimplementedDnd5EServiceServer
}

// chatDefault is createChatMessage with its default, true.
func chatDefault(v *bool) bool { return v == nil || *v }

func (dnd5eService) GetActorDetails(ctx context.Context, req *relayv1.GetActorDetailsRequest) (*relayv1.GetActorDetailsResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	d, err := rules.ActorDetails(ctx, call.User, req.GetActorUuid(), req.GetDetails())
	if err != nil {
		return nil, err
	}
	out := &relayv1.GetActorDetailsResponse{Uuid: d.UUID}
	// Each detail asked for is set; the others stay empty and show as null.
	fields := []struct {
		dst **structpb.Value
		v   any
		set bool
	}{
		{&out.Resources, d.Resources, d.Resources != nil},
		{&out.Items, d.Items, d.Items != nil},
		{&out.Spells, d.Spells, d.Spells != nil},
		{&out.SpellSlots, d.SpellSlots, d.SpellSlots != nil},
		{&out.Features, d.Features, d.Features != nil},
		{&out.Stats, d.Stats, d.Stats != nil},
		{&out.Abilities, d.Abilities, d.Abilities != nil},
		{&out.Skills, d.Skills, d.Skills != nil},
		{&out.Details, d.Info, d.Info != nil},
		{&out.Conditions, d.Conditions, d.Conditions != nil},
		{&out.Concentration, d.Concentration, d.Concentration != nil},
	}
	for _, f := range fields {
		if !f.set {
			continue
		}
		if *f.dst, err = toJSON(f.v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (dnd5eService) ModifyItemCharges(ctx context.Context, req *relayv1.ModifyItemChargesRequest) (*relayv1.ModifyItemChargesResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	if req.Amount == nil {
		return nil, world.Errorf(world.ErrInvalid, "amount must be a number")
	}
	res, err := rules.ModifyItemCharges(ctx, call.User, req.GetActorUuid(),
		world.ItemRef{UUID: req.GetItemUuid(), Name: req.GetItemName()}, int(req.GetAmount()))
	if err != nil {
		return nil, err
	}
	return &relayv1.ModifyItemChargesResponse{ItemUuid: res.ItemUUID, OldCharges: int32(res.OldCharges), NewCharges: int32(res.NewCharges)}, nil
}

func (dnd5eService) ShortRest(ctx context.Context, req *relayv1.ShortRestRequest) (*relayv1.ShortRestResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.ShortRest(ctx, call.User, world.RestParams{
		Actor:           world.ActorRef{UUID: req.GetActorUuid(), Selected: req.GetSelected()},
		AutoHD:          req.GetAutoHd(),
		AutoHDThreshold: req.AutoHdThreshold,
	})
	if err != nil {
		return nil, err
	}
	result, err := restResult(res)
	if err != nil {
		return nil, err
	}
	return &relayv1.ShortRestResponse{ActorUuid: res.ActorUUID, Result: result}, nil
}

func (dnd5eService) LongRest(ctx context.Context, req *relayv1.LongRestRequest) (*relayv1.LongRestResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.LongRest(ctx, call.User, world.RestParams{
		Actor:  world.ActorRef{UUID: req.GetActorUuid(), Selected: req.GetSelected()},
		NewDay: req.NewDay,
	})
	if err != nil {
		return nil, err
	}
	result, err := restResult(res)
	if err != nil {
		return nil, err
	}
	return &relayv1.LongRestResponse{ActorUuid: res.ActorUUID, Result: result}, nil
}

// restResult converts a rest's result.
func restResult(res world.RestResult) (*relayv1.RestResult, error) {
	out := &relayv1.RestResult{Type: res.Type, NewDay: res.NewDay, Dhd: int32(res.DHD), Dhp: int32(res.DHP), LongRest: res.LongRest}
	var err error
	for _, f := range []struct {
		dst **structpb.Value
		v   any
	}{
		{&out.Deltas, res.Deltas}, {&out.UpdateData, res.UpdateData}, {&out.UpdateItems, res.UpdateItems},
		{&out.Rolls, res.Rolls}, {&out.Clone, res.Clone},
	} {
		if *f.dst, err = toJSON(f.v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (dnd5eService) SkillCheck(ctx context.Context, req *relayv1.SkillCheckRequest) (*relayv1.SkillCheckResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.SkillCheck(ctx, call.User, world.CheckParams{
		ActorUUID: req.GetActorUuid(), Skill: req.GetSkill(), Advantage: req.GetAdvantage(), Disadvantage: req.GetDisadvantage(),
		Bonus: req.GetBonus(), ChatMessage: chatDefault(req.CreateChatMessage),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.SkillCheckResponse{ActorUuid: res.ActorUUID, Skill: req.GetSkill(), Total: int32(res.Total), Formula: res.Formula, Result: res.Result, RollMode: rollMode(res.Mode)}, nil
}

func (dnd5eService) AbilitySave(ctx context.Context, req *relayv1.AbilitySaveRequest) (*relayv1.AbilitySaveResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.AbilitySave(ctx, call.User, world.CheckParams{
		ActorUUID: req.GetActorUuid(), Ability: req.GetAbility(), Advantage: req.GetAdvantage(), Disadvantage: req.GetDisadvantage(),
		Bonus: req.GetBonus(), ChatMessage: chatDefault(req.CreateChatMessage),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.AbilitySaveResponse{ActorUuid: res.ActorUUID, Ability: req.GetAbility(), Total: int32(res.Total), Formula: res.Formula, Result: res.Result, RollMode: rollMode(res.Mode)}, nil
}

func (dnd5eService) AbilityCheck(ctx context.Context, req *relayv1.AbilityCheckRequest) (*relayv1.AbilityCheckResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.AbilityCheck(ctx, call.User, world.CheckParams{
		ActorUUID: req.GetActorUuid(), Ability: req.GetAbility(), Advantage: req.GetAdvantage(), Disadvantage: req.GetDisadvantage(),
		Bonus: req.GetBonus(), ChatMessage: chatDefault(req.CreateChatMessage),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.AbilityCheckResponse{ActorUuid: res.ActorUUID, Ability: req.GetAbility(), Total: int32(res.Total), Formula: res.Formula, Result: res.Result, RollMode: rollMode(res.Mode)}, nil
}

func (dnd5eService) DeathSave(ctx context.Context, req *relayv1.DeathSaveRequest) (*relayv1.DeathSaveResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.DeathSave(ctx, call.User, world.DeathSaveParams{
		ActorUUID: req.GetActorUuid(), Advantage: req.GetAdvantage(), ChatMessage: chatDefault(req.CreateChatMessage),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.DeathSaveResponse{
		ActorUuid: res.ActorUUID, Total: int32(res.Total), Formula: res.Formula, Result: res.Result,
		DeathSaves: &relayv1.DeathSaves{Success: int32(res.Successes), Failure: int32(res.Failures)},
		Success:    res.Success, Stable: res.Stable, Dead: res.Dead, RollMode: rollMode(res.Mode),
	}, nil
}

func (dnd5eService) ModifyExperience(ctx context.Context, req *relayv1.ModifyExperienceRequest) (*relayv1.ModifyExperienceResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	if req.Amount == nil {
		return nil, world.Errorf(world.ErrInvalid, "amount must be a number")
	}
	res, err := rules.ModifyExperience(ctx, call.User, world.ActorRef{UUID: req.GetActorUuid(), Selected: req.GetSelected()}, int(req.GetAmount()))
	if err != nil {
		return nil, err
	}
	return &relayv1.ModifyExperienceResponse{ActorUuid: res.ActorUUID, OldXp: int32(res.OldXP), NewXp: int32(res.NewXP)}, nil
}

func (dnd5eService) GetConcentration(ctx context.Context, req *relayv1.GetConcentrationRequest) (*relayv1.GetConcentrationResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.GetConcentration(ctx, call.User, world.ActorRef{UUID: req.GetActorUuid(), Name: req.GetActorName(), Selected: req.GetSelected()})
	if err != nil {
		return nil, err
	}
	out := &relayv1.GetConcentrationResponse{ActorUuid: res.ActorUUID, IsConcentrating: res.IsConcentrating}
	if res.Effect != nil {
		if out.Effect, err = toJSON(res.Effect); err != nil {
			return nil, err
		}
	}
	if res.Spell != "" {
		out.Spell = wrapperspb.String(res.Spell)
	}
	return out, nil
}

func (dnd5eService) BreakConcentration(ctx context.Context, req *relayv1.BreakConcentrationRequest) (*relayv1.BreakConcentrationResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.BreakConcentration(ctx, call.User, world.ActorRef{UUID: req.GetActorUuid(), Name: req.GetActorName(), Selected: req.GetSelected()})
	if err != nil {
		return nil, err
	}
	return &relayv1.BreakConcentrationResponse{ActorUuid: res.ActorUUID, Broken: true, RemovedEffectId: res.RemovedEffectID}, nil
}

func (dnd5eService) ConcentrationSave(ctx context.Context, req *relayv1.ConcentrationSaveRequest) (*relayv1.ConcentrationSaveResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	if req.Damage == nil {
		return nil, world.Errorf(world.ErrInvalid, "damage must be a number")
	}
	res, err := rules.ConcentrationSave(ctx, call.User, world.ConcentrationSaveParams{
		Actor:  world.ActorRef{UUID: req.GetActorUuid(), Name: req.GetActorName(), Selected: req.GetSelected()},
		Damage: float64(req.GetDamage()), Advantage: req.GetAdvantage(), Disadvantage: req.GetDisadvantage(),
		Bonus: req.GetBonus(), ChatMessage: chatDefault(req.CreateChatMessage),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.ConcentrationSaveResponse{
		ActorUuid: res.ActorUUID, Dc: int32(res.DC), Total: int32(res.Total), Formula: res.Formula, Result: res.Result, Maintained: res.Maintained,
		RollMode: rollMode(res.Mode),
	}, nil
}

func (dnd5eService) EquipItem(ctx context.Context, req *relayv1.EquipItemRequest) (*relayv1.EquipItemResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	if req.Equipped == nil {
		return nil, world.Errorf(world.ErrInvalid, "equipped must be a boolean")
	}
	res, err := rules.EquipItem(ctx, call.User,
		world.ActorRef{UUID: req.GetActorUuid(), Name: req.GetActorName(), Selected: req.GetSelected()},
		world.ItemRef{UUID: req.GetItemUuid(), Name: req.GetItemName()}, req.GetEquipped())
	if err != nil {
		return nil, err
	}
	return &relayv1.EquipItemResponse{ActorUuid: res.ActorUUID, ItemUuid: res.ItemUUID, ItemName: res.ItemName, Equipped: res.On}, nil
}

func (dnd5eService) AttuneItem(ctx context.Context, req *relayv1.AttuneItemRequest) (*relayv1.AttuneItemResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	if req.Attuned == nil {
		return nil, world.Errorf(world.ErrInvalid, "attuned must be a boolean")
	}
	res, err := rules.AttuneItem(ctx, call.User,
		world.ActorRef{UUID: req.GetActorUuid(), Name: req.GetActorName(), Selected: req.GetSelected()},
		world.ItemRef{UUID: req.GetItemUuid(), Name: req.GetItemName()}, req.GetAttuned())
	if err != nil {
		return nil, err
	}
	return &relayv1.AttuneItemResponse{ActorUuid: res.ActorUUID, ItemUuid: res.ItemUUID, ItemName: res.ItemName, Attuned: res.On}, nil
}

// currencyFrom converts coins to the world's form; nil stays nil.
func currencyFrom(c *relayv1.Currency) world.Currency {
	if c == nil {
		return nil
	}
	return world.Currency{"pp": int(c.GetPp()), "gp": int(c.GetGp()), "ep": int(c.GetEp()), "sp": int(c.GetSp()), "cp": int(c.GetCp())}
}

// currencyTo converts coins to the message.
func currencyTo(c world.Currency) *relayv1.Currency {
	return &relayv1.Currency{Pp: int32(c["pp"]), Gp: int32(c["gp"]), Ep: int32(c["ep"]), Sp: int32(c["sp"]), Cp: int32(c["cp"])}
}

func (dnd5eService) TransferCurrency(ctx context.Context, req *relayv1.TransferCurrencyRequest) (*relayv1.TransferCurrencyResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	res, err := rules.TransferCurrency(ctx, call.User, world.TransferParams{
		Source: world.ActorRef{UUID: req.GetSourceActorUuid(), Name: req.GetSourceActorName()},
		Target: world.ActorRef{UUID: req.GetTargetActorUuid(), Name: req.GetTargetActorName()},
		Amount: currencyFrom(req.GetCurrency()),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.TransferCurrencyResponse{
		SourceActorUuid: res.SourceUUID, TargetActorUuid: res.TargetUUID, Transferred: currencyTo(res.Transferred),
		SourceBalance: currencyTo(res.SourceBalance), TargetBalance: currencyTo(res.TargetBalance),
	}, nil
}

func (dnd5eService) ModifyCurrency(ctx context.Context, req *relayv1.ModifyCurrencyRequest) (*relayv1.ModifyCurrencyResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	if req.Amount == nil {
		return nil, world.Errorf(world.ErrInvalid, "amount must be a number")
	}
	res, err := rules.ModifyCurrency(ctx, call.User, req.GetActorUuid(), req.GetCurrency(), int(req.GetAmount()))
	if err != nil {
		return nil, err
	}
	return &relayv1.ModifyCurrencyResponse{
		ActorUuid: res.ActorUUID, Currency: res.Currency, OldAmount: int32(res.OldAmount), NewAmount: int32(res.NewAmount), Balance: currencyTo(res.Balance),
	}, nil
}

func (dnd5eService) PrepareSpell(ctx context.Context, req *relayv1.PrepareSpellRequest) (*relayv1.PrepareSpellResponse, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return nil, err
	}
	if req.Prepared == nil {
		return nil, world.Errorf(world.ErrInvalid, "prepared must be a boolean")
	}
	res, err := rules.PrepareSpell(ctx, call.User, req.GetActorUuid(), req.GetSpellName(), req.GetPrepared())
	if err != nil {
		return nil, err
	}
	return &relayv1.PrepareSpellResponse{ActorUuid: res.ActorUUID, SpellUuid: res.SpellUUID, SpellName: res.SpellName, Prepared: res.Prepared}, nil
}

// rollMode is a d20 roll's mode in the response.
func rollMode(m world.RollMode) *relayv1.RollMode {
	return &relayv1.RollMode{Mode: m.Mode, Advantage: m.Advantage, Disadvantage: m.Disadvantage, Override: m.Override}
}

// useRequest is what the four use requests share.
type useRequest interface {
	GetActorUuid() string
	GetAbilityUuid() string
	GetAbilityName() string
	GetTargetUuid() string
	GetTargetName() string
}

// useFields are the use responses' fields in JSON.
type useFields struct {
	roll, damage, consumed, target, save *structpb.Value
	res                                  world.UseResult
}

// runUse runs a use and serialises its result; slotLevel is use-spell's
// (nil for the others and when not given).
func runUse(ctx context.Context, kind world.UseKind, req useRequest, slotLevel *int32) (useFields, error) {
	rules, call, err := capability[world.Dnd5e](ctx)
	if err != nil {
		return useFields{}, err
	}
	slot := 0
	if slotLevel != nil {
		if *slotLevel < 1 || *slotLevel > 9 {
			return useFields{}, world.Errorf(world.ErrInvalid, "slotLevel must be a spell slot level from 1 to 9, got %d", *slotLevel)
		}
		slot = int(*slotLevel)
	}
	res, err := rules.Use(ctx, call.User, world.UseParams{
		Kind: kind, ActorUUID: req.GetActorUuid(),
		Ability:    world.ItemRef{UUID: req.GetAbilityUuid(), Name: req.GetAbilityName()},
		TargetUUID: req.GetTargetUuid(), TargetName: req.GetTargetName(), SlotLevel: slot,
	})
	if err != nil {
		return useFields{}, err
	}
	out := useFields{res: res}
	if res.Attack != nil {
		if out.roll, err = toJSON(map[string]any{
			"total": res.Attack.Total, "formula": res.Attack.Formula, "result": res.Attack.Result.Result,
			"isCritical": res.Attack.IsCritical, "isFumble": res.Attack.IsFumble, "hit": res.Attack.Hit,
			"rollMode": res.Attack.Mode, "dice": res.Attack.Dice,
		}); err != nil {
			return useFields{}, err
		}
	}
	damage := make([]any, 0, len(res.Damage))
	for _, d := range res.Damage {
		var typ any
		if d.Type != "" {
			typ = d.Type
		}
		damage = append(damage, map[string]any{
			"total": d.Total, "formula": d.Formula, "result": d.Result.Result, "type": typ, "isCritical": d.IsCritical, "dice": d.Dice,
		})
	}
	if out.damage, err = toJSON(damage); err != nil {
		return useFields{}, err
	}
	if out.consumed, err = toJSON(res.Consumed); err != nil {
		return useFields{}, err
	}
	if res.Target != nil {
		if out.target, err = toJSON(res.Target); err != nil {
			return useFields{}, err
		}
	}
	if res.Save != nil {
		if out.save, err = toJSON(res.Save); err != nil {
			return useFields{}, err
		}
	}
	return out, nil
}

func (dnd5eService) UseAbility(ctx context.Context, req *relayv1.UseAbilityRequest) (*relayv1.UseAbilityResponse, error) {
	f, err := runUse(ctx, world.UseAbility, req, nil)
	if err != nil {
		return nil, err
	}
	return &relayv1.UseAbilityResponse{Uuid: f.res.ActorUUID, Ability: f.res.Ability, Roll: f.roll, DamageRolls: f.damage,
		Consumed: f.consumed, Target: f.target, Save: f.save, Concentration: f.res.Concentration}, nil
}

func (dnd5eService) UseFeature(ctx context.Context, req *relayv1.UseFeatureRequest) (*relayv1.UseFeatureResponse, error) {
	f, err := runUse(ctx, world.UseFeature, req, nil)
	if err != nil {
		return nil, err
	}
	return &relayv1.UseFeatureResponse{Uuid: f.res.ActorUUID, Ability: f.res.Ability, Roll: f.roll, DamageRolls: f.damage,
		Consumed: f.consumed, Target: f.target, Save: f.save, Concentration: f.res.Concentration}, nil
}

func (dnd5eService) UseSpell(ctx context.Context, req *relayv1.UseSpellRequest) (*relayv1.UseSpellResponse, error) {
	f, err := runUse(ctx, world.UseSpell, req, req.SlotLevel)
	if err != nil {
		return nil, err
	}
	return &relayv1.UseSpellResponse{Uuid: f.res.ActorUUID, Ability: f.res.Ability, Roll: f.roll, DamageRolls: f.damage,
		Consumed: f.consumed, Target: f.target, Save: f.save, Concentration: f.res.Concentration}, nil
}

func (dnd5eService) UseItem(ctx context.Context, req *relayv1.UseItemRequest) (*relayv1.UseItemResponse, error) {
	f, err := runUse(ctx, world.UseItem, req, nil)
	if err != nil {
		return nil, err
	}
	return &relayv1.UseItemResponse{Uuid: f.res.ActorUUID, Ability: f.res.Ability, Roll: f.roll, DamageRolls: f.damage,
		Consumed: f.consumed, Target: f.target, Save: f.save, Concentration: f.res.Concentration}, nil
}
