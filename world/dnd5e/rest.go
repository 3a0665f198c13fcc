package dnd5e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// hitDieClass is a class item's hit dice.
type hitDieClass struct {
	id     string
	faces  int
	levels int
	spent  int
	legacy bool // the item also keeps the older `hitDiceUsed` field
}

// hitDice lists the actor's classes with hit dice, largest dice first.
func hitDice(a *actor) []*hitDieClass {
	var out []*hitDieClass
	for _, it := range a.items {
		if str(it["type"]) != "class" {
			continue
		}
		sys := obj(it["system"])
		denom := str(at(sys, "hd.denomination"))
		if denom == "" {
			denom = str(sys["hitDice"])
		}
		faces, err := strconv.Atoi(strings.TrimPrefix(denom, "d"))
		if err != nil || faces < 1 {
			continue
		}
		spent, ok := num(at(sys, "hd.spent"))
		if !ok {
			spent = numOr(sys["hitDiceUsed"], 0)
		}
		_, legacy := sys["hitDiceUsed"]
		out = append(out, &hitDieClass{id: str(it["_id"]), faces: faces, levels: int(numOr(sys["levels"], 0)), spent: int(spent), legacy: legacy})
	}
	slices.SortStableFunc(out, func(x, y *hitDieClass) int { return y.faces - x.faces })
	return out
}

// remaining counts unspent hit dice.
func remaining(classes []*hitDieClass) int {
	n := 0
	for _, c := range classes {
		n += c.levels - c.spent
	}
	return n
}

// rest is the state of one rest being taken.
type rest struct {
	r        *Rules
	a        *actor
	res      *RestResult
	items    map[string]map[string]any // item id → changes
	itemIDs  []string
	hpBefore float64
}

// itemChange records a change to an item.
func (s *rest) itemChange(id, path string, value any) {
	ch, ok := s.items[id]
	if !ok {
		ch = map[string]any{}
		s.items[id] = ch
		s.itemIDs = append(s.itemIDs, id)
	}
	ch[path] = value
}

// ShortRest takes a short rest: hit dice spent as asked (each rolls its
// size plus the constitution modifier, at least 0), resources and item
// uses that recover on a short rest back to full, pact slots restored.
func (r *Rules) ShortRest(ctx context.Context, e *world.Engine, user *world.User, p RestParams) (RestResult, error) {
	threshold := float64(defaultAutoHDThreshold)
	if p.AutoHDThreshold != nil {
		threshold = *p.AutoHDThreshold
		if math.IsNaN(threshold) || math.IsInf(threshold, 0) || threshold < 0 {
			return RestResult{}, world.Errorf(world.ErrInvalid, "autoHDThreshold must be a fraction from 0 to 1 or a number of missing hit points above 1")
		}
	}
	return r.rest(ctx, e, user, p.Actor, "perform a short rest on", func(s *rest) error {
		s.res.Type = "short"
		if p.AutoHD {
			if err := s.spendHitDice(threshold); err != nil {
				return err
			}
		}
		s.resources(func(res map[string]any) bool { return res["sr"] == true })
		if pact := obj(at(s.a.system, "spells.pact")); slotMax(pact) > 0 {
			s.res.UpdateData["system.spells.pact.value"] = float64(slotMax(pact))
		}
		return s.itemUses([]string{"sr"})
	})
}

// LongRest takes a long rest: full hit points (temporary ones cleared),
// every spell slot, hit dice back up to half the total (at least one),
// resources and item uses that recover on a short or long rest, daily
// uses when NewDay, and one level of exhaustion less.
func (r *Rules) LongRest(ctx context.Context, e *world.Engine, user *world.User, p RestParams) (RestResult, error) {
	newDay := p.NewDay == nil || *p.NewDay
	return r.rest(ctx, e, user, p.Actor, "perform a long rest on", func(s *rest) error {
		s.res.Type, s.res.LongRest, s.res.NewDay = "long", true, newDay
		s.res.UpdateData["system.attributes.hp.value"] = float64(s.a.maxHP())
		s.res.UpdateData["system.attributes.hp.temp"] = 0.0
		s.res.UpdateData["system.attributes.hp.tempmax"] = 0.0
		classes := hitDice(s.a)
		total := 0
		for _, c := range classes {
			total += c.levels
		}
		recover := max(1, total/2)
		for _, c := range classes {
			back := min(recover, c.spent)
			if back == 0 {
				continue
			}
			recover -= back
			s.setSpent(c, c.spent-back)
		}
		s.resources(func(res map[string]any) bool { return res["sr"] == true || res["lr"] == true })
		for i := 1; i <= 9; i++ {
			if m := slotMax(obj(at(s.a.system, fmt.Sprintf("spells.spell%d", i)))); m > 0 {
				s.res.UpdateData[fmt.Sprintf("system.spells.spell%d.value", i)] = float64(m)
			}
		}
		if m := slotMax(obj(at(s.a.system, "spells.pact"))); m > 0 {
			s.res.UpdateData["system.spells.pact.value"] = float64(m)
		}
		if ex := numOr(at(s.a.system, "attributes.exhaustion"), 0); ex > 0 {
			s.res.UpdateData["system.attributes.exhaustion"] = ex - 1
		}
		periods := []string{"sr", "lr"}
		if newDay {
			periods = append(periods, "day", "dawn", "dusk")
		}
		return s.itemUses(periods)
	})
}

// rest runs a rest in one transaction.
func (r *Rules) rest(ctx context.Context, e *world.Engine, user *world.User, ref ActorRef, operation string, take func(*rest) error) (RestResult, error) {
	if ref.UUID == "" && !ref.Selected {
		return RestResult{}, world.Errorf(world.ErrInvalid, "Either actorUuid or selected must be provided")
	}
	by := author(ctx, e, user)
	var out RestResult
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, err := resolveActor(ctx, e, v, user, ActorRef{UUID: ref.UUID, Selected: ref.Selected})
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, uuid, operation); err != nil {
			return err
		}
		a := deriveFor(v, user, uuid, doc)
		s := &rest{r: r, a: a, items: map[string]map[string]any{},
			res:      &RestResult{ActorUUID: uuid, UpdateData: map[string]any{}, UpdateItems: []any{}, Rolls: []dice.Result{}},
			hpBefore: numOr(at(a.system, "attributes.hp.value"), 0)}
		hdBefore := remaining(hitDice(a))
		if err := take(s); err != nil {
			return err
		}
		if err := a.refused(); err != nil {
			return err
		}
		hpAfter := s.hpBefore
		if v, ok := s.res.UpdateData["system.attributes.hp.value"].(float64); ok {
			hpAfter = v
		}
		if s.hpBefore <= 0 && hpAfter > 0 {
			// Back from 0 hit points: the death save counters start over.
			s.res.UpdateData["system.attributes.death.success"] = 0.0
			s.res.UpdateData["system.attributes.death.failure"] = 0.0
		}
		if len(s.res.UpdateData) > 0 {
			if _, err := tx.Update(uuid, world.Document(s.res.UpdateData)); err != nil {
				return err
			}
		}
		for _, id := range s.itemIDs {
			ch := s.items[id]
			if _, err := tx.Update(uuid+".Item."+id, world.Document(ch)); err != nil {
				return err
			}
			entry := map[string]any{"_id": id}
			for k, v := range ch {
				entry[k] = v
			}
			s.res.UpdateItems = append(s.res.UpdateItems, entry)
		}
		after, err := tx.View().Get(uuid)
		if err != nil {
			return err
		}
		// A shallow copy: the stored version never changes, and the
		// result is only read (see RestResult.Clone).
		s.res.Clone = maps.Clone(after)
		s.res.Clone["uuid"] = uuid
		s.res.DHP = int(hpAfter - s.hpBefore)
		s.res.DHD = remaining(hitDice(deriveFor(v, user, uuid, after))) - hdBefore
		s.res.Deltas = map[string]any{"hitPoints": float64(s.res.DHP), "hitDice": float64(s.res.DHD)}
		out = *s.res
		return post(tx, message{author: by, actor: a, flavor: restFlavor(out), content: restContent(a.name(), out), class: "BasicRoll", rolls: out.Rolls,
			flags: map[string]any{"rest": map[string]any{"type": out.Type}}})
	})
	if err != nil {
		return RestResult{}, err
	}
	return out, nil
}

// defaultAutoHDThreshold is the system's default threshold of automatic
// hit dice: spend them while 3 or more hit points are missing.
const defaultAutoHDThreshold = 3.0

// spendHitDice rolls hit dice, largest first, while dice remain and the
// hit points stay short of the threshold (see RestParams.AutoHDThreshold).
// Each die heals its roll plus the constitution modifier, never less than
// 0: the system's `max(0, 1dN + @abilities.con.mod)`.
func (s *rest) spendHitDice(threshold float64) error {
	hp := obj(at(s.a.system, "attributes.hp"))
	maxHP := float64(s.a.maxHP()) + numOr(hp["tempmax"], 0)
	cur := s.hpBefore
	short := func() bool {
		if threshold <= 1 {
			return cur < threshold*maxHP
		}
		return cur+threshold <= maxHP
	}
	for _, c := range hitDice(s.a) {
		for c.spent < c.levels && short() {
			roll, err := s.a.evaluate("max(0, 1d"+strconv.Itoa(c.faces)+" + @abilities.con.mod)", s.r.dice)
			if err != nil {
				return diceError("hit die", err)
			}
			s.res.Rolls = append(s.res.Rolls, roll)
			cur = math.Min(maxHP, cur+math.Max(0, math.Floor(roll.Total)))
			s.setSpent(c, c.spent+1)
		}
	}
	if cur != s.hpBefore {
		s.res.UpdateData["system.attributes.hp.value"] = cur
	}
	return nil
}

// setSpent records a class's spent hit dice, in both fields the item keeps.
func (s *rest) setSpent(c *hitDieClass, spent int) {
	c.spent = spent
	s.itemChange(c.id, "system.hd.spent", float64(spent))
	if c.legacy {
		s.itemChange(c.id, "system.hitDiceUsed", float64(spent))
	}
}

// resources refills the actor's resources that recover on this rest.
func (s *rest) resources(recovers func(map[string]any) bool) {
	for _, key := range []string{"primary", "secondary", "tertiary"} {
		res := obj(at(s.a.system, "resources."+key))
		if res == nil || !recovers(res) {
			continue
		}
		if m, ok := num(res["max"]); ok && numOr(res["value"], 0) != m {
			s.res.UpdateData["system.resources."+key+".value"] = m
		}
	}
}

// itemUses recovers the uses of items whose recovery period is one of
// periods: all of them, none (`loseAll`) or a rolled formula.
func (s *rest) itemUses(periods []string) error {
	for _, it := range s.a.items {
		uses := obj(at(it, "system.uses"))
		if uses == nil {
			continue
		}
		maxUses, ok := usesMax(s.a, uses)
		if !ok || maxUses <= 0 {
			continue
		}
		spent := usesSpent(uses, maxUses)
		for _, rec := range recoveries(uses) {
			if !slices.Contains(periods, rec.period) {
				continue
			}
			next := spent
			switch rec.kind {
			case "loseAll":
				next = maxUses
			case "formula":
				if strings.TrimSpace(rec.formula) == "" {
					next = 0
					break
				}
				roll, err := s.a.evaluate(rec.formula, s.r.dice)
				if err != nil {
					return diceError(str(it["name"])+" recovery", err)
				}
				s.res.Rolls = append(s.res.Rolls, roll)
				next = max(0, spent-int(math.Floor(roll.Total)))
			default:
				next = 0
			}
			if next != spent {
				spent = next
				s.setUses(it, uses, maxUses, spent)
			}
			break
		}
	}
	return nil
}

// setUses records an item's spent uses (and the older `value` field when
// the item keeps it).
func (s *rest) setUses(it world.Document, uses map[string]any, maxUses, spent int) {
	s.itemChange(str(it["_id"]), "system.uses.spent", float64(spent))
	if _, ok := uses["value"]; ok {
		s.itemChange(str(it["_id"]), "system.uses.value", float64(maxUses-spent))
	}
}

// recovery is one way an item's uses come back.
type recovery struct {
	period  string // sr, lr, day, dawn, dusk
	kind    string // recoverAll, loseAll, formula
	formula string
}

// recoveries reads an item's recovery rules, in the current list form or
// the older `per`/`recovery` form.
func recoveries(uses map[string]any) []recovery {
	var out []recovery
	if list, ok := uses["recovery"].([]any); ok {
		for _, x := range list {
			if m := obj(x); m != nil {
				out = append(out, recovery{period: str(m["period"]), kind: str(m["type"]), formula: str(m["formula"])})
			}
		}
		return out
	}
	if per := str(uses["per"]); per != "" {
		kind, formula := "recoverAll", ""
		if f := str(uses["recovery"]); f != "" {
			kind, formula = "formula", f
		}
		out = append(out, recovery{period: per, kind: kind, formula: formula})
	}
	return out
}

// usesMax evaluates an item's maximum uses (a formula such as `7` or
// `@prof`); ok is false when the item has no limited uses.
func usesMax(a *actor, uses map[string]any) (int, bool) {
	switch m := uses["max"].(type) {
	case float64:
		return int(m), true
	case string:
		if strings.TrimSpace(m) == "" {
			return 0, false
		}
		r, err := a.evaluate(m, dice.NewSequence())
		if err != nil || len(r.Dice) > 0 {
			return 0, false
		}
		return int(math.Floor(r.Total)), true
	}
	return 0, false
}

// usesSpent is an item's spent uses: `spent`, else max − `value`.
func usesSpent(uses map[string]any, maxUses int) int {
	if s, ok := num(uses["spent"]); ok {
		return min(max(0, int(s)), maxUses)
	}
	if v, ok := num(uses["value"]); ok {
		return min(max(0, maxUses-int(v)), maxUses)
	}
	return 0
}

// restFlavor titles a rest's chat card.
func restFlavor(res RestResult) string {
	if res.LongRest {
		return "Long Rest"
	}
	return "Short Rest"
}

// restContent describes a rest in chat.
func restContent(name string, res RestResult) string {
	kind := "a short rest"
	if res.LongRest {
		kind = "a long rest"
	}
	text := fmt.Sprintf("%s takes %s", name, kind)
	switch {
	case res.DHD < 0:
		text += fmt.Sprintf(", spending %d hit dice to recover %d hit points", -res.DHD, res.DHP)
	case res.DHP > 0 || res.DHD > 0:
		text += fmt.Sprintf(", recovering %d hit points and %d hit dice", res.DHP, res.DHD)
	}
	return text + "."
}
