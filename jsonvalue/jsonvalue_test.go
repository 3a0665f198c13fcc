package jsonvalue

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// samples are JSON texts with what transcoders tend to get wrong: escapes,
// surrogate pairs, numbers of every form, empty and nested containers,
// whitespace.
var samples = []string{
	`null`, `true`, `false`, `0`, `-0`, `1.5e300`, `-12.25E-3`, `123456789012345678901234567890`,
	`""`, `"plain"`, `"é\"\\\/\b\f\n\r\t\u0000\u00e9\u2028\ud83d\ude00"`, `"\ud800 lone"`,
	`{}`, `[]`, `[[]]`, `{"a":{}}`, ` { "a" : [ 1 , "x" , null , true , { "b" : [ ] } ] } `,
	`{"name":"Aria","system":{"attributes":{"hp":{"value":12,"max":24}}},"items":[{"_id":"x","flags":{}}]}`,
	`"` + strings.Repeat("long ", 100) + `"`,
	`[` + strings.Repeat(`{"k":1},`, 200) + `{"k":1}]`,
}

// TestAppendValueMatchesProtojson: the transcoder's encoding decodes to
// the very Value protojson reads from the same text.
func TestAppendValueMatchesProtojson(t *testing.T) {
	for _, s := range samples {
		checkTranscode(t, s)
	}
}

// checkTranscode compares the transcoder with protojson for one text.
func checkTranscode(t *testing.T, s string) {
	t.Helper()
	out, err := AppendValue(nil, []byte(s))
	var want structpb.Value
	werr := protojson.Unmarshal([]byte(s), &want)
	if !json.Valid([]byte(s)) {
		if err == nil {
			t.Fatalf("%q: invalid JSON transcoded", s)
		}
		return
	}
	if errors.Is(err, ErrTooDeep) {
		return
	}
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	var got structpb.Value
	if err := proto.Unmarshal(out, &got); err != nil {
		t.Fatalf("%q: the encoding does not decode: %v", s, err)
	}
	if werr != nil {
		// protojson refuses some valid JSON (invalid UTF-8, numbers out
		// of range, duplicate keys); the transcoder's answer must still be
		// a valid Value.
		return
	}
	if !proto.Equal(&got, &want) {
		t.Fatalf("%q: got %v, want %v", s, &got, &want)
	}
	if size := proto.Size(&want); size != len(out) && !strings.Contains(s, "{") {
		// Objects may come in another order than protojson's map; every
		// other value has one encoding.
		t.Fatalf("%q: %d bytes, protobuf writes %d", s, len(out), size)
	}
}

// FuzzAppendValue: any text the transcoder accepts is valid JSON and
// decodes to protojson's Value, and it refuses every invalid text.
func FuzzAppendValue(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Add(`{"a":1,}`)
	f.Add(`[1 2]`)
	f.Add("\"\x01\"")
	f.Add(`01`)
	f.Fuzz(func(t *testing.T, s string) {
		checkTranscode(t, s)
	})
}

// TestRawValue: a raw Value gives its text back, shares it, and is told
// from a real Value and from a plain string.
func TestRawValue(t *testing.T) {
	text := []byte(`{"a":[1,2]}`)
	v := Raw(text)
	raw, ok := RawJSON(v)
	if !ok || string(raw) != string(text) || &raw[0] != &text[0] {
		t.Fatalf("RawJSON = %q, %v; want the same bytes", raw, ok)
	}
	if Raw(nil) != nil {
		t.Fatal("Raw(nil) is not nil")
	}
	if _, ok := RawJSON(structpb.NewStringValue(`{"a":1}`)); ok {
		t.Fatal("a plain string Value taken for raw JSON")
	}
	got, err := JSON(structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1)}}))
	if err != nil || string(got) != "[1]" {
		t.Fatalf("JSON of a tree = %s, %v", got, err)
	}
	// proto.Merge into another Value copies the marker rather than
	// appending to the shared one.
	dst := Raw([]byte(`1`))
	proto.Merge(dst, v)
	if string(valueMarker) != string(Raw(text).ProtoReflect().GetUnknown()) {
		t.Fatal("the shared marker changed")
	}
}

// TestRawStruct: a raw Struct decodes as its JSON, and a real one as
// AsMap does.
func TestRawStruct(t *testing.T) {
	m, err := DecodeObject(RawStruct([]byte(`{"system.hp":3,"n":{"x":[true]}}`)))
	if err != nil || m["system.hp"] != 3.0 || m["n"].(map[string]any)["x"].([]any)[0] != true {
		t.Fatalf("DecodeObject = %v, %v", m, err)
	}
	if _, err := DecodeObject(RawStruct([]byte(`[1]`))); err == nil {
		t.Fatal("an array decoded as an object")
	}
	tree, _ := structpb.NewStruct(map[string]any{"a": 1})
	if m, err := DecodeObject(tree); err != nil || m["a"] != 1.0 {
		t.Fatalf("DecodeObject(tree) = %v, %v", m, err)
	}
	raw, ok, err := StructJSON(RawStruct([]byte(`{"a":1}`)))
	if err != nil || !ok || string(raw) != `{"a":1}` {
		t.Fatalf("StructJSON = %s, %v, %v", raw, ok, err)
	}
}
