package dnd5e

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// rollKind is what a d20 roll is, for the sources of advantage and
// disadvantage that apply to it.
type rollKind int

const (
	// rollCheck is an ability check; a skill check is one too.
	rollCheck rollKind = iota
	// rollSave is a saving throw; death and concentration saves are too.
	rollSave
	// rollAttack is an attack roll.
	rollAttack
)

// rollSpec names a d20 roll: its kind, the ability it uses and, for a
// skill check, the skill; extra names the system's roll configuration of
// a save that has its own (`attributes.death`, `attributes.concentration`).
type rollSpec struct {
	kind    rollKind
	ability string
	skill   string
	extra   string
}

// sign is the mode as the system's number: 1 advantage, -1 disadvantage.
func sign(m RollMode) int {
	switch m.Mode {
	case "advantage":
		return 1
	case "disadvantage":
		return -1
	}
	return 0
}

// conditionModes are the system's condition effects on d20 rolls (its
// `conditionEffects`, after SRD 5.1 Appendix A): which statuses, and from
// which exhaustion level, give disadvantage to which rolls. A skill check
// is an ability check; death and concentration saves are saving throws.
var conditionModes = []struct {
	kind       rollKind
	ability    string // only saves of this ability ("": any)
	statuses   []string
	exhaustion int // from this exhaustion level (0: none)
}{
	// Exhaustion 1 and poisoned: disadvantage on ability checks.
	{kind: rollCheck, statuses: []string{"poisoned"}, exhaustion: 1},
	// Exhaustion 3: disadvantage on saving throws.
	{kind: rollSave, exhaustion: 3},
	// Exhaustion 3 and poisoned: disadvantage on attack rolls.
	{kind: rollAttack, statuses: []string{"poisoned"}, exhaustion: 3},
	// Restrained: disadvantage on Dexterity saving throws.
	{kind: rollSave, ability: "dex", statuses: []string{"restrained"}},
}

// modeChange is an active effect's change to a roll mode field (a key
// ending in `.roll.mode`), which the system counts rather than adds.
type modeChange struct {
	path   string // the field's path in the system data, `skills.ste.roll.mode`
	mode   int    // the effect change mode: 2 add, 3 downgrade, 4 upgrade, 5 override
	value  int    // -1, 0 or 1
	effect string // the effect's name
}

// modeCounts gathers sources of advantage and disadvantage the way the
// system's AdvantageModeField does.
type modeCounts struct {
	advantage, disadvantage                   []string
	advantageSuppressed, disadvantageSuppress bool
	override                                  *int
	overrideBy                                string
}

// rollMode works out the mode of a d20 roll of the actor: the caller's
// request, the conditions the actor has (exhaustion, poisoned, ...),
// armour that hinders Stealth, and the system's roll mode fields with the
// active effects that change them. Advantage and disadvantage cancel out
// whatever their numbers (SRD 5.1, "Advantage and Disadvantage"); an
// override decides alone; a downgrade or an upgrade suppresses advantage
// or disadvantage.
func (a *actor) rollMode(spec rollSpec, advantage, disadvantage bool) RollMode {
	var c modeCounts
	if advantage {
		c.advantage = append(c.advantage, "requested")
	}
	if disadvantage {
		c.disadvantage = append(c.disadvantage, "requested")
	}
	statuses := a.statuses()
	exhaustion := a.exhaustion()
	for _, cm := range conditionModes {
		if cm.kind != spec.kind || cm.ability != "" && cm.ability != spec.ability {
			continue
		}
		if cm.exhaustion > 0 && exhaustion >= cm.exhaustion {
			c.disadvantage = append(c.disadvantage, fmt.Sprintf("Exhaustion %d", exhaustion))
		}
		for _, s := range cm.statuses {
			if slices.Contains(statuses, s) {
				c.disadvantage = append(c.disadvantage, conditionName(s))
			}
		}
	}
	if spec.kind == rollCheck && spec.skill == "ste" {
		for _, it := range a.items {
			if str(it["type"]) == "equipment" && at(it, "system.equipped") == true && stealthDisadvantage(it) {
				c.disadvantage = append(c.disadvantage, str(it["name"]))
			}
		}
	}
	for _, path := range spec.modePaths() {
		if v, ok := num(at(a.system, path)); ok {
			switch int(v) {
			case 1:
				c.advantage = append(c.advantage, path)
			case -1:
				c.disadvantage = append(c.disadvantage, path)
			}
		}
		for _, ch := range a.modes {
			if ch.path == path {
				c.apply(ch)
			}
		}
	}
	return c.resolve()
}

// modePaths are the system's roll mode fields a roll reads: a skill's and
// its ability's check, an ability's check or save, or a save's own.
func (s rollSpec) modePaths() []string {
	var out []string
	switch s.kind {
	case rollCheck:
		if s.skill != "" {
			out = append(out, "skills."+s.skill+".roll.mode")
		}
		out = append(out, "abilities."+s.ability+".check.roll.mode")
	case rollSave:
		if s.extra != "" {
			out = append(out, s.extra+".roll.mode")
		}
		if s.ability != "" {
			out = append(out, "abilities."+s.ability+".save.roll.mode")
		}
	}
	return out
}

// apply counts one effect change as the system's AdvantageModeField does.
func (c *modeCounts) apply(ch modeChange) {
	switch ch.mode {
	case 2: // add
		switch ch.value {
		case 1:
			c.advantage = append(c.advantage, ch.effect)
		case -1:
			c.disadvantage = append(c.disadvantage, ch.effect)
		}
	case 3: // downgrade: no advantage, perhaps disadvantage
		if ch.value == -1 || ch.value == 0 {
			c.advantageSuppressed = true
			if ch.value == -1 {
				c.disadvantage = append(c.disadvantage, ch.effect)
			}
		}
	case 4: // upgrade: no disadvantage, perhaps advantage
		if ch.value == 1 || ch.value == 0 {
			c.disadvantageSuppress = true
			if ch.value == 1 {
				c.advantage = append(c.advantage, ch.effect)
			}
		}
	case 5: // override
		if ch.value >= -1 && ch.value <= 1 {
			v := ch.value
			c.override, c.overrideBy = &v, ch.effect
		}
	}
}

// resolve is the final mode.
func (c *modeCounts) resolve() RollMode {
	m := RollMode{Advantage: c.advantage, Disadvantage: c.disadvantage, Override: c.overrideBy}
	if m.Advantage == nil {
		m.Advantage = []string{}
	}
	if m.Disadvantage == nil {
		m.Disadvantage = []string{}
	}
	sign := 0
	switch {
	case c.override != nil:
		sign = *c.override
	default:
		if len(c.advantage) > 0 && !c.advantageSuppressed {
			sign++
		}
		if len(c.disadvantage) > 0 && !c.disadvantageSuppress {
			sign--
		}
	}
	m.Mode = [...]string{"disadvantage", "normal", "advantage"}[sign+1]
	return m
}

// stealthDisadvantage reports armour that hinders Stealth: the
// `stealthDisadvantage` property, or the older `stealth` flag.
func stealthDisadvantage(it map[string]any) bool {
	return slices.Contains(asList(at(it, "system.properties")), any("stealthDisadvantage")) || at(it, "system.stealth") == true
}

// statuses are the statuses of the actor's enabled effects.
func (a *actor) statuses() []string {
	var out []string
	for _, e := range asList(a.doc["effects"]) {
		eff := obj(e)
		if eff == nil || eff["disabled"] == true {
			continue
		}
		for _, s := range asList(eff["statuses"]) {
			if id := str(s); id != "" && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// exhaustion is the actor's exhaustion level, 0 to 6.
func (a *actor) exhaustion() int {
	return min(6, max(0, int(math.Floor(numOr(at(a.system, "attributes.exhaustion"), 0)))))
}

// conditionName names a status the way the sheet does.
func conditionName(id string) string {
	if n := conditionNames[id]; n != "" {
		return n
	}
	return strings.ToUpper(id[:1]) + id[1:]
}
