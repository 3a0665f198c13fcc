package linktest

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// The module's fifth-edition request types (reference §3), answered from a
// world's [world.Dnd5e] and turned into the module's reply shapes, which
// hold less than the relay's answers (no roll modes, no consumption, no
// target): the relay converts them back on its side (link/dnd5e.go), so
// that a test comparing a linked world with an embedded one checks both
// conversions.
//
// Where the module checks less than the relay's rules, so does the
// simulator, so that the relay's own checks are what a test sees:
// reading a sheet, rolling a check or reading concentration needs only
// LIMITED (the roll is made with the game master's rights, as in the game
// master's browser); changing coins and preparing spells check no
// permission at all, and coins stop at 0 rather than being refused
// (reference §9.8); any item can be equipped or attuned, with no
// attunement limit, and an item without charges gets 0 (§3.3, §3.10). A death save the system refuses is answered without
// the roll's fields (§3.8, §9.10).

// rulesParams are the fields of the fifth-edition requests.
type rulesParams struct {
	UserID            string          `json:"userId"`
	ActorUUID         string          `json:"actorUuid"`
	UUID              string          `json:"uuid"`
	ActorName         string          `json:"actorName"`
	Selected          bool            `json:"selected"`
	Details           []string        `json:"details"`
	Skill             string          `json:"skill"`
	Ability           string          `json:"ability"`
	Advantage         bool            `json:"advantage"`
	Disadvantage      bool            `json:"disadvantage"`
	Bonus             string          `json:"bonus"`
	CreateChatMessage *bool           `json:"createChatMessage"`
	AutoHD            bool            `json:"autoHD"`
	AutoHDThreshold   *float64        `json:"autoHDThreshold"`
	NewDay            *bool           `json:"newDay"`
	ItemUUID          string          `json:"itemUuid"`
	ItemName          string          `json:"itemName"`
	Amount            *float64        `json:"amount"`
	Currency          json.RawMessage `json:"currency"`
	SourceActorUUID   string          `json:"sourceActorUuid"`
	SourceActorName   string          `json:"sourceActorName"`
	TargetActorUUID   string          `json:"targetActorUuid"`
	TargetActorName   string          `json:"targetActorName"`
	Damage            *float64        `json:"damage"`
	Equipped          *bool           `json:"equipped"`
	Attuned           *bool           `json:"attuned"`
	SpellName         string          `json:"spellName"`
	Name              string          `json:"name"`
	Prepared          *bool           `json:"prepared"`
	AbilityUUID       string          `json:"abilityUuid"`
	AbilityName       string          `json:"abilityName"`
	TargetUUID        string          `json:"targetUuid"`
	TargetName        string          `json:"targetName"`
}

// chatOn is the module's reading of createChatMessage on the dnd5e 5
// path: a chat card only when it is exactly true (reference §9.6).
func (p rulesParams) chatOn() bool { return p.CreateChatMessage != nil && *p.CreateChatMessage }

// rulesOp is one fifth-edition request type's answer.
type rulesOp func(ctx context.Context, w world.World, rules world.Dnd5e, user *world.User, p rulesParams) (any, error)

// rules adapts a rulesOp to the simulator's operations: it decodes the
// request's own fields and finds the world's ruleset (a world without one
// answers nothing, as a module outside a dnd5e world).
func rules(op rulesOp) operation {
	return func(ctx context.Context, w world.World, user *world.User, p params) (any, error) {
		rules, err := world.Capability[world.Dnd5e](w, "")
		if err != nil {
			return nil, err
		}
		var rp rulesParams
		if err := json.Unmarshal(p.raw, &rp); err != nil {
			return nil, err
		}
		return op(ctx, w, rules, user, rp)
	}
}

// wrapData puts a reply's payload under `data`, where every dnd5e handler
// of the module puts it.
func wrapData(data any) map[string]any { return map[string]any{"data": data} }

// viewable refuses a user who cannot see an actor at all, with the
// module's text, which is all the module asks of reads and rolls
// (LIMITED; reference §3.2, §3.7).
func viewable(ctx context.Context, w world.World, user *world.User, uuid string) error {
	docs, err := world.Capability[world.Documents](w, "")
	if err != nil || user == nil {
		return err
	}
	doc, err := docs.Get(ctx, nil, uuid)
	if err != nil {
		return errors.New("Actor not found with UUID: " + uuid)
	}
	if _, err := docs.Get(ctx, user, uuid); err != nil {
		return errors.New("User '" + user.Name + "' does not have permission to view actor '" + str(doc["name"]) + "'")
	}
	return nil
}

// writable refuses a user without OWNER on an actor, with the module's
// text (reference §2.4).
func writable(ctx context.Context, w world.World, user *world.User, uuid, operation string) error {
	docs, err := world.Capability[world.Documents](w, "")
	if err != nil || user == nil {
		return err
	}
	doc, err := docs.Get(ctx, nil, uuid)
	if err != nil {
		return err
	}
	if world.LevelOf(user, "Actor", doc) < world.LevelOwner {
		return errors.New("User '" + user.Name + "' does not have permission to " + operation + " '" + str(doc["name"]) + "'")
	}
	return nil
}

// actorName is an actor's name, "" when it cannot be read.
func actorName(ctx context.Context, w world.World, uuid string) string {
	docs, err := world.Capability[world.Documents](w, "")
	if err != nil {
		return ""
	}
	doc, err := docs.Get(ctx, nil, uuid)
	if err != nil {
		return ""
	}
	return str(doc["name"])
}

// str is v when it is a string, else "".
func str(v any) string { s, _ := v.(string); return s }

// moduleDice is a roll's dice in the module's shape: per term its faces
// and results, each with its value and whether it counts.
func moduleDice(ds []dice.Die) []any {
	out := make([]any, len(ds))
	for i, d := range ds {
		results := make([]any, len(d.Results))
		for j, r := range d.Results {
			results[j] = map[string]any{"result": r.Result, "active": r.Active}
		}
		out[i] = map[string]any{"faces": d.Faces, "results": results}
	}
	return out
}

// checkOp answers skill-check, ability-save and ability-check.
func checkOp(field string, roll func(world.Dnd5e, context.Context, *world.User, world.CheckParams) (world.RollResult, error)) operation {
	return rules(func(ctx context.Context, w world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
		if p.ActorUUID == "" {
			return nil, errors.New("actorUuid is required")
		}
		if err := viewable(ctx, w, user, p.ActorUUID); err != nil {
			return nil, err
		}
		res, err := roll(r, ctx, nil, world.CheckParams{ActorUUID: p.ActorUUID, Skill: p.Skill, Ability: p.Ability,
			Advantage: p.Advantage, Disadvantage: p.Disadvantage, Bonus: p.Bonus, ChatMessage: p.chatOn()})
		if err != nil {
			return nil, err
		}
		value := p.Skill
		if field == "ability" {
			value = p.Ability
		}
		return wrapData(map[string]any{"actorUuid": res.ActorUUID, field: value, "total": res.Total, "formula": res.Formula, "result": res.Result}), nil
	})
}

// restOp answers short-rest and long-rest.
func restOp(long bool) operation {
	return rules(func(ctx context.Context, w world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
		rp := world.RestParams{Actor: world.ActorRef{UUID: p.ActorUUID, Selected: p.Selected}, AutoHD: p.AutoHD, AutoHDThreshold: p.AutoHDThreshold, NewDay: p.NewDay}
		rest := r.ShortRest
		if long {
			rest = r.LongRest
		}
		res, err := rest(ctx, user, rp)
		if err != nil {
			return nil, err
		}
		result := map[string]any{"type": res.Type, "deltas": res.Deltas, "updateData": res.UpdateData, "updateItems": res.UpdateItems,
			"newDay": res.NewDay, "rolls": res.Rolls, "clone": res.Clone, "dhd": res.DHD, "dhp": res.DHP, "longRest": res.LongRest}
		return wrapData(map[string]any{"actorUuid": res.ActorUUID, "result": result}), nil
	})
}

// toggleOp answers equip-item and attune-item as the module does
// (reference §3.10): the actor by uuid or name, the write check, the item,
// then the flag written whatever the item is (no check that it can be
// equipped or attuned, no attunement limit).
func toggleOp(field string) operation {
	return rules(func(ctx context.Context, w world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
		on := p.Equipped
		if field == "attuned" {
			on = p.Attuned
		}
		docs, err := world.Capability[world.Documents](w, "")
		if err != nil {
			return nil, err
		}
		actorUUID, actor, err := moduleActor(ctx, docs, r, p.ActorUUID, p.ActorName)
		if err != nil {
			return nil, err
		}
		if err := writable(ctx, w, user, actorUUID, "modify items on"); err != nil {
			return nil, err
		}
		item, err := moduleItem(actorUUID, actor, p.ItemUUID, p.ItemName)
		if err != nil {
			return nil, err
		}
		if on == nil {
			return nil, errors.New(field + " must be a boolean")
		}
		itemUUID := actorUUID + ".Item." + str(item["_id"])
		if _, err := docs.Update(ctx, nil, itemUUID, world.Document{"system." + field: *on}); err != nil {
			return nil, err
		}
		return wrapData(map[string]any{"actorUuid": actorUUID, "itemUuid": itemUUID, "itemName": item["name"], field: *on}), nil
	})
}

// moduleActor finds an actor as the module's resolveActor does
// (reference §3.1): by uuid, else the first world actor of that name in
// any case, whoever may see it.
func moduleActor(ctx context.Context, docs world.Documents, r world.Dnd5e, uuid, name string) (string, world.Document, error) {
	if uuid == "" && name == "" {
		return "", nil, errors.New("actorUuid or actorName is required")
	}
	if uuid == "" {
		// The ruleset finds actors by name for the game master (nil user)
		// the module's way; its concentration read is the cheapest such
		// lookup.
		c, err := r.GetConcentration(ctx, nil, world.ActorRef{Name: name})
		if err != nil {
			return "", nil, errors.New("Actor not found: " + name)
		}
		uuid = c.ActorUUID
	}
	doc, err := docs.Get(ctx, nil, uuid)
	if err != nil {
		return "", nil, errors.New("Actor not found: " + cmpOr(uuid, name))
	}
	return uuid, doc, nil
}

// moduleItem finds an actor's item as the module's resolveItem does
// (reference §3.1): by the last segment of its uuid, else by name in any
// case.
func moduleItem(actorUUID string, actor world.Document, itemUUID, itemName string) (world.Document, error) {
	if itemUUID == "" && itemName == "" {
		return nil, errors.New("itemUuid or itemName is required")
	}
	items, _ := actor["items"].([]any)
	for _, x := range items {
		it, _ := x.(map[string]any)
		switch {
		case itemUUID != "" && (str(it["_id"]) == itemUUID[strings.LastIndexByte(itemUUID, '.')+1:] || actorUUID+".Item."+str(it["_id"]) == itemUUID):
			return it, nil
		case itemUUID == "" && strings.EqualFold(str(it["name"]), itemName):
			return it, nil
		}
	}
	return nil, errors.New("Item not found on actor " + str(actor["name"]) + ": " + cmpOr(itemUUID, itemName))
}

// cmpOr is a, or b when a is empty.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// useOp answers the four use request types.
func useOp(kind world.UseKind) operation {
	return rules(func(ctx context.Context, _ world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
		res, err := r.Use(ctx, user, world.UseParams{Kind: kind, ActorUUID: p.ActorUUID, Ability: world.ItemRef{UUID: p.AbilityUUID, Name: p.AbilityName},
			TargetUUID: p.TargetUUID, TargetName: p.TargetName})
		if err != nil {
			return nil, err
		}
		data := map[string]any{"uuid": p.ActorUUID, "ability": res.Ability}
		if a := res.Attack; a != nil {
			data["roll"] = map[string]any{"total": a.Total, "formula": a.Formula, "isCritical": a.IsCritical, "isFumble": a.IsFumble, "dice": moduleDice(a.Dice)}
		}
		if len(res.Damage) > 0 {
			rolls := make([]any, len(res.Damage))
			for i, d := range res.Damage {
				var typ any
				if d.Type != "" {
					typ = d.Type
				}
				rolls[i] = map[string]any{"total": d.Total, "formula": d.Formula, "type": typ, "isCritical": d.IsCritical, "dice": moduleDice(d.Dice)}
			}
			data["damageRolls"] = rolls
		}
		return wrapData(data), nil
	})
}

func init() {
	for t, op := range map[string]operation{
		"get-actor-details": rules(func(ctx context.Context, w world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
			if p.ActorUUID == "" {
				return nil, errors.New("actorUuid is required")
			}
			if len(p.Details) == 0 {
				return nil, errors.New("details array is required and cannot be empty")
			}
			if err := viewable(ctx, w, user, p.ActorUUID); err != nil {
				return nil, err
			}
			// The module knows no `spellSlots` detail; it brings the slots
			// with `spells`.
			details := make([]string, 0, len(p.Details))
			for _, d := range p.Details {
				if d != "spellSlots" {
					details = append(details, d)
				}
			}
			d, err := r.ActorDetails(ctx, nil, p.ActorUUID, details)
			if err != nil {
				return nil, err
			}
			data := map[string]any{"uuid": p.ActorUUID}
			set := func(key string, v any, ok bool) {
				if ok {
					data[key] = v
				}
			}
			set("resources", d.Resources, d.Resources != nil)
			set("items", d.Items, d.Items != nil)
			set("spells", d.Spells, d.Spells != nil)
			set("spellSlots", d.SpellSlots, d.SpellSlots != nil)
			set("features", d.Features, d.Features != nil)
			set("stats", d.Stats, d.Stats != nil)
			set("abilities", d.Abilities, d.Abilities != nil)
			set("skills", d.Skills, d.Skills != nil)
			set("details", d.Info, d.Info != nil)
			set("conditions", d.Conditions, d.Conditions != nil)
			set("concentration", d.Concentration, d.Concentration != nil)
			return wrapData(data), nil
		}),
		"skill-check":   checkOp("skill", world.Dnd5e.SkillCheck),
		"ability-save":  checkOp("ability", world.Dnd5e.AbilitySave),
		"ability-check": checkOp("ability", world.Dnd5e.AbilityCheck),
		"death-save": rules(func(ctx context.Context, w world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
			res, err := r.DeathSave(ctx, user, world.DeathSaveParams{ActorUUID: p.ActorUUID, Advantage: p.Advantage, ChatMessage: p.chatOn()})
			if errors.Is(err, world.ErrFailedPrecondition) {
				// The system rolled nothing: the module answers with the
				// counters and without the roll's fields.
				docs, derr := world.Capability[world.Documents](w, "")
				if derr != nil {
					return nil, err
				}
				doc, derr := docs.Get(ctx, nil, p.ActorUUID)
				if derr != nil {
					return nil, err
				}
				system, _ := doc["system"].(map[string]any)
				attributes, _ := system["attributes"].(map[string]any)
				counters, _ := attributes["death"].(map[string]any)
				return wrapData(map[string]any{"actorUuid": p.ActorUUID,
					"deathSaves": map[string]any{"success": orZero(counters["success"]), "failure": orZero(counters["failure"])}}), nil
			}
			if err != nil {
				return nil, err
			}
			return wrapData(map[string]any{"actorUuid": res.ActorUUID, "total": res.Total, "formula": res.Formula, "result": res.Result,
				"deathSaves": map[string]any{"success": res.Successes, "failure": res.Failures}}), nil
		}),
		"short-rest": restOp(false),
		"long-rest":  restOp(true),
		"modify-item-charges": rules(func(ctx context.Context, w world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
			if p.Amount == nil {
				return nil, errors.New("amount must be a number")
			}
			res, err := r.ModifyItemCharges(ctx, user, p.ActorUUID, world.ItemRef{UUID: p.ItemUUID, Name: p.ItemName}, int(*p.Amount))
			if errors.Is(err, world.ErrFailedPrecondition) && strings.HasSuffix(err.Error(), "has no charges") {
				// The module clamps the charges of an item without any to
				// 0..0 and reports 0 to 0 (reference §3.3).
				docs, derr := world.Capability[world.Documents](w, "")
				if derr != nil {
					return nil, err
				}
				actor, derr := docs.Get(ctx, nil, p.ActorUUID)
				if derr != nil {
					return nil, err
				}
				item, derr := moduleItem(p.ActorUUID, actor, p.ItemUUID, p.ItemName)
				if derr != nil {
					return nil, err
				}
				return wrapData(map[string]any{"itemUuid": p.ActorUUID + ".Item." + str(item["_id"]), "oldCharges": 0, "newCharges": 0}), nil
			}
			if err != nil {
				return nil, err
			}
			return wrapData(map[string]any{"itemUuid": res.ItemUUID, "oldCharges": res.OldCharges, "newCharges": res.NewCharges}), nil
		}),
		"modify-experience": rules(func(ctx context.Context, _ world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
			if p.Amount == nil {
				return nil, errors.New("amount must be a number")
			}
			res, err := r.ModifyExperience(ctx, user, world.ActorRef{UUID: p.ActorUUID, Selected: p.Selected}, int(*p.Amount))
			if err != nil {
				return nil, err
			}
			return wrapData(map[string]any{"actorUuid": res.ActorUUID, "oldXp": res.OldXP, "newXp": res.NewXP}), nil
		}),
		"modify-currency": rules(func(ctx context.Context, _ world.World, r world.Dnd5e, _ *world.User, p rulesParams) (any, error) {
			uuid := p.UUID
			if uuid == "" {
				uuid = p.ActorUUID
			}
			var denomination string
			if uuid == "" || json.Unmarshal(p.Currency, &denomination) != nil || denomination == "" || p.Amount == nil {
				return map[string]any{"error": "Missing required params: uuid, currency, amount"}, nil
			}
			// No permission check, and a removal stops at 0 (§9.8): the
			// world is asked for no more than the actor has.
			amount := int(*p.Amount)
			res, err := r.ModifyCurrency(ctx, nil, uuid, denomination, amount)
			if err != nil && errors.Is(err, world.ErrFailedPrecondition) && strings.HasPrefix(err.Error(), "Insufficient") {
				res, err = r.ModifyCurrency(ctx, nil, uuid, denomination, 0)
				if err == nil {
					res, err = r.ModifyCurrency(ctx, nil, uuid, denomination, -res.OldAmount)
				}
			}
			if err != nil {
				return nil, err
			}
			return wrapData(map[string]any{"currency": denomination, "previous": res.OldAmount, "current": res.NewAmount, "delta": amount}), nil
		}),
		"transfer-currency": rules(func(ctx context.Context, _ world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
			var coins map[string]any
			if json.Unmarshal(p.Currency, &coins) != nil || coins == nil {
				return nil, errors.New("currency object is required")
			}
			amount := world.Currency{}
			for k, v := range coins {
				if n, ok := v.(float64); ok && n > 0 {
					amount[k] = int(n)
				}
			}
			res, err := r.TransferCurrency(ctx, user, world.TransferParams{
				Source: world.ActorRef{UUID: p.SourceActorUUID, Name: p.SourceActorName},
				Target: world.ActorRef{UUID: p.TargetActorUUID, Name: p.TargetActorName}, Amount: amount})
			if err != nil {
				return nil, err
			}
			return wrapData(map[string]any{"sourceActorUuid": res.SourceUUID, "targetActorUuid": res.TargetUUID, "transferred": coins,
				"sourceBalance": res.SourceBalance, "targetBalance": res.TargetBalance}), nil
		}),
		"get-concentration": rules(func(ctx context.Context, w world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
			if p.ActorUUID != "" {
				if err := viewable(ctx, w, user, p.ActorUUID); err != nil {
					return nil, err
				}
			}
			res, err := r.GetConcentration(ctx, nil, world.ActorRef{UUID: p.ActorUUID, Name: p.ActorName})
			if err != nil {
				return nil, err
			}
			if p.ActorUUID == "" {
				if err := viewable(ctx, w, user, res.ActorUUID); err != nil {
					return nil, err
				}
			}
			var effect, spell any
			if res.Effect != nil {
				effect = res.Effect
			}
			if res.Spell != "" {
				spell = res.Spell
			}
			return wrapData(map[string]any{"actorUuid": res.ActorUUID, "isConcentrating": res.IsConcentrating, "effect": effect, "spell": spell}), nil
		}),
		"break-concentration": rules(func(ctx context.Context, _ world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
			res, err := r.BreakConcentration(ctx, user, world.ActorRef{UUID: p.ActorUUID, Name: p.ActorName})
			if err != nil {
				return nil, err
			}
			return wrapData(map[string]any{"actorUuid": res.ActorUUID, "broken": true, "removedEffectId": res.RemovedEffectID}), nil
		}),
		"concentration-save": rules(func(ctx context.Context, w world.World, r world.Dnd5e, user *world.User, p rulesParams) (any, error) {
			// The module's concentration save (reference §3.9): the actor
			// by uuid or name, the write check, the concentration effect,
			// then a plain Constitution save against max(10, damage / 2),
			// and the effect deleted when the save fails.
			conc, err := r.GetConcentration(ctx, nil, world.ActorRef{UUID: p.ActorUUID, Name: p.ActorName})
			if err != nil {
				return nil, err
			}
			if err := writable(ctx, w, user, conc.ActorUUID, "roll concentration saves for"); err != nil {
				return nil, err
			}
			if !conc.IsConcentrating {
				return nil, errors.New("Actor '" + actorName(ctx, w, conc.ActorUUID) + "' is not concentrating")
			}
			if p.Damage == nil {
				return nil, errors.New("damage must be a number")
			}
			dc := max(10, int(math.Floor(*p.Damage/2)))
			res, err := r.AbilitySave(ctx, nil, world.CheckParams{ActorUUID: conc.ActorUUID, Ability: "con",
				Advantage: p.Advantage, Disadvantage: p.Disadvantage, Bonus: p.Bonus, ChatMessage: p.chatOn()})
			if err != nil {
				return nil, err
			}
			maintained := res.Total >= dc
			if !maintained {
				if _, err := r.BreakConcentration(ctx, nil, world.ActorRef{UUID: conc.ActorUUID}); err != nil {
					return nil, err
				}
			}
			return wrapData(map[string]any{"actorUuid": res.ActorUUID, "dc": dc, "total": res.Total, "formula": res.Formula,
				"result": res.Result, "maintained": maintained}), nil
		}),
		"equip-item":  toggleOp("equipped"),
		"attune-item": toggleOp("attuned"),
		"prepare-spell": rules(func(ctx context.Context, _ world.World, r world.Dnd5e, _ *world.User, p rulesParams) (any, error) {
			uuid, name := p.UUID, p.SpellName
			if uuid == "" {
				uuid = p.ActorUUID
			}
			if name == "" {
				name = p.Name
			}
			if uuid == "" || name == "" || p.Prepared == nil {
				return map[string]any{"error": "Missing required params: uuid, spellName, prepared"}, nil
			}
			// No permission check (§9.8).
			res, err := r.PrepareSpell(ctx, nil, uuid, name, *p.Prepared)
			if err != nil {
				return nil, err
			}
			return wrapData(map[string]any{"spellName": res.SpellName, "prepared": res.Prepared, "uuid": res.SpellUUID}), nil
		}),
		"use-ability": useOp(world.UseAbility),
		"use-feature": useOp(world.UseFeature),
		"use-spell":   useOp(world.UseSpell),
		"use-item":    useOp(world.UseItem),
	} {
		operations[t] = op
	}
}

// orZero is v, or 0 when it is missing.
func orZero(v any) any {
	if v == nil {
		return 0
	}
	return v
}
