package jsonvalue

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestAppendJSONMatchesProtojson: for every sample, AppendJSON writes
// JSON that reads as the same value as protojson's.
func TestAppendJSONMatchesProtojson(t *testing.T) {
	for _, s := range samples {
		v := &structpb.Value{}
		if err := protojson.Unmarshal([]byte(s), v); err != nil {
			continue // protojson refuses it (a lone surrogate)
		}
		ours, err := AppendJSON(nil, v)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		theirs, err := protojson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal(ours, &a); err != nil {
			t.Fatalf("%q: invalid JSON %s: %v", s, ours, err)
		}
		if err := json.Unmarshal(theirs, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%q:\nours      %s\nprotojson %s", s, ours, theirs)
		}
	}
	if _, err := AppendJSON(nil, structpb.NewNumberValue(math.NaN())); err == nil {
		t.Fatal("NaN written")
	}
	if _, err := AppendJSON(nil, &structpb.Value{}); err == nil {
		t.Fatal("a Value without a kind written")
	}
}

// FuzzNumbers: numbers are written exactly as encoding/json writes them.
func FuzzNumbers(f *testing.F) {
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-6, 1e-7, 123456789, 1e20, 1e21, 1.5e300, math.SmallestNonzeroFloat64} {
		f.Add(math.Float64bits(x))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		x := math.Float64frombits(bits)
		want, err := json.Marshal(x)
		got, gerr := appendNumber(nil, x)
		if (err != nil) != (gerr != nil) {
			t.Fatalf("%v: errors %v and %v", x, err, gerr)
		}
		if err == nil && string(got) != string(want) {
			t.Fatalf("%v: got %s, encoding/json %s", x, got, want)
		}
	})
}
