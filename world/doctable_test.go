package world

import (
	"fmt"
	"testing"
)

// TestDocTable: a new version of a table changes nothing in the old one,
// counts its documents and lists each once.
func TestDocTable(t *testing.T) {
	t.Parallel()
	docs := map[string]Document{}
	for i := range 500 {
		docs[fmt.Sprintf("Doc%013d", i)] = Document{"n": float64(i)}
	}
	old := newDocTable(docs)
	ed := edit(old)
	ed.set("Doc0000000000001", nil)                 // removed
	ed.set("Doc0000000000002", Document{"n": -2.0}) // replaced
	ed.set("New0000000000001", Document{"n": 1e6})  // added
	ed.set("New0000000000001", Document{"n": 1e7})  // replaced again in the same version
	ed.set("Missing000000001", nil)                 // removing nothing
	next := ed.t

	if old.len() != 500 || old.get("Doc0000000000001") == nil || old.get("Doc0000000000002")["n"] != 2.0 || old.get("New0000000000001") != nil {
		t.Error("the old version changed")
	}
	if next.len() != 500 {
		t.Errorf("len = %d, want 500", next.len())
	}
	if next.get("Doc0000000000001") != nil || next.get("Doc0000000000002")["n"] != -2.0 || next.get("New0000000000001")["n"] != 1e7 {
		t.Error("the new version lacks its changes")
	}
	seen := map[string]bool{}
	next.each(func(id string, doc Document) bool {
		if seen[id] {
			t.Errorf("%s listed twice", id)
		}
		seen[id] = true
		return true
	})
	if len(seen) != 500 {
		t.Errorf("each listed %d documents, want 500", len(seen))
	}
	n := 0
	if next.each(func(string, Document) bool { n++; return n < 3 }) || n != 3 {
		t.Errorf("each did not stop when asked: %d", n)
	}
	var empty *docTable
	if empty.get("x") != nil || empty.len() != 0 || !empty.each(func(string, Document) bool { return false }) {
		t.Error("a nil table is not empty")
	}
}
