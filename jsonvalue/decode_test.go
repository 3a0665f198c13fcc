package jsonvalue

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodePlain: where decodePlain decodes a text, json.Unmarshal into a
// map[string]any gives the very same values; where it declines, the text
// is not a plain JSON object (json.Unmarshal refuses it, or it has an
// escape, bad UTF-8 or a number out of range).
func FuzzDecodePlain(f *testing.F) {
	for _, s := range []string{
		`{"system.attributes.hp.value":12}`,
		` {"a" : [1, -0, 2.5e-3, true, false, null, {"b": []}, [], {}], "a": "x", "é": "ü"} `,
		`{}`, `[]`, `null`, `{"a":"\n"}`, `{"a":1e400}`, "{\"\xff\":1}", `{"a":{}}x`, `{"a":"}"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := decodePlain(raw)
		var want map[string]any
		err := json.Unmarshal(raw, &want)
		if !ok {
			return
		}
		if err != nil || want == nil {
			t.Fatalf("%q: decoded %v, json.Unmarshal: %v", raw, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded\n%#v\njson.Unmarshal\n%#v", raw, got, want)
		}
	})
}

// TestDecodePlainTakesUsualText: the usual update data is decoded without
// encoding/json.
func TestDecodePlainTakesUsualText(t *testing.T) {
	for _, s := range []string{
		`{"system.attributes.hp.value":12,"flags.relay.note":"hit by a goblin"}`,
		`{"name":"Brom","items":[{"_id":"a","system":{"quantity":2.5}}],"x":null,"y":[true,false]}`,
	} {
		if _, ok := decodePlain([]byte(s)); !ok {
			t.Errorf("%s: declined", s)
		}
	}
}
