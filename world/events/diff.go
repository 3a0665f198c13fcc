package events

import (
	"reflect"
	"slices"
)

// diff returns the fields of after that differ from before, in the
// tabletop's update shape: nested objects hold only their changed keys and
// a removed key appears as `-=key` with a null value. `_stats` and the
// embedded collections are left out: bookkeeping, and embedded documents
// report their own changes.
func diff(before, after map[string]any, skip []string) map[string]any {
	out := map[string]any{}
	for k, v := range after {
		if k == "_stats" || slices.Contains(skip, k) {
			continue
		}
		old, ok := before[k]
		if ok && sameValue(old, v) {
			continue
		}
		om, oldIsMap := old.(map[string]any)
		nm, newIsMap := v.(map[string]any)
		if ok && oldIsMap && newIsMap {
			if d := diff(om, nm, nil); len(d) > 0 {
				out[k] = d
			}
			continue
		}
		out[k] = v
	}
	for k := range before {
		if k == "_stats" || slices.Contains(skip, k) {
			continue
		}
		if _, ok := after[k]; !ok {
			out["-="+k] = nil
		}
	}
	return out
}

// sameValue compares two JSON values, cheaply when they are the same
// shared value (documents share what a change did not touch).
func sameValue(a, b any) bool {
	if am, ok := a.(map[string]any); ok {
		if bm, ok := b.(map[string]any); ok && reflect.ValueOf(am).UnsafePointer() == reflect.ValueOf(bm).UnsafePointer() {
			return true
		}
	}
	return reflect.DeepEqual(a, b)
}
