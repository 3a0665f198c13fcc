package world

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// nested returns a value that nests levels objects deep: {"a":{"a":...1}}.
func nested(levels int) any {
	var v any = 1.0
	for range levels {
		v = map[string]any{"a": v}
	}
	return v
}

// TestDepthLimit: every way a caller's value enters the world refuses
// nesting past the limit with ErrInvalid naming it, and changes nothing;
// values at the limit are stored.
func TestDepthLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	tw.limits = Limits{MaxDepth: 8}
	before := mustGet(t, tw, actorOwner)

	// The data object is level 1, so the object in flags is at 2 and the
	// seven levels of nested(7) fill the limit.
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"flags": nested(7)}); err != nil {
		t.Fatalf("update at the limit: %v", err)
	}
	_, err := tw.Update(ctx, nil, actorOwner, Document{"flags": nested(8)})
	wantError(t, err, ErrInvalid, "'data' nests deeper than the limit of 8 levels (at data.flags.a.a.a.a.a.a.a)")
	// Arrays count as levels too.
	deepArray := []any{[]any{[]any{[]any{[]any{[]any{[]any{[]any{1.0}}}}}}}}
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"flags": deepArray}); err == nil || !strings.Contains(err.Error(), "nests deeper than the limit of 8 levels (at data.flags.0.0.0.0.0.0.0)") {
		t.Fatalf("array past the limit: %v", err)
	}
	// Dotted keys create levels: 8 parts, the last holding an object.
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"flags.b.c.d.e.f.g.h": Document{"x": 1}}); err == nil ||
		!strings.Contains(err.Error(), "'data' nests deeper than the limit of 8 levels once its dotted keys are expanded") {
		t.Fatalf("dotted keys past the limit: %v", err)
	}
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"flags.b.c.d.e.f.g.h": 1}); err != nil {
		t.Fatalf("dotted keys at the limit: %v", err)
	}
	_, err = tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"name": "Deep", "type": "npc", "system": nested(8)}})
	wantError(t, err, ErrInvalid, "'data' nests deeper than the limit of 8 levels (at data.system.a.a.a.a.a.a.a)")
	// An embedded document counts from itself.
	_, err = tw.Create(ctx, nil, CreateParams{Type: "Item", ParentUUID: actorOwner, Data: Document{"name": "Deep", "system": nested(8)}})
	wantError(t, err, ErrInvalid, "'data' nests deeper than the limit of 8 levels (at data.system.a.a.a.a.a.a.a)")
	_, err = tw.Select(ctx, nil, SelectParams{Match: Document{"actor.flags": nested(8)}})
	wantError(t, err, ErrInvalid, "'data' nests deeper than the limit of 8 levels (at data.actor.flags.a.a.a.a.a.a.a)")
	// Inside a transaction, as the ruleset and scripts write.
	err = tw.Mutate(ctx, func(tx *Tx) error {
		doc, err := tx.Get(actorOwner)
		if err != nil {
			return err
		}
		doc["flags"] = nested(8)
		return tx.Put(actorOwner, doc)
	})
	wantError(t, err, ErrInvalid, "'data' nests deeper than the limit of 8 levels (at data.flags.a.a.a.a.a.a.a)")

	after := mustGet(t, tw, actorOwner)
	delete(after, "_stats")
	delete(before, "_stats")
	after["flags"] = before["flags"]
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("refused writes changed the actor")
	}
}

// TestDepthLimitDefault: a 5,000-level value, which JSON decoders take,
// is refused at the default limit; the demo-sized documents pass.
func TestDepthLimitDefault(t *testing.T) {
	t.Parallel()
	tw := newTestWorld(t)
	_, err := tw.Update(context.Background(), nil, actorOwner, Document{"flags": nested(5000)})
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "nests deeper than the limit of 64 levels") {
		t.Fatalf("5,000 levels: %v", err)
	}
	if _, err := tw.Update(context.Background(), nil, actorOwner, Document{"flags": nested(DefaultMaxDepth - 1)}); err != nil {
		t.Fatalf("at the default limit: %v", err)
	}
}

// TestRefusedKeys: `__proto__`, `constructor` and `prototype` are refused
// as keys, dotted parts of keys and with `-=`/`==` prefixes, at any depth
// and through every entry; keys that only contain the words are data.
func TestRefusedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	for _, data := range []Document{
		{"__proto__": Document{"isGM": true}},
		{"flags": Document{"x": []any{Document{"constructor": 1}}}},
		{"flags.__proto__.polluted": 1},
		{"constructor.prototype.polluted": 1},
		{"==prototype": Document{}},
		{"flags.-=__proto__": nil},
	} {
		_, err := tw.Update(ctx, nil, actorOwner, data)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "keys named __proto__, constructor and prototype are refused") {
			t.Errorf("update %v: %v", data, err)
		}
	}
	_, err := tw.Update(ctx, nil, actorOwner, Document{"flags": Document{"m": Document{"__proto__": 1}}})
	wantError(t, err, ErrInvalid, `'data' holds the key "__proto__" (at data.flags.m.__proto__): keys named __proto__, constructor and prototype are refused`)
	_, err = tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"name": "P", "type": "npc", "prototype": 1}})
	wantError(t, err, ErrInvalid, `'data' holds the key "prototype" (at data.prototype): keys named __proto__, constructor and prototype are refused`)
	_, err = tw.Select(ctx, nil, SelectParams{Match: Document{"actor.__proto__.x": 1}})
	if err == nil || !errors.Is(err, ErrInvalid) {
		t.Errorf("select: %v", err)
	}
	// A message never echoes a long key, or a long path, whole.
	long := strings.Repeat("k", 100000)
	_, err = tw.Update(ctx, nil, actorOwner, Document{"flags": Document{long: Document{long + ".__proto__": 1}}})
	if err == nil || len(err.Error()) > 500 || !strings.Contains(err.Error(), "(at data.flags.kkk") {
		t.Errorf("long key: %.600v", err)
	}
	var deep any = 1.0
	for range 100 {
		deep = Document{strings.Repeat("b", 30): deep}
	}
	_, err = tw.Update(ctx, nil, actorOwner, Document{"flags": deep})
	if err == nil || len(err.Error()) > 400 || !strings.Contains(err.Error(), "b...b") {
		t.Errorf("long path: %v", err)
	}
	// The words inside other keys are plain data.
	doc, err := tw.Update(ctx, nil, actorOwner, Document{"flags": Document{"myconstructor": 1, "prototypes": 2, "__proto__x": 3}})
	if err != nil {
		t.Fatalf("keys containing the words: %v", err)
	}
	if f := doc["flags"].(map[string]any); f["myconstructor"] != 1.0 || f["__proto__x"] != 3.0 {
		t.Fatalf("flags: %v", f)
	}
}

// TestDocumentSizeLimit: a write whose resulting document is over the limit
// fails with ErrTooLarge naming it and changes nothing, whichever
// operation makes it (update, creation, an embedded creation that grows
// the parent, a transaction); writes that fit, and other writers, go on.
// A document already over the limit may shrink.
func TestDocumentSizeLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	size := func(uuid string) int {
		raw, err := tw.GetJSON(ctx, nil, uuid)
		if err != nil {
			t.Fatal(err)
		}
		var doc Document
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		delete(doc, "uuid")
		data, _ := encodeDoc(doc)
		return len(data)
	}
	base := size(actorOwner)
	const limit = 8 << 10
	tw.limits = Limits{MaxDocumentBytes: limit}
	seqBefore := len(tw.log.all())

	// Fill the actor to exactly the limit: a flag string of the right
	// length (the key, quotes and braces cost the rest).
	overhead := len(`,"flags":{"pad":""}`) - len(`,"flags":{}`)
	pad := strings.Repeat("x", limit-base-overhead)
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"flags.pad": pad}); err != nil {
		t.Fatalf("update to exactly the limit: %v", err)
	}
	if got := size(actorOwner); got != limit {
		t.Fatalf("the actor is %d bytes, want exactly %d", got, limit)
	}
	_, err := tw.Update(ctx, nil, actorOwner, Document{"flags.pad": pad + "y"})
	wantError(t, err, ErrTooLarge, "Actor.ActorOwner000001 would be 8193 bytes of JSON, over the document size limit of 8192 bytes")
	tooLarge := func(err error, uuid string) {
		t.Helper()
		if !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), uuid+" would be ") || !strings.HasSuffix(err.Error(), " bytes of JSON, over the document size limit of 8192 bytes") {
			t.Fatalf("error = %v, want %s over the size limit", err, uuid)
		}
	}
	// An embedded document grows its parent.
	_, err = tw.Create(ctx, nil, CreateParams{Type: "Item", ParentUUID: actorOwner, Data: Document{"name": "Feather"}})
	tooLarge(err, actorOwner)
	_, err = tw.Update(ctx, nil, swordUUID, Document{"name": "A longer sword"})
	tooLarge(err, actorOwner)
	// A new document over the limit.
	_, err = tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"_id": "BigActor00000001", "name": "Big", "type": "npc", "flags": Document{"pad": pad + pad}}, KeepID: true})
	tooLarge(err, "Actor.BigActor00000001")
	// A transaction fails whole: its other, small change is not kept.
	err = tw.Mutate(ctx, func(tx *Tx) error {
		if _, err := tx.Update(actorBob, Document{"name": "Roberta"}); err != nil {
			return err
		}
		_, err := tx.Update(actorOwner, Document{"flags.more": "z"})
		return err
	})
	tooLarge(err, actorOwner)
	if mustGet(t, tw, actorBob)["name"] == "Roberta" {
		t.Fatal("the failed transaction's other change was kept")
	}
	if n := len(tw.log.all()); n != seqBefore+1 {
		t.Fatalf("%d commits after the refused writes, want %d", n, seqBefore+1)
	}
	// Other writes go on.
	if _, err := tw.Update(ctx, nil, actorBob, Document{"name": "Roberta"}); err != nil {
		t.Fatalf("another document: %v", err)
	}

	// Lowering the limit leaves the actor over it: it may change without
	// growing, and shrink, but not grow.
	tw.limits = Limits{MaxDocumentBytes: limit / 2}
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"flags.pad": strings.Repeat("z", len(pad))}); err != nil {
		t.Fatalf("same size over a lowered limit: %v", err)
	}
	_, err = tw.Update(ctx, nil, actorOwner, Document{"flags.pad": pad + "y"})
	wantError(t, err, ErrTooLarge, "")
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"flags.-=pad": nil}); err != nil {
		t.Fatalf("shrinking over a lowered limit: %v", err)
	}
}

// TestDocumentSizeMeasure: the size the limit measures is the length of
// the stored JSON, for every document of the test world and for values
// whose encoding is not one byte per character.
func TestDocumentSizeMeasure(t *testing.T) {
	t.Parallel()
	tw := newTestWorld(t)
	for ty, table := range tw.snap.Load().docs {
		table.each(func(id string, doc Document) bool {
			_, data, _, err := encodeFull(&tw.embedded, ty, ty.name+"."+id, doc)
			if err != nil {
				t.Fatal(err)
			}
			if size := documentSize(&tw.embedded, ty, doc); size != len(data) {
				t.Errorf("%s.%s: measured %d bytes, stored %d", ty.name, id, size, len(data))
			}
			return true
		})
	}
	for _, v := range []any{"\u2028\x00\"\\\n\xff é", math.Copysign(0, -1), 1e21, 123456.789, 1e-7, -999999999999999.0, map[string]any(nil), []any(nil)} {
		want, _ := encodeJSON(v)
		if size := valueSize(v); size != len(want) {
			t.Errorf("%#v: measured %d, encoded %d (%s)", v, size, len(want), want)
		}
	}
}

// TestDocumentSizeFromChanges: the size the engine remembers for a large
// document, worked out from its previous size and what each write changed,
// is the length of the stored JSON after every kind of write.
func TestDocumentSizeFromChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	key := docKey{typeActor, strings.TrimPrefix(actorOwner, "Actor.")}
	check := func(step string) {
		t.Helper()
		doc := tw.snap.Load().docs[typeActor].get(key.id)
		_, data, _, err := encodeFull(nil, typeActor, actorOwner, doc)
		if err != nil {
			t.Fatal(err)
		}
		m, ok := tw.sizes[key]
		if !ok || m.doc != identity(doc) {
			t.Fatalf("%s: no size remembered for the current version", step)
		}
		if m.size != len(data) {
			t.Fatalf("%s: remembered %d bytes, stored %d", step, m.size, len(data))
		}
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"grow past the memo size", func() error {
			_, err := tw.Update(ctx, nil, actorOwner, Document{"flags.pad": strings.Repeat("p", memoBytes)})
			return err
		}},
		{"change a nested number", func() error {
			_, err := tw.Update(ctx, nil, actorOwner, Document{"system.attributes.hp.value": 123456.5})
			return err
		}},
		{"negative zero", func() error {
			_, err := tw.Update(ctx, nil, actorOwner, Document{"system.attributes.hp.value": math.Copysign(0, -1)})
			return err
		}},
		{"add and delete keys", func() error {
			_, err := tw.Update(ctx, nil, actorOwner, Document{"flags.new": Document{"a": []any{1, "\u2028", nil}}, "flags.-=pad": nil, "flags.pad2": strings.Repeat("\"", memoBytes)})
			return err
		}},
		{"replace an object", func() error {
			_, err := tw.Update(ctx, nil, actorOwner, Document{"==flags": Document{"pad": strings.Repeat("x", memoBytes), "k": true}})
			return err
		}},
		{"change a value's type", func() error {
			_, err := tw.Update(ctx, nil, actorOwner, Document{"flags.k": Document{"now": "an object"}, "name": "Renamed hero"})
			return err
		}},
		{"update an embedded document", func() error {
			_, err := tw.Update(ctx, nil, swordUUID, Document{"system.damage": "1d8 + 2", "name": "S"})
			return err
		}},
		{"add an embedded document", func() error {
			_, err := tw.Create(ctx, nil, CreateParams{Type: "Item", ParentUUID: actorOwner, Data: Document{"name": "Gem", "system": Document{"price": 5}}})
			return err
		}},
		{"delete an embedded document", func() error { return tw.Delete(ctx, nil, potionUUID) }},
		{"put back a private copy", func() error {
			return tw.Mutate(ctx, func(tx *Tx) error {
				doc, err := tx.Get(actorOwner)
				if err != nil {
					return err
				}
				doc["flags"].(map[string]any)["k"] = false
				return tx.Put(actorOwner, doc)
			})
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		check(s.name)
	}
}
