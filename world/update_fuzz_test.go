package world

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fuzzActor is the document the update fuzz target changes: nested objects,
// arrays, embedded items and ownership, as a real actor has.
const fuzzActor = `{
	"_id": "ActorFuzz0000001", "name": "Fuzz", "type": "character",
	"system": {"attributes": {"hp": {"value": 10, "max": 12}}, "currency": {"gp": 5}, "traits": ["a", "b"]},
	"flags": {"core": {"sheet": null}},
	"ownership": {"default": 0, "Player0000000001": 3},
	"items": [{"_id": "ItemFuzz00000001", "name": "Sword"}],
	"effects": []
}`

// FuzzApplyDiff applies arbitrary `data` objects (dotted keys, `-=` and
// `==` keys, nesting) to an actor. The update must either fail with a world
// error of kind ErrInvalid, or give a document that keeps its id and
// embedded collections, holds no deletion key, is still JSON, nests no
// deeper than the depth limit (a small one here, so that the fuzzer reaches
// it), holds none of the refused keys, and leaves the current version
// untouched. The fifth-edition rules check the actor's numbers (see
// systemRules). `go test` runs the seeds; `make fuzz` explores.
func FuzzApplyDiff(f *testing.F) {
	for _, seed := range []string{
		`{"system.attributes.hp.value": 12}`,
		`{"system": {"attributes.hp.max": 20}, "system.currency.gp": 1}`,
		`{"-=flags": null, "system.-=traits": null}`,
		`{"==system": {"x": 1}}`,
		`{"flags.core.-=sheet": null, "flags.new": {"-=gone": null, "kept": true}}`,
		`{"a..b": 1}`, `{".": 1}`, `{"-=": 1}`, `{"==": 1}`, `{"-=a.b": 1}`,
		`{"_id": "ActorFuzz0000001", "uuid": "x"}`, `{"_id": "Other00000000001"}`,
		`{"_stats.x": 1}`, `{"items": []}`, `{"items.0.name": "x"}`, `{"effects": null}`,
		`{"name": ""}`, `{"name": 5}`, `{"-=name": null}`,
		`{"==-=x": 1}`, `{"system": {"==-=x": {"-=y": 1}}}`, `{"-===x": 1}`,
		`{"ownership.Player0000000002": 3}`, `{"system.a": 1, "system": 2}`,
		`{"a": {"b": {"c": {"d": {"e": [1, {"-=f": 1}]}}}}}`,
		`{"a.b.c.d.e.f.g": 1}`, `{"a.b.c": {"d.e.f": [[1]]}}`, `{"a": [[[[[[[1]]]]]]]}`,
		`{"__proto__": {"x": 1}}`, `{"flags.__proto__.x": 1}`, `{"constructor.prototype.x": 1}`,
		`{"==__proto__": 1}`, `{"-=constructor": null}`, `{"a": [{"prototype": 1}]}`,
		`{"system.attributes.hp.value": "7"}`, `{"system.abilities": {"str": {"-=value": null}}}`,
		`{"system.attributes.==hp": {"value": true}}`, `{"system": {"skills.ste.value": "0.5"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var diff map[string]any
		if json.Unmarshal(raw, &diff) != nil || diff == nil {
			return
		}
		var cur Document
		if err := json.Unmarshal([]byte(fuzzActor), &cur); err != nil {
			t.Fatal(err)
		}
		before := Clone(cur)
		next, err := applyDiff(typeActor, "", cur, diff, Limits{MaxDepth: fuzzDepth}, rulesFor("dnd5e"))
		if !reflect.DeepEqual(cur, before) {
			t.Fatalf("applyDiff changed the current version:\n%v\nwas\n%v", cur, before)
		}
		if err != nil {
			var we *Error
			if !errors.As(err, &we) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %T %v is not an ErrInvalid world error", err, err)
			}
			return
		}
		if next["_id"] != cur["_id"] {
			t.Fatalf("_id changed to %v", next["_id"])
		}
		for _, key := range []string{"items", "effects", "_stats"} {
			if !reflect.DeepEqual(next[key], cur[key]) {
				t.Fatalf("%s changed to %v", key, next[key])
			}
		}
		if s, _ := next["name"].(string); s == "" {
			t.Fatalf("name became %v", next["name"])
		}
		if path := deletionKey(next, ""); path != "" {
			t.Fatalf("deletion key stored at %s: %v", path, next)
		}
		if _, err := json.Marshal(next); err != nil {
			t.Fatalf("result is not JSON: %v", err)
		}
		if depthOver(next, 1, fuzzDepth) {
			t.Fatalf("result nests deeper than %d levels: %v", fuzzDepth, next)
		}
		if path := refusedKeyPath(next, ""); path != "" {
			t.Fatalf("refused key stored at %s: %v", path, next)
		}
	})
}

// fuzzDepth is the depth limit FuzzApplyDiff applies.
const fuzzDepth = 6

// refusedKeyPath returns the path of a key refusedKey refuses, stored in
// v's objects or arrays, or "".
func refusedKeyPath(v any, at string) string {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if refusedKey(k) {
				return at + "." + k
			}
			if p := refusedKeyPath(e, at+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, e := range x {
			if p := refusedKeyPath(e, at+"."+strconv.Itoa(i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// deletionKey returns the path of a `-=` key stored in v's objects, or "".
func deletionKey(v any, at string) string {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.HasPrefix(k, "-=") {
				return at + "." + k
			}
			if p := deletionKey(e, at+"."+k); p != "" {
				return p
			}
		}
	}
	// Arrays are values, stored as given: a "-=" key inside one is data.
	return ""
}

// FuzzParseUUID checks that any text either parses into a ref whose parts
// spell the uuid again, with well-formed ids and types that hold each
// other, or is refused with ErrInvalid.
func FuzzParseUUID(f *testing.F) {
	for _, seed := range []string{
		"Actor.ariaVale00000001", "Actor.ariaVale00000001.Item.longsword0000001",
		"Actor.ariaVale00000001.Item.longsword0000001.ActiveEffect.bless00000000001",
		"Scene.scene00000000001.Token.token00000000001", "Item.x", "Actor.", ".", "", "Actor",
		"Actor.ariaVale00000001.", "Actor.ariaVale00000001..", "Token.token00000000001",
		"Actor.ariaVale00000001.Token.token00000000001", "Actor.ariaVale0000000\u00e9",
		"JournalEntry.journal000000001.JournalEntryPage.page000000000001", "actor.ariaVale00000001",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, uuid string) {
		r, err := parseUUID(uuid)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if r.uuid != uuid || len(r.segs) == 0 {
			t.Fatalf("ref %+v for %q", r, uuid)
		}
		parts := make([]string, 0, 2*len(r.segs))
		for i, s := range r.segs {
			if !validID(s.id) {
				t.Fatalf("bad id %q accepted in %q", s.id, uuid)
			}
			if i == 0 && (!s.typ.topLevel || s.field != "") {
				t.Fatalf("%q: first step %s is not a top-level type", uuid, s.typ.name)
			}
			if i > 0 {
				f, ok := r.segs[i-1].typ.field(s.typ.name)
				if !ok || f.key != s.field {
					t.Fatalf("%q: %s does not hold %s in %q", uuid, r.segs[i-1].typ.name, s.typ.name, s.field)
				}
			}
			parts = append(parts, s.typ.name, s.id)
		}
		if got := strings.Join(parts, "."); got != uuid {
			t.Fatalf("ref spells %q, not %q", got, uuid)
		}
		if r.embedded() && r.parent().uuid+"."+r.typ().name+"."+r.id() != uuid {
			t.Fatalf("parent of %q is %q", uuid, r.parent().uuid)
		}
	})
}
