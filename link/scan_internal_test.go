package link

import (
	"bytes"
	"encoding/json"
	"testing"
)

// scanSamples are texts scanJSON must judge as encoding/json does.
var scanSamples = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `-`, `01`, `1.`, `1.5e`, `1.5e+3`, `-12.25E-2`, `true`, `tru`, `nulls`, `null `,
	`{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1}}`, `[1,2]`, `[1,]`, `[,1]`, `[1 2]`, `{"a":[{"b":{}}],"c":"d"}`,
	`"\u00e9\n\"\\\/"`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"tab\there\"", `"é"`, " \r\n\t{ \"k\" : [ ] , \"l\" : { } } \n",
	`{"type":"entity-result","requestId":"entity_1","data":{"name":"Aria","system":{"hp":[1,2,{"x":null}]}}}`,
	`{"\u0074ype":"x"}`, `{"a":{"uuid":1},"b":["uuid"],"uuid":"x"}`, `{"a":"uuid","b":{"uuid":2}}`, `{"a":"x\"uuid"}`, `[[[[]]]]`, `{"a":{"b":{"c":{}}}}`, `[}`, `{]`, `{"a":1]`,
}

// TestScanJSON checks scanJSON against encoding/json: validity, the
// nesting that tooDeep measures, and the top-level members.
func TestScanJSON(t *testing.T) {
	for _, s := range scanSamples {
		checkScan(t, []byte(s))
	}
}

// FuzzScanJSON compares scanJSON with encoding/json on any text.
func FuzzScanJSON(f *testing.F) {
	for _, s := range scanSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(checkScan)
}

func checkScan(t *testing.T, b []byte) {
	var members []member
	depth, ok := scanJSON(b, func(m member) bool {
		members = append(members, m)
		return true
	})
	if want := json.Valid(b); ok != want {
		t.Fatalf("scanJSON(%q) valid = %v, want %v", b, ok, want)
	}
	if !ok {
		return
	}
	for limit := range depth + 1 {
		if deep := tooDeep(b, limit); deep != (depth > limit) {
			t.Fatalf("scanJSON(%q) depth %d, but tooDeep(limit %d) = %v", b, depth, limit, deep)
		}
	}
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		if len(members) > 0 {
			t.Fatalf("scanJSON(%q) found members in a value that is no object", b)
		}
		return
	}
	hasUUID := false
	for _, m := range members {
		hasUUID = hasUUID || m.key == "uuid"
	}
	if got := hasMember(b, "uuid"); got != hasUUID {
		t.Fatalf("hasMember(%q, uuid) = %v, want %v", b, got, hasUUID)
	}
	var want []field
	_ = scanObject(&chunks{bufs: [][]byte{b}, n: int64(len(b))}, func(f field) bool {
		want = append(want, f)
		return true
	})
	if len(members) != len(want) {
		t.Fatalf("scanJSON(%q) found %d members, want %d", b, len(members), len(want))
	}
	for i, m := range members {
		w := want[i]
		if m.key != w.key || !bytes.Equal(m.value, b[w.off:w.off+w.n]) {
			t.Fatalf("scanJSON(%q) member %d = %q: %q, want %q: %q", b, i, m.key, m.value, w.key, b[w.off:w.off+w.n])
		}
	}
}

// TestScanJSONStops checks that a visitor that has what it needs ends the
// scan there, whatever follows.
func TestScanJSONStops(t *testing.T) {
	var keys []string
	_, ok := scanJSON([]byte(`{"type":"x","requestId":"y","data":{"broken`), func(m member) bool {
		keys = append(keys, m.key)
		return m.key != "requestId"
	})
	if !ok || len(keys) != 2 {
		t.Fatalf("stopped with %v, ok %v", keys, ok)
	}
}
