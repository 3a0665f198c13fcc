package world

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// referenceJSON is what encoding/json writes with HTML escaping off.
func referenceJSON(t testing.TB, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// trickyStrings exercise every escaping rule.
var trickyStrings = []string{
	"", "plain", `quote " and \ backslash`, "<b>&amp;</b>", "tab\tnew\nline\rcr\bbs\fff",
	"\x00\x01\x1f\x7f", "é ü 漢字 🎲", "line\u2028para\u2029", "bad \xff\xfe utf8", "uuid", "uuid0", "uu", "Uuid", "~", "",
}

// randomValue builds a random tree of the types world data holds, with a
// few other types mixed in.
func randomValue(r *rand.Rand, depth int) any {
	n := r.IntN(12)
	if depth > 3 {
		n = r.IntN(6)
	}
	switch n {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return trickyStrings[r.IntN(len(trickyStrings))]
	case 3:
		return []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-7, 1e21, 123456789012, 1e-6, 3.14159, 1e300, 5e-324}[r.IntN(11)]
	case 4:
		return r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20))
	case 5:
		return []any{"typed", 42, json.Number("7"), []string{"a"}, map[string]int{"b": 1}, []any(nil), map[string]any(nil)}[r.IntN(7)]
	case 6, 7, 8:
		m := map[string]any{}
		for range r.IntN(8) {
			m[trickyStrings[r.IntN(len(trickyStrings))]+fmt.Sprint(r.IntN(3))] = randomValue(r, depth+1)
		}
		return m
	default:
		a := []any{}
		for range r.IntN(5) {
			a = append(a, randomValue(r, depth+1))
		}
		return a
	}
}

// TestEncodeJSONMatchesEncodingJSON: the fast encoder writes exactly what
// encoding/json writes, on random trees and on the demo world.
func TestEncodeJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		v := randomValue(r, 0)
		got, err := encodeJSON(v)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if want := referenceJSON(t, v); !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
	raw, err := os.ReadFile("demo/demo.json")
	if err != nil {
		t.Fatal(err)
	}
	var demo any
	if err := json.Unmarshal(raw, &demo); err != nil {
		t.Fatal(err)
	}
	got, err := encodeJSON(demo)
	if err != nil {
		t.Fatal(err)
	}
	if want := referenceJSON(t, demo); !bytes.Equal(got, want) {
		t.Error("the demo world serialises differently from encoding/json")
	}
	for _, bad := range []any{math.NaN(), map[string]any{"x": math.Inf(1)}, []any{make(chan int)}} {
		if _, err := encodeJSON(bad); err == nil {
			t.Errorf("encodeJSON(%v) succeeded", bad)
		}
	}
}

// TestEncodeFull: the row and the reader's JSON made in one go are what
// encodeDoc and the JSON cache make separately.
func TestEncodeFull(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	docs := []Document{{}, {"uuid": "kept"}, {"a": 1.0}, {"z": 1.0}, {"uuid0": 1.0, "uu": "x", "v": map[string]any{"uuid": "Actor.x"}}}
	for range 2000 {
		if m, ok := randomValue(r, 0).(map[string]any); ok {
			docs = append(docs, m)
		}
	}
	var c jsonCache
	for i, doc := range docs {
		uuid := "Actor.abcdefghijklmnop"
		full, data, _, err := encodeFull(nil, typeActor, uuid, doc)
		if err != nil {
			t.Fatalf("doc %d: %v", i, err)
		}
		if want := referenceJSON(t, doc); !bytes.Equal(data, want) {
			t.Fatalf("doc %d row:\n got %s\nwant %s", i, data, want)
		}
		want, err := c.full(uuid, doc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(full, want) {
			t.Fatalf("doc %d full:\n got %s\nwant %s", i, full, want)
		}
		if !strings.Contains(string(full), `"uuid":`) {
			t.Fatalf("doc %d: no uuid in %s", i, full)
		}
	}
}

// FuzzEncodeJSON compares the fast encoder with encoding/json on decoded
// JSON input, and the size the document size limit measures (limits.go)
// with the length of what the encoder writes.
func FuzzEncodeJSON(f *testing.F) {
	for _, s := range trickyStrings {
		q, _ := json.Marshal(map[string]any{s: []any{s, 1.5}})
		f.Add(string(q))
	}
	f.Add(`[-0, 0, -0.0, 1e15, 999999999999999, -999999999999999, 1e21, 1e-7, 123.456, -5, 1e300, 5e-324]`)
	f.Add(`{"items": [{"name": "a", "effects": [{"x": null}]}, 1, null], "effects": null, "system": {"a": [true, false, {}]}}`)
	f.Fuzz(func(t *testing.T, in string) {
		var v any
		if json.Unmarshal([]byte(in), &v) != nil {
			return
		}
		got, err := encodeJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := referenceJSON(t, v); !bytes.Equal(got, want) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
		if size := valueSize(v); size != len(got) {
			t.Fatalf("size %d, encoded %d bytes: %s", size, len(got), got)
		}
		if m, ok := v.(map[string]any); ok {
			full, data, _, err := encodeFull(nil, typeActor, "Actor.x", m)
			if err != nil {
				t.Fatal(err)
			}
			if size := documentSize(nil, typeActor, m); size != len(data) {
				t.Fatalf("document size %d, encoded %d bytes: %s", size, len(data), data)
			}
			var c jsonCache
			if want, _ := c.full("Actor.x", m); !bytes.Equal(full, want) {
				t.Fatalf("full: got %s\nwant %s", full, want)
			}
		}
	})
}

// TestEmbeddedJSONRegistry: the registry of embedded documents' JSON only
// holds documents of the current state, and documents serialised with it
// are what encoding/json writes.
func TestEmbeddedJSONRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	check := func(step string) {
		t.Helper()
		live := map[unsafe.Pointer]bool{}
		var walk func(ty *docType, doc Document)
		walk = func(ty *docType, doc Document) {
			for _, f := range ty.embedded {
				for _, c := range docsOf(doc, f.key) {
					live[identity(c.(map[string]any))] = true
					walk(f.typ, c.(map[string]any))
				}
			}
		}
		for ty, table := range tw.snap.Load().docs {
			table.each(func(id string, doc Document) bool {
				walk(ty, doc)
				_, data, _, err := encodeFull(&tw.embedded, ty, ty.name+"."+id, doc)
				if err != nil {
					t.Fatal(err)
				}
				if want := referenceJSON(t, doc); !bytes.Equal(data, want) {
					t.Errorf("%s: %s.%s serialises as\n%s\nwant\n%s", step, ty.name, id, data, want)
				}
				// The size limit's measure, which takes registered
				// embedded documents' JSON from the registry.
				if size := documentSize(&tw.embedded, ty, doc); size != len(data) {
					t.Errorf("%s: %s.%s measures %d bytes, serialises as %d", step, ty.name, id, size, len(data))
				}
				return true
			})
		}
		tw.embedded.m.Range(func(k, v any) bool {
			if !live[k.(unsafe.Pointer)] {
				t.Errorf("%s: the registry holds a document no longer in the world: %v", step, v.(*embeddedDoc).doc["_id"])
			}
			return true
		})
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"update an actor", func() error {
			_, err := tw.Update(ctx, nil, actorOwner, Document{"name": "Hero"})
			return err
		}},
		{"update an item", func() error {
			_, err := tw.Update(ctx, nil, swordUUID, Document{"name": "Blade"})
			return err
		}},
		{"create an item", func() error {
			_, err := tw.Create(ctx, nil, CreateParams{Type: "Item", ParentUUID: actorBob, Data: Document{"name": "Gem"}})
			return err
		}},
		{"put back a changed private copy", func() error {
			// Tx.Get hands out a deep copy: every embedded document of the
			// new version is equal to, but not the same map as, the old one.
			return tw.Mutate(ctx, func(tx *Tx) error {
				doc, err := tx.Get(actorOwner)
				if err != nil {
					return err
				}
				doc["name"] = "Copied Hero"
				return tx.Put(actorOwner, doc)
			})
		}},
		{"delete an item", func() error { return tw.Delete(ctx, nil, potionUUID) }},
		{"delete an actor", func() error { return tw.Delete(ctx, nil, actorBob) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		check(s.name)
	}
	if tw.embedded.size() == 0 {
		t.Error("nothing was registered")
	}
}
