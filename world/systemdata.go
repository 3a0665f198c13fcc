package world

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// numberField is a numeric field of a game system's data, checked and
// cleaned on every write the way the system's data model does (its
// NumberField): a numeric string becomes its number, an integer field
// rounds, a value below min (or above max) stops there, null is kept only
// where the field allows it, and anything else is refused naming the
// field. Paths are dotted from the document's root; `*` stands for any
// key (an ability, a skill).
type numberField struct {
	path     string
	integer  bool
	min, max *float64
	nullable bool
}

// systemRules are the numeric fields of one game system's documents, by
// document type and by the document's own `type`.
type systemRules struct {
	fields map[*docType][]numberField
	// roots are the trees of the fields' paths (buildFieldTree).
	roots map[*docType]*fieldNode
	// types limits the rules to documents of these `type`s (nil: all).
	types map[*docType][]string
}

// zero, one and two bound the fields below.
var zero, one, two = ptr(0.0), ptr(1.0), ptr(2.0)

func ptr(v float64) *float64 { return &v }

// dnd5eActorFields are the numeric fields of a fifth-edition character or
// NPC (the system's CharacterData and NPCData models), relative to the
// actor's `system` object. Every operation of the ruleset reads them, so
// none may hold a value that would break it.
var dnd5eActorFields = []numberField{
	{path: "abilities.*.value", integer: true, min: zero},
	{path: "abilities.*.proficient", integer: true, min: zero, max: one, nullable: true},
	{path: "abilities.*.max", integer: true, min: zero, nullable: true},
	{path: "attributes.hp.value", integer: true, min: zero},
	{path: "attributes.hp.max", integer: true, min: zero, nullable: true},
	{path: "attributes.hp.temp", integer: true, min: zero, nullable: true},
	{path: "attributes.hp.tempmax", integer: true, nullable: true},
	{path: "attributes.death.success", integer: true, min: zero},
	{path: "attributes.death.failure", integer: true, min: zero},
	{path: "attributes.exhaustion", integer: true, min: zero},
	{path: "attributes.attunement.max", integer: true, min: zero},
	{path: "attributes.ac.flat", integer: true, min: zero, nullable: true},
	{path: "attributes.movement.burrow", min: zero, nullable: true},
	{path: "attributes.movement.climb", min: zero, nullable: true},
	{path: "attributes.movement.fly", min: zero, nullable: true},
	{path: "attributes.movement.swim", min: zero, nullable: true},
	{path: "attributes.movement.walk", min: zero, nullable: true},
	{path: "currency.pp", integer: true, min: zero},
	{path: "currency.gp", integer: true, min: zero},
	{path: "currency.ep", integer: true, min: zero},
	{path: "currency.sp", integer: true, min: zero},
	{path: "currency.cp", integer: true, min: zero},
	{path: "details.xp.value", integer: true, min: zero},
	{path: "details.cr", min: zero, nullable: true},
	{path: "skills.*.value", min: zero, max: two},
	{path: "spells.*.value", integer: true, min: zero},
	{path: "spells.*.max", integer: true, min: zero, nullable: true},
	{path: "spells.*.override", integer: true, min: zero, nullable: true},
	{path: "resources.primary.value", integer: true, nullable: true},
	{path: "resources.primary.max", integer: true, nullable: true},
	{path: "resources.secondary.value", integer: true, nullable: true},
	{path: "resources.secondary.max", integer: true, nullable: true},
	{path: "resources.tertiary.value", integer: true, nullable: true},
	{path: "resources.tertiary.max", integer: true, nullable: true},
	{path: "resources.legact.value", integer: true, min: zero, nullable: true},
	{path: "resources.legact.max", integer: true, min: zero, nullable: true},
	{path: "resources.legres.value", integer: true, min: zero, nullable: true},
	{path: "resources.legres.max", integer: true, min: zero, nullable: true},
}

// rulesBySystem are the systems whose data the world checks.
var rulesBySystem = map[string]*systemRules{
	"dnd5e": {
		fields: map[*docType][]numberField{
			typeActor: under("system", dnd5eActorFields),
			// An unlinked token's own changes to its actor.
			typeToken: under("delta.system", dnd5eActorFields),
		},
		types: map[*docType][]string{typeActor: {"character", "npc"}},
	},
}

func init() {
	for _, r := range rulesBySystem {
		r.roots = map[*docType]*fieldNode{}
		for t, fields := range r.fields {
			r.roots[t] = buildFieldTree(fields)
		}
	}
}

// under prefixes the fields' paths.
func under(prefix string, fields []numberField) []numberField {
	out := make([]numberField, len(fields))
	for i, f := range fields {
		f.path = prefix + "." + f.path
		out[i] = f
	}
	return out
}

// rulesFor returns the rules of a world's system, nil when it has none.
func rulesFor(system string) *systemRules { return rulesBySystem[system] }

// clean checks and cleans, in place, what a write puts into a document of
// type t: data is an expanded update diff (`-=` and `==` keys allowed) or a
// whole new document; docType is the document's own `type` after the
// write. Objects on the way to a field must stay objects, and a field that
// may not be null may not be deleted either.
func (r *systemRules) clean(t *docType, docType string, data map[string]any) error {
	if r == nil {
		return nil
	}
	if types, ok := r.types[t]; ok && !slices.Contains(types, docType) {
		return nil
	}
	fields := r.fields[t]
	if len(fields) == 0 {
		return nil
	}
	return cleanObject([]*fieldNode{r.roots[t]}, nil, data)
}

// fieldNode is one segment of the fields' paths, in a tree of them built
// once per document type (buildFieldTree), so that a write's keys are
// matched one segment at a time against the fields that lead through
// their object, rather than each key against every field's whole path
// (this runs for every key of every write).
type fieldNode struct {
	children map[string]*fieldNode // by segment
	star     *fieldNode            // `*`: any key
	// field is the first field, in the rules' order, whose path ends
	// here; order is its position.
	field *numberField
	order int
}

// buildFieldTree returns the tree of the fields' paths.
func buildFieldTree(fields []numberField) *fieldNode {
	root := &fieldNode{}
	for i := range fields {
		n := root
		for seg := range strings.SplitSeq(fields[i].path, ".") {
			next := n.star
			if seg != "*" {
				next = n.children[seg]
			}
			if next == nil {
				next = &fieldNode{}
				if seg == "*" {
					n.star = next
				} else {
					if n.children == nil {
						n.children = map[string]*fieldNode{}
					}
					n.children[seg] = next
				}
			}
			n = next
		}
		if n.field == nil {
			n.field, n.order = &fields[i], i
		}
	}
	return root
}

// cleanObject cleans the keys of one object of a write, at path; nodes
// are where the fields' paths that lead through the object are.
func cleanObject(nodes []*fieldNode, path []string, data map[string]any) error {
	for key, v := range data {
		name, deleted := strings.CutPrefix(key, "-=")
		name = strings.TrimPrefix(name, "==")
		var buf [4]*fieldNode
		field, next := nextField(nodes, name, buf[:0])
		isField, isParent := field != nil, field == nil && len(next) > 0
		if !isField && !isParent {
			continue
		}
		at := append(slices.Clip(path), name)
		dotted := func() string { return strings.Join(at, ".") }
		switch {
		case isField && deleted:
			if !field.nullable {
				return Errorf(ErrInvalid, "%s cannot be deleted", dotted())
			}
		case isField:
			cleaned, err := field.clean(dotted, v)
			if err != nil {
				return err
			}
			data[key] = cleaned
		case deleted:
			if len(at) > 1 || at[0] != "delta" {
				return Errorf(ErrInvalid, "%s cannot be deleted", dotted())
			}
		default:
			obj, ok := v.(map[string]any)
			if !ok {
				if v == nil && len(at) == 1 && at[0] == "delta" {
					continue // an unlinked token's changes may be reset
				}
				return Errorf(ErrInvalid, "%s must be an object, got %s", dotted(), describe(v))
			}
			if err := cleanObject(next, at, obj); err != nil {
				return err
			}
		}
	}
	return nil
}

// nextField follows a key from the nodes of its object: it returns the
// first field, in the rules' order, whose path ends at the key, if any,
// and the nodes of the paths that go on below it, appended to next (nil
// when no path goes through the key).
func nextField(nodes []*fieldNode, key string, next []*fieldNode) (*numberField, []*fieldNode) {
	for _, n := range nodes {
		if c := n.children[key]; c != nil {
			next = append(next, c)
		}
		if n.star != nil {
			next = append(next, n.star)
		}
	}
	var field *numberField
	order := 0
	for _, n := range next {
		if n.field != nil && (field == nil || n.order < order) {
			field, order = n.field, n.order
		}
	}
	if field != nil {
		return field, nil
	}
	// Only nodes with paths below them lead anywhere.
	kept := next[:0]
	for _, n := range next {
		if n.children != nil || n.star != nil {
			kept = append(kept, n)
		}
	}
	return nil, kept
}

// clean returns the value a field stores for v, or an error naming it
// (name makes the field's name, only when an error needs it).
func (f numberField) clean(name func() string, v any) (any, error) {
	kind := "a number"
	if f.integer {
		kind = "an integer"
	}
	var n float64
	switch x := v.(type) {
	case nil:
		if f.nullable {
			return nil, nil
		}
		return nil, Errorf(ErrInvalid, "%s must be %s, got null", name(), kind)
	case float64:
		n = x
	case string:
		s := strings.TrimSpace(x)
		if s == "" && f.nullable {
			return nil, nil
		}
		parsed, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(parsed) || math.IsInf(parsed, 0) {
			return nil, Errorf(ErrInvalid, "%s must be %s, got %s", name(), kind, describe(v))
		}
		n = parsed
	default:
		return nil, Errorf(ErrInvalid, "%s must be %s, got %s", name(), kind, describe(v))
	}
	if f.integer {
		n = math.Floor(n + 0.5) // JavaScript's Math.round
	}
	if f.min != nil {
		n = math.Max(n, *f.min)
	}
	if f.max != nil {
		n = math.Min(n, *f.max)
	}
	return n + 0, nil // + 0 turns -0 into 0
}

// describe names a refused value in an error.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return strconv.Quote(x)
	case nil:
		return "null"
	case bool:
		return fmt.Sprint(x)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprint(v)
}

// resetDeathSaves applies the rule that regaining hit points clears death
// saves (SRD 5.1, "Death Saving Throws": both counters reset to zero when
// you regain any hit points) to a new version of a fifth-edition actor:
// when its hit points go from 0 or below to above 0, both counters become
// 0. next must be fresh along system.attributes, which holds when its hit
// points changed.
func resetDeathSaves(system string, t *docType, before, next Document) {
	if system != "dnd5e" || t != typeActor {
		return
	}
	was, _ := number(propertyOr(before, "system.attributes.hp.value"))
	is, ok := number(propertyOr(next, "system.attributes.hp.value"))
	if !ok || was > 0 || is <= 0 {
		return
	}
	sys, _ := next["system"].(map[string]any)
	attrs, _ := sys["attributes"].(map[string]any)
	death, _ := attrs["death"].(map[string]any)
	if death == nil || (death["success"] == 0.0 && death["failure"] == 0.0) {
		return
	}
	reset := make(map[string]any, len(death))
	for k, v := range death {
		reset[k] = v
	}
	reset["success"], reset["failure"] = 0.0, 0.0
	attrs["death"] = reset
}

// propertyOr reads a dotted path, nil when missing.
func propertyOr(doc Document, path string) any {
	v, _ := Property(doc, path)
	return v
}
