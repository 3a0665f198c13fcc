package world

import (
	"context"
	"reflect"
	"testing"
)

// TestTreeEqualAgreesWithDeepEqual: treeEqual gives reflect.DeepEqual's
// answer on world values, shared subtrees and nil collections included.
func TestTreeEqualAgreesWithDeepEqual(t *testing.T) {
	t.Parallel()
	shared := map[string]any{"a": 1.0, "b": []any{"x", 2.0, nil}}
	list := []any{1.0, "two"}
	values := []any{
		nil, "", "a", 0.0, 1.0, true, false,
		map[string]any(nil), map[string]any{}, shared,
		map[string]any{"a": 1.0, "b": []any{"x", 2.0, nil}},
		map[string]any{"a": 1.0, "b": []any{"x", 2.0}},
		map[string]any{"a": 1.0, "c": []any{"x", 2.0, nil}},
		map[string]any{"s": shared}, map[string]any{"s": map[string]any{"a": 1.0, "b": []any{"x", 2.0, nil}}},
		[]any(nil), []any{}, list, list[:1], []any{1.0, "two"}, []any{1.0, "three"},
		[]any{map[string]any{"k": nil}}, []any{map[string]any{"k": false}},
		int64(1), []string{"a"},
	}
	for i, a := range values {
		for j, b := range values {
			if got, want := treeEqual(a, b), reflect.DeepEqual(a, b); got != want {
				t.Errorf("treeEqual(values[%d], values[%d]) = %v, reflect.DeepEqual says %v", i, j, got, want)
			}
		}
	}
}

// TestUpdateAnswersWithCommitJSON: an update answers with the JSON its
// commit made, also when it set the values already there (nothing is
// written then), and that JSON is what a read gives afterwards.
func TestUpdateAnswersWithCommitJSON(t *testing.T) {
	t.Parallel()
	tw := newTestWorld(t)
	ctx := context.Background()
	for i, name := range []string{"Renamed", "Renamed"} {
		stored, req, err := tw.update(ctx, nil, actorOwner, Document{"name": name})
		if err != nil {
			t.Fatal(err)
		}
		raw, ok := req.committedJSON(stored)
		if !ok {
			t.Fatalf("update %d: the commit made no JSON for the stored version", i)
		}
		read, err := tw.GetJSON(ctx, nil, actorOwner)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != string(read) {
			t.Fatalf("update %d answered\n%s\nbut a read gives\n%s", i, raw, read)
		}
	}
}
