package world

import (
	"strings"
	"testing"
)

// lookupFieldSlow is the reference matching: every field's whole path
// against the whole path of a key, in the rules' order.
func lookupFieldSlow(fields []numberField, path []string) (numberField, bool, bool) {
	parent := false
	for _, f := range fields {
		segs := strings.Split(f.path, ".")
		if len(segs) < len(path) {
			continue
		}
		match := true
		for i, p := range path {
			if segs[i] != "*" && segs[i] != p {
				match = false
				break
			}
		}
		switch {
		case !match:
		case len(segs) == len(path):
			return f, true, false
		default:
			parent = true
		}
	}
	return numberField{}, false, parent
}

// TestNextFieldMatchesWholePaths: walking the tree of the fields' paths
// segment by segment (nextField, as cleanObject does) finds for every path the field, or the
// parent, that matching whole paths finds.
func TestNextFieldMatchesWholePaths(t *testing.T) {
	fields := rulesBySystem["dnd5e"].fields[typeActor]
	words := map[string]bool{"x": true, "value": true, "*": true}
	for _, f := range fields {
		for s := range strings.SplitSeq(f.path, ".") {
			words[s] = true
		}
	}
	var vocab []string
	for w := range words {
		vocab = append(vocab, w)
	}
	var walk func(path []string, cands []*fieldNode)
	checked := 0
	walk = func(path []string, cands []*fieldNode) {
		if len(path) == 5 {
			return
		}
		for _, w := range vocab {
			at := append(path[:len(path):len(path)], w)
			f, next := nextField(cands, w, nil)
			isField := f != nil
			wantF, wantField, wantParent := lookupFieldSlow(fields, at)
			gotParent := !isField && len(next) > 0
			if isField != wantField || gotParent != wantParent || isField && *f != wantF {
				t.Fatalf("%v: field %v (%v) parent %v, want %v (%v) parent %v", at, isField, f, gotParent, wantField, wantF, wantParent)
			}
			checked++
			if gotParent {
				walk(at, next)
			}
		}
	}
	walk(nil, []*fieldNode{rulesBySystem["dnd5e"].roots[typeActor]})
	if checked < 100 {
		t.Fatalf("only %d paths checked", checked)
	}
}

// BenchmarkCleanHitPoints is what the fifth-edition rules cost an update
// of a character's hit points.
func BenchmarkCleanHitPoints(b *testing.B) {
	rules := rulesFor("dnd5e")
	b.ReportAllocs()
	for b.Loop() {
		diff := map[string]any{"system": map[string]any{"attributes": map[string]any{"hp": map[string]any{"value": 7.0}}}}
		if err := rules.clean(typeActor, "character", diff); err != nil {
			b.Fatal(err)
		}
	}
}
