package dnd5e

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// accepts reports whether an item is of the kind.
func accepts(k UseKind, it world.Document) bool {
	t := str(it["type"])
	switch k {
	case UseFeature:
		return slices.Contains(featureTypes, t)
	case UseSpell:
		return t == "spell"
	case UseItem:
		return t != "spell" && !slices.Contains(featureTypes, t)
	}
	return true
}

// noun names the kind in errors.
func noun(k UseKind) string {
	return [...]string{"an ability", "a feature", "a spell", "an item"}[k]
}

// Use uses an ability, feature, spell or item of an actor: it spends what
// the use costs (a spell slot of the spell's level, or of SlotLevel when
// given; a limited use, a charge, a quantity), refusing when nothing is
// left and never spending a higher slot unasked; refuses a spell that
// must be prepared and is not; rolls the attack (against the target's
// armour class when there is a target) and the damage (only on a hit) or
// healing the use has; starts concentration for a concentration spell;
// and posts the use to chat, all in one transaction.
func (r *Rules) Use(ctx context.Context, e *world.Engine, user *world.User, p UseParams) (UseResult, error) {
	if p.ActorUUID == "" {
		return UseResult{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	if p.Ability.UUID == "" && p.Ability.Name == "" {
		return UseResult{}, world.Errorf(world.ErrInvalid, "abilityUuid or abilityName is required")
	}
	if p.SlotLevel < 0 || p.SlotLevel > 9 {
		return UseResult{}, world.Errorf(world.ErrInvalid, "slotLevel must be a spell slot level from 1 to 9, got %d", p.SlotLevel)
	}
	by := author(ctx, e, user)
	var out UseResult
	err := e.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, doc, err := actorByUUID(v, p.ActorUUID)
		if err != nil {
			return err
		}
		if err := v.RequireOwner(user, uuid, "use abilities on"); err != nil {
			return err
		}
		it, err := findItem(uuid, doc, p.Ability, func(it world.Document) bool { return accepts(p.Kind, it) }, "abilityUuid or abilityName is required")
		if err != nil {
			if p.Ability.UUID == "" && strings.HasPrefix(err.Error(), "Item not found") {
				return world.Errorf(world.ErrNotFound, "Ability not found on actor %s: %s", str(doc["name"]), p.Ability.Name)
			}
			return err
		}
		if !accepts(p.Kind, it) {
			return world.Errorf(world.ErrInvalid, "'%s' (%s) is not %s", str(it["name"]), str(it["type"]), noun(p.Kind))
		}
		a := deriveFor(v, user, uuid, doc)
		u := &use{r: r, tx: tx, a: a, item: it, activity: firstActivity(it), slotLevel: p.SlotLevel,
			res: &UseResult{ActorUUID: uuid, Ability: str(it["name"]), ItemUUID: itemUUID(uuid, it), Damage: []DamageRoll{},
				Consumed: map[string]any{"spellSlot": nil, "slotLevel": nil, "uses": 0.0, "quantity": 0.0}}}
		if u.res.Target, u.target, err = resolveTarget(v, user, p.TargetUUID, p.TargetName); err != nil {
			return err
		}
		if err := u.requirePrepared(); err != nil {
			return err
		}
		if err := u.consume(); err != nil {
			return err
		}
		if err := u.roll(); err != nil {
			return err
		}
		if str(it["type"]) == "spell" && slices.Contains(asList(at(it, "system.properties")), any("concentration")) {
			if err := startConcentration(tx, uuid, doc, it); err != nil {
				return err
			}
			u.res.Concentration = true
		}
		if err := a.refused(); err != nil {
			return err
		}
		out = *u.res
		return u.post(by)
	})
	if err != nil {
		return UseResult{}, err
	}
	return out, nil
}

// use is one use being made.
type use struct {
	r        *Rules
	tx       *world.Tx
	a        *actor
	item     world.Document
	activity map[string]any // nil for an item without activities
	slot     int            // the level of the slot spent, 0 when none
	// slotLevel is the slot level asked for, 0 for the spell's own.
	slotLevel int
	// target is the target's actor (nil without one), read for its armour
	// class whatever the user may see of it: only hit or miss is told.
	target *actor
	res    *UseResult
}

// requirePrepared refuses a levelled spell that must be prepared and is
// not: one cast as a spell of a class that prepares its spells (SRD 5.1,
// "Preparing and Casting Spells").
func (u *use) requirePrepared() error {
	if str(u.item["type"]) != "spell" || spellLevel(u.item) == 0 || spellMethod(u.item) != "spell" || spellPrepared(u.item) {
		return nil
	}
	if _, reason := preparingClass(u.a, u.item); reason != "" {
		return nil // not a spell its class prepares
	}
	return world.Errorf(world.ErrFailedPrecondition, "%s is not prepared: %s must prepare it before casting it", str(u.item["name"]), u.a.name())
}

// firstActivity returns an item's first activity by sort order.
func firstActivity(it world.Document) map[string]any {
	acts := obj(at(it, "system.activities"))
	var first map[string]any
	for id, x := range acts {
		act := obj(x)
		if act == nil {
			continue
		}
		if first == nil || cmp.Or(cmp.Compare(numOr(act["sort"], 0), numOr(first["sort"], 0)), strings.Compare(id, str(first["_id"]))) < 0 {
			first = act
		}
	}
	return first
}

// consume spends what the use costs, or fails when it is not there.
func (u *use) consume() error {
	name := str(u.item["name"])
	if str(u.item["type"]) == "spell" {
		if err := u.spendSlot(); err != nil {
			return err
		}
	}
	spentUses := false
	if u.activity != nil {
		for _, t := range asList(at(u.activity, "consumption.targets")) {
			target := obj(t)
			amount := int(numOr(target["value"], 1))
			switch str(target["type"]) {
			case "itemUses":
				it := u.item
				if id := str(target["target"]); id != "" {
					it = u.ownItem(id)
					if it == nil {
						return world.Errorf(world.ErrFailedPrecondition, "%s consumes an item %s no longer has", name, u.a.name())
					}
				}
				if err := u.spendUses(it, amount); err != nil {
					return err
				}
				spentUses = true
			case "material":
				it := u.ownItem(str(target["target"]))
				if it == nil {
					return world.Errorf(world.ErrFailedPrecondition, "%s consumes an item %s does not have", name, u.a.name())
				}
				if err := u.spendQuantity(it, amount); err != nil {
					return err
				}
			case "attribute":
				path := "system." + str(target["target"])
				have := numOr(at(u.a.doc, path), 0)
				if have < float64(amount) {
					return world.Errorf(world.ErrFailedPrecondition, "%s has not enough %s left to use %s", u.a.name(), str(target["target"]), name)
				}
				if _, err := u.tx.Update(u.a.uuid, world.Document{path: have - float64(amount)}); err != nil {
					return err
				}
			}
		}
	}
	if u.activity == nil && !spentUses && str(u.item["type"]) != "spell" {
		// An item without activities spends a use when it has limited
		// uses, else one of a consumable stack.
		if maxUses, ok := usesMax(u.a, obj(at(u.item, "system.uses"))); ok && maxUses > 0 {
			return u.spendUses(u.item, 1)
		}
		if str(u.item["type"]) == "consumable" {
			return u.spendQuantity(u.item, 1)
		}
	}
	return nil
}

// ownItem returns the actor's item with an id.
func (u *use) ownItem(id string) world.Document {
	for _, it := range u.a.items {
		if str(it["_id"]) == id {
			return it
		}
	}
	return nil
}

// spendSlot spends the slot a levelled spell is cast with: with
// slotLevel, a slot of that level (or a pact slot of that level); without,
// a pact slot for pact magic, else a slot of the spell's own level. When
// that slot is gone it fails with the system's message rather than spend
// a higher one unasked. Cantrips, and at-will, innate and ritual casting,
// spend none and take no slotLevel.
func (u *use) spendSlot() error {
	level := spellLevel(u.item)
	method := spellMethod(u.item)
	name := str(u.item["name"])
	castWithSlots := level > 0 && (u.activity == nil || at(u.activity, "consumption.spellSlot") != false) &&
		slices.Contains([]string{"spell", "always", "prepared", "pact"}, method)
	if !castWithSlots {
		if u.slotLevel != 0 {
			return world.Errorf(world.ErrInvalid, "slotLevel: %s is cast without a spell slot", name)
		}
		return nil
	}
	if u.slotLevel != 0 && u.slotLevel < level {
		return world.Errorf(world.ErrInvalid, "slotLevel %d is below the level of %s (%d)", u.slotLevel, name, level)
	}
	pact := obj(at(u.a.system, "spells.pact"))
	spendPact := func() error {
		u.slot = pactLevel(u.a, pact)
		u.res.Consumed["spellSlot"], u.res.Consumed["slotLevel"] = "pact", float64(u.slot)
		_, err := u.tx.Update(u.a.uuid, world.Document{"system.spells.pact.value": numOr(pact["value"], 0) - 1})
		return err
	}
	pactLeft := slotMax(pact) > 0 && numOr(pact["value"], 0) >= 1
	if u.slotLevel == 0 && method == "pact" {
		if !pactLeft {
			return world.Errorf(world.ErrFailedPrecondition, "You have no available pact magic spell slots with which to cast %s.", name)
		}
		return spendPact()
	}
	want := cmp.Or(u.slotLevel, level)
	key := fmt.Sprintf("spell%d", want)
	if slot := obj(at(u.a.system, "spells."+key)); slotMax(slot) > 0 && numOr(slot["value"], 0) >= 1 {
		u.slot = want
		u.res.Consumed["spellSlot"], u.res.Consumed["slotLevel"] = key, float64(want)
		_, err := u.tx.Update(u.a.uuid, world.Document{"system.spells." + key + ".value": numOr(slot["value"], 0) - 1})
		return err
	}
	if u.slotLevel != 0 && pactLeft && pactLevel(u.a, pact) == want {
		return spendPact()
	}
	return world.Errorf(world.ErrFailedPrecondition, "You have no available level %d spell slots with which to cast %s.", want, name)
}

// spendUses spends limited uses (charges) of an item; a consumable that
// destroys itself when empty loses one of its stack instead, and vanishes
// with the last.
func (u *use) spendUses(it world.Document, amount int) error {
	uses := obj(at(it, "system.uses"))
	maxUses, ok := usesMax(u.a, uses)
	if !ok || maxUses <= 0 {
		return nil // nothing limited to spend
	}
	spent := usesSpent(uses, maxUses)
	if maxUses-spent < amount {
		return world.Errorf(world.ErrFailedPrecondition, "%s has no uses left (%d of %d)", str(it["name"]), maxUses-spent, maxUses)
	}
	u.res.Consumed["uses"] = numOr(u.res.Consumed["uses"], 0) + float64(amount)
	spent += amount
	uuid := itemUUID(u.a.uuid, it)
	if spent >= maxUses && uses["autoDestroy"] == true {
		qty := numOr(at(it, "system.quantity"), 1)
		u.res.Consumed["quantity"] = numOr(u.res.Consumed["quantity"], 0) + 1
		if qty <= 1 {
			return u.tx.Delete(uuid)
		}
		_, err := u.tx.Update(uuid, world.Document{"system.quantity": qty - 1, "system.uses.spent": 0.0})
		return err
	}
	change := world.Document{"system.uses.spent": float64(spent)}
	if _, ok := uses["value"]; ok {
		change["system.uses.value"] = float64(maxUses - spent)
	}
	_, err := u.tx.Update(uuid, change)
	return err
}

// spendQuantity takes amount from an item's stack.
func (u *use) spendQuantity(it world.Document, amount int) error {
	qty := int(numOr(at(it, "system.quantity"), 0))
	if qty < amount {
		return world.Errorf(world.ErrFailedPrecondition, "%s has no %s left", u.a.name(), str(it["name"]))
	}
	u.res.Consumed["quantity"] = numOr(u.res.Consumed["quantity"], 0) + float64(amount)
	_, err := u.tx.Update(itemUUID(u.a.uuid, it), world.Document{"system.quantity": float64(qty - amount)})
	return err
}

// roll rolls what the activity rolls: an attack, damage or healing, and
// notes the saving throw it calls for.
func (u *use) roll() error {
	if u.activity == nil {
		return nil
	}
	critical := false
	switch str(u.activity["type"]) {
	case "attack":
		atk, err := u.attack()
		if err != nil {
			return err
		}
		u.res.Attack = atk
		critical = atk.IsCritical
		if atk.Hit != nil && !*atk.Hit {
			return nil // a miss deals no damage
		}
	case "save":
		abilities := asList(at(u.activity, "save.ability"))
		ability := ""
		if len(abilities) > 0 {
			ability = str(abilities[0])
		} else {
			ability = str(at(u.activity, "save.ability"))
		}
		u.res.Save = map[string]any{"ability": ability, "dc": float64(u.saveDC())}
	}
	if heal := obj(u.activity["healing"]); heal != nil {
		return u.damagePart(heal, false, "", "healing")
	}
	if str(u.activity["type"]) == "attack" && at(u.activity, "damage.includeBase") == true {
		if base := obj(at(u.item, "system.damage.base")); base != nil && numOr(base["number"], 0) > 0 {
			if err := u.damagePart(base, critical, strconv.Itoa(u.a.mods[u.attackAbility()]), ""); err != nil {
				return err
			}
		}
	}
	allowCrit := at(u.activity, "damage.critical.allow") != false
	for _, part := range asList(at(u.activity, "damage.parts")) {
		if err := u.damagePart(obj(part), critical && allowCrit, "", ""); err != nil {
			return err
		}
	}
	return nil
}

// saveDC is the DC of the saving throw a use calls for.
func (u *use) saveDC() int {
	dc := obj(at(u.activity, "save.dc"))
	switch str(dc["calculation"]) {
	case "spellcasting", "":
		if f := str(dc["formula"]); str(dc["calculation"]) == "" && f != "" {
			return u.a.fixed(f)
		}
		return u.a.spellDC()
	case "flat":
		return u.a.fixed(str(dc["formula"]))
	default:
		ab := str(dc["calculation"])
		return 8 + u.a.prof + u.a.mods[ab]
	}
}

// attackAbility is the ability an attack uses: the activity's, else the
// spellcasting ability for spells, else dexterity for ranged weapons and
// the better of strength and dexterity for finesse ones, else strength.
func (u *use) attackAbility() string {
	if ab := str(at(u.activity, "attack.ability")); slices.Contains(abilityKeys, ab) {
		return ab
	}
	if str(u.item["type"]) == "spell" {
		return u.a.spellcastingAbility()
	}
	props := asList(at(u.item, "system.properties"))
	if slices.Contains(props, any("fin")) {
		if u.a.mods["dex"] > u.a.mods["str"] {
			return "dex"
		}
		return "str"
	}
	if str(at(u.activity, "attack.type.value")) == "ranged" {
		return "dex"
	}
	return "str"
}

// criticalThreshold is the lowest natural roll that is a critical hit:
// 20, or 19 and 18 with the champion's Improved and Superior Critical.
func (u *use) criticalThreshold() int {
	threshold := 20
	if str(u.item["type"]) != "weapon" {
		return threshold
	}
	for _, it := range u.a.items {
		switch str(at(it, "system.identifier")) {
		case "improved-critical":
			threshold = min(threshold, 19)
		case "superior-critical":
			threshold = min(threshold, 18)
		}
	}
	if t, ok := num(at(u.a.doc, "flags.dnd5e.weaponCriticalThreshold")); ok {
		threshold = min(threshold, int(t))
	}
	return threshold
}

// attack rolls the attack: d20 + ability modifier + proficiency (spells
// always, weapons when proficient) + the item's magical and attack bonuses
// + the actor's attack bonuses of that kind.
func (u *use) attack() (*AttackRoll, error) {
	ability := u.attackAbility()
	parts := []string{strconv.Itoa(u.a.mods[ability])}
	isSpell := str(u.item["type"]) == "spell"
	if isSpell || numOr(at(u.item, "system.proficient"), 1) >= 1 {
		parts = append(parts, strconv.Itoa(u.a.prof))
	}
	if mb, ok := num(at(u.item, "system.magicalBonus")); ok && mb != 0 {
		parts = append(parts, strconv.Itoa(int(mb)))
	}
	kind := "mwak"
	ranged := str(at(u.activity, "attack.type.value")) == "ranged"
	switch {
	case isSpell && ranged:
		kind = "rsak"
	case isSpell:
		kind = "msak"
	case ranged:
		kind = "rwak"
	}
	parts = append(parts, nonEmpty(str(at(u.activity, "attack.bonus")), str(at(u.a.system, "bonuses."+kind+".attack")))...)
	mode := u.a.rollMode(rollSpec{kind: rollAttack, ability: ability}, false, false)
	roll, err := u.r.d20(u.a, mode, parts, "")
	if err != nil {
		return nil, err
	}
	natural, _ := roll.Natural(20)
	atk := &AttackRoll{Result: roll, IsCritical: natural >= u.criticalThreshold(), IsFumble: natural == 1, Mode: mode}
	if u.target != nil {
		// SRD 5.1, "Making an Attack": a natural 1 misses and a natural
		// 20 hits whatever the armour class; a critical hit is a hit.
		hit := !atk.IsFumble && (atk.IsCritical || math.Floor(roll.Total) >= float64(armorClass(u.target)))
		atk.Hit = &hit
		atk.IsCritical = atk.IsCritical && hit
	}
	return atk, nil
}

// damagePart rolls one damage (or healing) part: `{number, denomination,
// bonus, types, custom, scaling}`, with cantrip and upcast scaling, double
// dice on a critical hit, and an extra term (a weapon's ability modifier).
func (u *use) damagePart(part map[string]any, critical bool, extra, typ string) error {
	if part == nil {
		return nil
	}
	var formula string
	if at(part, "custom.enabled") == true {
		formula = str(at(part, "custom.formula"))
	} else {
		number := int(numOr(part["number"], 0))
		faces := int(numOr(part["denomination"], 0))
		if number > 0 && faces > 0 {
			number += u.scaling(part, number)
			if critical {
				number *= 2
			}
			formula = strconv.Itoa(number) + "d" + strconv.Itoa(faces)
		}
		if b := strings.TrimSpace(str(part["bonus"])); b != "" {
			formula = joinFormula(formula, b)
		}
	}
	if extra != "" && extra != "0" {
		formula = joinFormula(formula, extra)
	}
	if strings.TrimSpace(formula) == "" {
		return nil
	}
	roll, err := u.a.evaluate(formula, u.r.dice)
	if err != nil {
		return diceError(str(u.item["name"])+" damage", err)
	}
	if typ == "" {
		if types := asList(part["types"]); len(types) > 0 {
			typ = str(types[0])
		}
	}
	u.res.Damage = append(u.res.Damage, DamageRoll{Result: roll, Type: typ, IsCritical: critical})
	return nil
}

// scaling is the number of extra dice a part gains: a cantrip's at
// character levels 5, 11 and 17, a spell's for each slot level above its
// own (every other level with `half` scaling).
func (u *use) scaling(part map[string]any, number int) int {
	if str(u.item["type"]) != "spell" {
		return 0
	}
	mode := str(at(part, "scaling.mode"))
	step := int(numOr(at(part, "scaling.number"), 0))
	if step == 0 {
		step = number
	}
	level := spellLevel(u.item)
	if level == 0 {
		if mode == "" {
			return 0
		}
		tier := 0
		for _, l := range []int{5, 11, 17} {
			if u.a.level >= l {
				tier++
			}
		}
		return tier * step
	}
	above := u.slot - level
	switch {
	case above <= 0:
		return 0
	case mode == "whole":
		return above * step
	case mode == "half":
		return above / 2 * step
	}
	return 0
}

// resolveTarget finds the use's target among what the user can see: a
// token they see (on a scene they see at least LIMITED, and not hidden,
// unless they are a GM) or an actor they see (LIMITED or more). An actor
// stands for its token on the active scene when the user sees that token.
// By name, the first token of the active scene the user sees whose name,
// or whose actor's name, matches (case-insensitively); when none does the
// use goes on without a target, as on the tabletop. By uuid the read rules
// apply as for a single read: a missing document (or a hidden token) is
// not found, one the user cannot see a permission error. The target
// reports its actor's uuid only to a user who sees that actor; the actor
// itself is returned apart, for the rules (its armour class) alone.
func resolveTarget(v *world.View, user *world.User, uuid, name string) (map[string]any, *actor, error) {
	if uuid == "" && name == "" {
		return nil, nil, nil
	}
	// targetActor is the actor a target stands for, derived without a
	// reader: the rules read its armour class, which the caller is not
	// told.
	targetActor := func(actorUUID string) *actor {
		doc, err := v.Get(actorUUID)
		if err != nil || actorUUID == "" {
			return nil
		}
		return derive(actorUUID, doc)
	}
	tokenActor := func(token world.Document) *actor {
		if id := str(token["actorId"]); id != "" {
			return targetActor("Actor." + id)
		}
		return nil
	}
	scene, _ := v.ActiveScene()
	visible := func(tokenUUID string, token world.Document) bool {
		return (token["hidden"] != true || user.IsGM()) && v.CanSee(user, tokenUUID)
	}
	actorOf := func(token world.Document) string {
		if id := str(token["actorId"]); id != "" && v.CanSee(user, "Actor."+id) {
			return "Actor." + id
		}
		return ""
	}
	tokenTarget := func(tokenUUID string, token world.Document) map[string]any {
		out := map[string]any{"uuid": tokenUUID, "name": token["name"], "actorUuid": nil}
		if a := actorOf(token); a != "" {
			out["actorUuid"] = a
		}
		return out
	}
	// each visits the active scene's tokens the user sees until fn returns
	// false.
	each := func(fn func(tokenUUID string, token world.Document) bool) {
		if scene == nil {
			return
		}
		for _, t := range asList(scene["tokens"]) {
			token := obj(t)
			if token == nil {
				continue
			}
			tu := "Scene." + str(scene["_id"]) + ".Token." + str(token["_id"])
			if visible(tu, token) && !fn(tu, token) {
				return
			}
		}
	}
	actorTarget := func(actorUUID string, actor world.Document) map[string]any {
		out := map[string]any{"uuid": actorUUID, "name": actor["name"], "actorUuid": actorUUID}
		each(func(tu string, t world.Document) bool {
			if actorOf(t) == actorUUID {
				out = tokenTarget(tu, t)
				return false
			}
			return true
		})
		return out
	}
	if uuid == "" {
		var found map[string]any
		var foundActor *actor
		each(func(tu string, t world.Document) bool {
			match := strings.EqualFold(str(t["name"]), name)
			if a := actorOf(t); !match && a != "" {
				actor, _ := v.Get(a)
				match = strings.EqualFold(str(actor["name"]), name)
			}
			if match {
				found, foundActor = tokenTarget(tu, t), tokenActor(t)
			}
			return found == nil
		})
		if found == nil {
			return nil, nil, nil
		}
		return found, foundActor, nil
	}
	doc, err := v.Get(uuid)
	if err != nil {
		return nil, nil, world.Errorf(world.ErrNotFound, "Target not found: %s", uuid)
	}
	parts := strings.Split(uuid, ".")
	switch {
	case len(parts) == 4 && parts[0] == "Scene" && parts[2] == "Token":
		if doc["hidden"] == true && !user.IsGM() {
			return nil, nil, world.Errorf(world.ErrNotFound, "Target not found: %s", uuid)
		}
		if err := v.RequireLevel(user, uuid, world.LevelLimited, "target"); err != nil {
			return nil, nil, err
		}
		return tokenTarget(uuid, doc), tokenActor(doc), nil
	case len(parts) == 2 && parts[0] == "Actor":
		if err := v.RequireLevel(user, uuid, world.LevelLimited, "target"); err != nil {
			return nil, nil, err
		}
		return actorTarget(uuid, doc), targetActor(uuid), nil
	}
	return nil, nil, world.Errorf(world.ErrInvalid, "Target %s is neither a token nor an actor", uuid)
}

// post writes the use's chat card.
func (u *use) post(by string) error {
	var rolls []dice.Result
	var types []string
	class := "BasicRoll"
	if u.res.Attack != nil {
		rolls = append(rolls, u.res.Attack.Result)
		types = append(types, "attack")
		class = "D20Roll"
	}
	for _, d := range u.res.Damage {
		rolls = append(rolls, d.Result)
		types = append(types, d.Type)
	}
	var lines []string
	if u.res.Attack != nil {
		line := fmt.Sprintf("Attack: %s", formatTotal(u.res.Attack.Total))
		if u.res.Attack.IsCritical {
			line += " (critical)"
		}
		if hit := u.res.Attack.Hit; hit != nil && *hit {
			line += ", hit"
		} else if hit != nil {
			line += ", miss"
		}
		lines = append(lines, line)
	}
	for _, d := range u.res.Damage {
		lines = append(lines, fmt.Sprintf("%s: %s", cmp.Or(d.Type, "damage"), formatTotal(math.Floor(d.Total))))
	}
	if u.res.Save != nil {
		lines = append(lines, fmt.Sprintf("DC %v %s saving throw", u.res.Save["dc"], abilityLabel(str(u.res.Save["ability"]))))
	}
	if u.res.Target != nil {
		lines = append(lines, "Target: "+str(u.res.Target["name"]))
	}
	flags := map[string]any{"use": map[string]any{"itemId": u.item["_id"], "itemType": u.item["type"], "itemUuid": u.res.ItemUUID}}
	if u.res.Target != nil {
		// The target, where the tabletop's fifth-edition system records
		// it: the event hub withholds the message from readers who may
		// not see the target the content names.
		flags["targets"] = []any{map[string]any{"name": u.res.Target["name"], "uuid": u.res.Target["uuid"]}}
	}
	return post(u.tx, message{
		author: by, actor: u.a, flavor: str(u.item["name"]), content: strings.Join(lines, "; "),
		class: class, rolls: rolls, types: types, flags: flags,
	})
}
