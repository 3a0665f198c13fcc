package dnd5e

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// The abilities and skills, in the system's order.
var (
	abilityKeys = []string{"str", "dex", "con", "int", "wis", "cha"}
	skillKeys   = []string{"acr", "ani", "arc", "ath", "dec", "his", "ins", "itm", "inv", "med", "nat", "prc", "prf", "per", "rel", "slt", "ste", "sur"}
	// skillAbility is each skill's default ability.
	skillAbility = map[string]string{
		"acr": "dex", "ani": "wis", "arc": "int", "ath": "str", "dec": "cha", "his": "int",
		"ins": "wis", "itm": "cha", "inv": "int", "med": "wis", "nat": "int", "prc": "wis",
		"prf": "cha", "per": "cha", "rel": "int", "slt": "dex", "ste": "dex", "sur": "wis",
	}
)

// actor is an actor with the values the system derives from its source
// data, which the tabletop never stores: ability modifiers, proficiency
// bonus, skill totals. It is built from shared documents and never changes
// them; system is a private copy when effects had to be applied.
type actor struct {
	uuid   string
	doc    world.Document
	system map[string]any
	items  []world.Document
	level  int
	prof   int
	mods   map[string]int
	data   map[string]any // roll data, built on first use
	// modes are the active effects' changes to roll mode fields, which
	// count sources of advantage rather than change a number.
	modes []modeChange

	// view and user are who the actor's formulas are evaluated for (see
	// resolve); view is nil for an actor derived without a reader.
	view *world.View
	user *world.User
	// full tells whether user reads the actor in full (OBSERVER or more),
	// which reading its roll data takes.
	full bool
	// denied is the first reference a formula was refused (see refused).
	denied error
}

// deriveFor computes an actor's derived data for a user: every formula of
// the actor (its bonuses, the caller's) reads only what user may read.
func deriveFor(v *world.View, user *world.User, uuid string, doc world.Document) *actor {
	a := derive(uuid, doc)
	a.view, a.user = v, user
	level, err := v.ReadLevel(user, uuid)
	a.full = err == nil && level >= world.LevelObserver
	return a
}

// resolve reads a reference of one of the actor's formulas for its user:
// `<uuid>.<path>` reads another document (world.View.ReadRef), anything
// else the actor's roll data. Either needs the user to read that document
// in full; a refused reference fails the evaluation with a permission
// error, and is remembered (see refused) for the totals that evaluate
// formulas without failing.
func (a *actor) resolve(path string) (any, error) {
	if a.view != nil {
		value, isDoc, err := a.view.ReadRef(a.user, path)
		if !isDoc && !a.full {
			err = world.Errorf(world.ErrPermission, "User '%s' does not have permission to read @%s in a roll formula", a.user.Name, path)
		}
		if err != nil {
			if a.denied == nil {
				a.denied = err
			}
			return nil, err
		}
		if isDoc {
			return value, nil
		}
	}
	return at(a.rollData(), path), nil
}

// refused returns the first reference the actor's formulas were refused,
// or nil. Operations check it before they succeed, so that a total which
// counted a refused reference as 0 is never handed out.
func (a *actor) refused() error { return a.denied }

// evaluate evaluates a formula of the actor (or one given for it) with its
// references read through resolve.
func (a *actor) evaluate(formula string, src dice.Source) (dice.Result, error) {
	return dice.EvaluateWith(formula, a.resolve, src)
}

// derive computes an actor's derived data.
func derive(uuid string, doc world.Document) *actor {
	a := &actor{uuid: uuid, doc: doc, items: items(doc), mods: map[string]int{}}
	a.system, a.modes = applyEffects(doc, a.items)
	for _, it := range a.items {
		if str(it["type"]) == "class" {
			a.level += int(numOr(at(it, "system.levels"), 0))
		}
	}
	if a.level > 0 {
		a.prof = proficiencyForLevel(a.level)
	} else {
		cr := numOr(at(a.system, "details.cr"), 0)
		a.prof = int(math.Floor((math.Max(cr, 1) + 7) / 4))
	}
	for _, ab := range abilityKeys {
		a.mods[ab] = abilityMod(numOr(at(a.system, "abilities."+ab+".value"), 10))
	}
	return a
}

// proficiencyForLevel is the proficiency bonus of a character level:
// +2 at levels 1-4, +3 at 5-8, up to +6 at 17-20.
func proficiencyForLevel(level int) int {
	return (max(level, 1) + 7) / 4
}

// abilityMod is an ability score's modifier: floor((score - 10) / 2).
func abilityMod(score float64) int { return int(math.Floor((score - 10) / 2)) }

// maxHP is the actor's hit point maximum, halved (rounded down) from
// exhaustion level 4 (SRD 5.1, Appendix A: Exhaustion).
func (a *actor) maxHP() int {
	m := int(math.Floor(numOr(at(a.system, "attributes.hp.max"), 0)))
	if a.exhaustion() >= 4 {
		m /= 2
	}
	return m
}

// speed is the actor's walking speed: halved from exhaustion level 2, 0
// from level 5 (SRD 5.1, Appendix A: Exhaustion).
func (a *actor) speed() float64 {
	walk := numOr(at(a.system, "attributes.movement.walk"), 0)
	switch ex := a.exhaustion(); {
	case ex >= 5:
		return 0
	case ex >= 2:
		return math.Floor(walk / 2)
	}
	return walk
}

// name is the actor's name.
func (a *actor) name() string { return str(a.doc["name"]) }

// jackOfAllTrades reports the bard feature that adds half proficiency to
// checks without proficiency.
func (a *actor) jackOfAllTrades() bool {
	return at(a.doc, "flags.dnd5e.jackOfAllTrades") == true
}

// profContribution is the proficiency bonus a multiplier adds (0, 0.5
// rounded down, 1, 2 for expertise).
func (a *actor) profContribution(multiplier float64) int {
	return int(math.Floor(multiplier * float64(a.prof)))
}

// fixed evaluates the parts of a bonus formula that do not roll: a bonus
// with dice counts 0 in totals (it is rolled with the check instead), as
// the system's simplified bonuses do.
func (a *actor) fixed(formula string) int {
	if strings.TrimSpace(formula) == "" {
		return 0
	}
	r, err := a.evaluate(formula, dice.NewSequence())
	if err != nil || len(r.Dice) > 0 {
		return 0
	}
	return int(math.Floor(r.Total))
}

// skillInfo is a skill's derived values.
type skillInfo struct {
	ability    string
	multiplier float64
	mod        int
	profBonus  int
	bonuses    []string // bonus formulas, in the order they are added
	total      int
	passive    int
}

// skill derives one skill.
func (a *actor) skill(key string) skillInfo {
	sk := obj(at(a.system, "skills."+key))
	ability := str(sk["ability"])
	if ability == "" {
		ability = skillAbility[key]
	}
	mult := numOr(sk["value"], 0)
	if mult < 0.5 && a.jackOfAllTrades() {
		mult = 0.5
	}
	s := skillInfo{ability: ability, multiplier: numOr(sk["value"], 0), mod: a.mods[ability], profBonus: a.profContribution(mult)}
	s.bonuses = nonEmpty(
		str(at(a.system, "abilities."+ability+".bonuses.check")),
		str(at(sk, "bonuses.check")),
		str(at(a.system, "bonuses.abilities.check")),
		str(at(a.system, "bonuses.abilities.skill")),
	)
	s.total = s.mod + s.profBonus
	for _, b := range s.bonuses {
		s.total += a.fixed(b)
	}
	s.passive = 10 + s.total + a.fixed(str(at(sk, "bonuses.passive")))
	return s
}

// saveInfo is an ability's saving throw.
type saveInfo struct {
	mod        int
	proficient bool
	profBonus  int
	bonuses    []string
	total      int
}

// save derives one ability's saving throw.
func (a *actor) save(ability string) saveInfo {
	prof := numOr(at(a.system, "abilities."+ability+".proficient"), 0)
	s := saveInfo{mod: a.mods[ability], proficient: prof > 0, profBonus: a.profContribution(prof)}
	s.bonuses = nonEmpty(
		str(at(a.system, "abilities."+ability+".bonuses.save")),
		str(at(a.system, "bonuses.abilities.save")),
	)
	s.total = s.mod + s.profBonus
	for _, b := range s.bonuses {
		s.total += a.fixed(b)
	}
	return s
}

// nonEmpty drops empty formulas.
func nonEmpty(formulas ...string) []string {
	out := formulas[:0]
	for _, f := range formulas {
		if strings.TrimSpace(f) != "" {
			out = append(out, f)
		}
	}
	return out
}

// spellcastingAbility is the actor's spellcasting ability: the actor's
// own setting, else its first spellcasting class's, else intelligence.
func (a *actor) spellcastingAbility() string {
	if ab := str(at(a.system, "attributes.spellcasting")); ab != "" {
		return ab
	}
	for _, it := range a.items {
		if str(it["type"]) == "class" {
			if ab := str(at(it, "system.spellcasting.ability")); ab != "" {
				return ab
			}
		}
	}
	return "int"
}

// spellDC is the actor's spell save DC: 8 + proficiency + spellcasting
// modifier (+ the actor's spell DC bonus).
func (a *actor) spellDC() int {
	return 8 + a.prof + a.mods[a.spellcastingAbility()] + a.fixed(str(at(a.system, "bonuses.spell.dc")))
}

// rollData is what `@path` references in the actor's formulas read: the
// system data (effects applied) plus the derived values the system adds
// (`abilities.<a>.mod`, `prof`, `attributes.prof`, `details.level`,
// `classes.<identifier>.levels`, `skills.<s>.total`, ...).
func (a *actor) rollData() map[string]any {
	if a.data != nil {
		return a.data
	}
	data := maps.Clone(a.system)
	if data == nil {
		data = map[string]any{}
	}
	a.data = data
	abilities := map[string]any{}
	for _, ab := range abilityKeys {
		m := maps.Clone(obj(at(a.system, "abilities."+ab)))
		if m == nil {
			m = map[string]any{}
		}
		m["mod"] = float64(a.mods[ab])
		abilities[ab] = m
	}
	data["abilities"] = abilities
	attributes := maps.Clone(obj(a.system["attributes"]))
	if attributes == nil {
		attributes = map[string]any{}
	}
	attributes["prof"] = float64(a.prof)
	spellAbility := a.spellcastingAbility()
	attributes["spellmod"] = float64(a.mods[spellAbility])
	data["attributes"] = attributes
	data["prof"] = float64(a.prof)
	details := maps.Clone(obj(a.system["details"]))
	if details == nil {
		details = map[string]any{}
	}
	details["level"] = float64(a.level)
	data["details"] = details
	classes := map[string]any{}
	for _, it := range a.items {
		if str(it["type"]) != "class" {
			continue
		}
		id := str(at(it, "system.identifier"))
		if id == "" {
			id = strings.ToLower(str(it["name"]))
		}
		c := maps.Clone(obj(it["system"]))
		if c == nil {
			c = map[string]any{}
		}
		classes[id] = c
	}
	data["classes"] = classes
	// Abilities' save totals and skills' totals need the roll data of the
	// bonuses, which is complete now but for them.
	for _, ab := range abilityKeys {
		abilities[ab].(map[string]any)["save"] = map[string]any{"value": float64(a.save(ab).total)}
	}
	skills := map[string]any{}
	for _, key := range skillKeys {
		s := a.skill(key)
		m := maps.Clone(obj(at(a.system, "skills."+key)))
		if m == nil {
			m = map[string]any{}
		}
		m["mod"], m["total"], m["passive"] = float64(s.mod), float64(s.total), float64(s.passive)
		skills[key] = m
	}
	data["skills"] = skills
	attributes["spelldc"] = float64(a.spellDC())
	return data
}

// applyEffects returns the actor's system data with its active effects'
// changes applied: the actor's own effects and those its items transfer
// (an item's effects are off while it is unequipped, or needs attunement
// and is not attuned). Only `system.` keys are changed. Changes apply in
// the system's order: by priority, which defaults to the change mode × 10
// (so overrides, mode 5, come after additions, mode 2), then in the order
// listed. Changes to roll mode fields (`.roll.mode`) are returned apart,
// to be counted as sources of advantage (see actor.rollMode). The result
// shares with the stored system object every part no change touches (only
// the objects along a changed path are copied), so it must not be
// changed; when nothing applies the shared system object is returned as it
// is.
func applyEffects(doc world.Document, its []world.Document) (map[string]any, []modeChange) {
	system := obj(doc["system"])
	type change struct {
		key, value, effect string
		mode               int
		priority           float64
	}
	var changes []change
	var modes []modeChange
	collect := func(effects any) {
		list, _ := effects.([]any)
		for _, e := range list {
			eff := obj(e)
			if eff == nil || eff["disabled"] == true {
				continue
			}
			for _, c := range asList(eff["changes"]) {
				ch := obj(c)
				key, ok := strings.CutPrefix(str(at(ch, "key")), "system.")
				if ch == nil || !ok {
					continue
				}
				mode := int(numOr(ch["mode"], 2))
				if strings.HasSuffix(key, ".roll.mode") {
					if v, ok := num(ch["value"]); ok {
						modes = append(modes, modeChange{path: key, mode: mode, value: int(v), effect: str(eff["name"])})
					}
					continue
				}
				changes = append(changes, change{key: key, value: str(ch["value"]), effect: str(eff["name"]), mode: mode,
					priority: numOr(ch["priority"], float64(mode*10))})
			}
		}
	}
	collect(doc["effects"])
	for _, it := range its {
		if suppressed(it) {
			continue
		}
		list, _ := it["effects"].([]any)
		for _, e := range list {
			if eff := obj(e); eff != nil && eff["transfer"] == true {
				collect([]any{eff})
			}
		}
	}
	if len(changes) == 0 {
		return system, modes
	}
	slices.SortStableFunc(changes, func(x, y change) int { return cmp.Compare(x.priority, y.priority) })
	out := maps.Clone(system)
	if out == nil {
		out = map[string]any{}
	}
	copied := map[string]bool{} // paths of the objects already copied into out
	for _, ch := range changes {
		applyChange(out, copied, ch.key, ch.mode, ch.value)
	}
	return out, modes
}

// suppressed reports whether an item's transferred effects are off.
func suppressed(it world.Document) bool {
	sys := obj(it["system"])
	if eq, ok := sys["equipped"].(bool); ok && !eq {
		return true
	}
	return needsAttunement(it) && sys["attuned"] != true
}

// needsAttunement reports whether an item requires attunement to work.
func needsAttunement(it world.Document) bool {
	switch v := at(it, "system.attunement").(type) {
	case string:
		return v == "required"
	case float64:
		return v == 1 // the numeric form of older system versions
	}
	return false
}

// applyChange applies one effect change (modes of the tabletop: 1 multiply,
// 2 add, 3 downgrade, 4 upgrade, 5 override) to the value at path.
func applyChange(system map[string]any, copied map[string]bool, path string, mode int, value string) {
	parts := strings.Split(path, ".")
	parent := system
	for i, p := range parts[:len(parts)-1] {
		// The objects on the way are shared with the stored document until
		// copied: copy each once, the first time a change passes it.
		at := strings.Join(parts[:i+1], ".")
		next := obj(parent[p])
		switch {
		case next == nil:
			next = map[string]any{}
			parent[p] = next
			copied[at] = true
		case !copied[at]:
			next = maps.Clone(next)
			parent[p] = next
			copied[at] = true
		}
		parent = next
	}
	key := parts[len(parts)-1]
	cur, exists := parent[key]
	if s, isString := cur.(string); isString || !exists || cur == nil {
		// Bonuses are formula strings: adding appends the term.
		switch mode {
		case 2:
			parent[key] = joinFormula(s, value)
		case 5:
			parent[key] = value
		}
		return
	}
	n, ok := num(cur)
	delta, ok2 := num(value)
	if !ok || !ok2 {
		return
	}
	switch mode {
	case 1:
		parent[key] = n * delta
	case 2:
		parent[key] = n + delta
	case 3:
		parent[key] = math.Min(n, delta)
	case 4:
		parent[key] = math.Max(n, delta)
	case 5:
		parent[key] = delta
	}
}

// joinFormula adds a term to a formula.
func joinFormula(formula, term string) string {
	formula, term = strings.TrimSpace(formula), strings.TrimSpace(term)
	switch {
	case formula == "":
		return term
	case term == "":
		return formula
	case strings.HasPrefix(term, "+") || strings.HasPrefix(term, "-"):
		return formula + " " + term
	}
	return formula + " + " + term
}

// asList returns v as a list, or nil.
func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
