package events

import (
	"reflect"
	"slices"

	"github.com/tabletop-relay/relay/world"
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
		om, oldIsMap := old.(map[string]any)
		nm, newIsMap := v.(map[string]any)
		if ok && oldIsMap && newIsMap && om != nil && nm != nil {
			// Objects are compared by diffing them, once: comparing them
			// first and then diffing walked every changed object twice
			// per level.
			if reflect.ValueOf(om).UnsafePointer() == reflect.ValueOf(nm).UnsafePointer() {
				continue // the same shared object: no walk at all
			}
			if d := diff(om, nm, nil); len(d) > 0 {
				out[k] = d
			}
			continue
		}
		if ok && world.SameJSON(old, v) {
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
