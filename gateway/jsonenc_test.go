package gateway

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
)

// contractMessages are the message types of the contract's files.
func contractMessages() []protoreflect.MessageDescriptor {
	var out []protoreflect.MessageDescriptor
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			md := ms.Get(i)
			if md.IsMapEntry() {
				continue
			}
			out = append(out, md)
			walk(md.Messages())
		}
	}
	relayFiles(func(f protoreflect.FileDescriptor) { walk(f.Messages()) })
	return out
}

// relayFiles calls fn for each file of the relay.v1 package.
func relayFiles(fn func(protoreflect.FileDescriptor)) {
	seen := map[string]bool{}
	var visit func(protoreflect.FileDescriptor)
	visit = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] || f.Package() != "relay.v1" {
			return
		}
		seen[f.Path()] = true
		fn(f)
		for i := range f.Imports().Len() {
			visit(f.Imports().Get(i).FileDescriptor)
		}
	}
	for _, rt := range contractRoutes().byRPC {
		visit(rt.input.ParentFile())
	}
}

// fill sets every field of m to a random value, down to depth levels of
// messages. A google.protobuf.Value field (the raw_json fields among them)
// gets a random JSON value, half the time as a Value tree and half the
// time as a raw Value, the form the services fill them with.
func fill(m protoreflect.Message, rng *rand.Rand, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if rng.IntN(4) == 0 {
			continue
		}
		if od := fd.ContainingOneof(); od != nil && m.WhichOneof(od) != nil {
			continue
		}
		if fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Value" && !fd.IsList() && !fd.IsMap() {
			text, err := json.Marshal(randomJSON(rng, 3))
			if err != nil {
				panic(err)
			}
			v := jsonvalue.Raw(text)
			if rng.IntN(2) == 0 {
				v = &structpb.Value{}
				if err := protojson.Unmarshal(text, v); err != nil {
					panic(err)
				}
			}
			m.Set(fd, protoreflect.ValueOfMessage(v.ProtoReflect()))
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range rng.IntN(3) {
				if fd.Message() != nil {
					if depth > 0 {
						e := l.NewElement()
						fill(e.Message(), rng, depth-1)
						l.Append(e)
					}
					continue
				}
				l.Append(randomScalar(fd, rng))
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rng.IntN(3) {
				key := randomScalar(fd.MapKey(), rng).MapKey()
				if fd.MapValue().Message() != nil {
					if depth > 0 {
						v := mp.NewValue()
						fill(v.Message(), rng, depth-1)
						mp.Set(key, v)
					}
					continue
				}
				mp.Set(key, randomScalar(fd.MapValue(), rng))
			}
		case fd.Message() != nil:
			if depth > 0 && fd.Message().FullName().Parent() != "google.protobuf" {
				fill(m.Mutable(fd).Message(), rng, depth-1)
			}
		default:
			m.Set(fd, randomScalar(fd, rng))
		}
	}
}

// randomScalar is a random value of a scalar field, with the numbers that
// encoders tend to get wrong: large, tiny, negative, whole and not.
func randomScalar(fd protoreflect.FieldDescriptor, rng *rand.Rand) protoreflect.Value {
	floats := []float64{0, 1, -1, 0.5, 1234567, 1.234567e6, 64 << 20, 1e20, 1e21, 1e-6, 1e-7, 123.456, -9.87654321e-12, math.MaxFloat64, math.SmallestNonzeroFloat64, rng.NormFloat64() * 1e9}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString([]string{"", "a", "é\"\\\n\t\u2028<>&", "\x01"}[rng.IntN(4)])
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(rng.IntN(256)), 0})
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(floats[rng.IntN(len(floats))])
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(floats[rng.IntN(len(floats)-3)]))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(rng.Int32() - math.MaxInt32/2)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(rng.Uint32())
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(rng.Int64() - math.MaxInt64/2)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(rng.Uint64())
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		return protoreflect.ValueOfEnum(values.Get(rng.IntN(values.Len())).Number())
	}
	panic("unexpected kind " + fd.Kind().String())
}

// randomJSON is a random JSON value, nested down to depth levels, with
// numbers that every encoder prints alike.
func randomJSON(rng *rand.Rand, depth int) any {
	kinds := 4
	if depth > 0 {
		kinds = 6
	}
	switch rng.IntN(kinds) {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2:
		return []float64{0, -3, 12, 0.5, 123456}[rng.IntN(5)]
	case 3:
		return []string{"", "a", "é\"\\\n\t\u2028<>&", "\x01", "😀"}[rng.IntN(5)]
	case 4:
		obj := map[string]any{}
		for range rng.IntN(4) {
			obj[[]string{"a", "b", "_id", "système", "k\"ey"}[rng.IntN(5)]] = randomJSON(rng, depth-1)
		}
		return obj
	}
	list := []any{}
	for range rng.IntN(4) {
		list = append(list, randomJSON(rng, depth-1))
	}
	return list
}

// realize replaces every raw Value in m, at every depth, by the Value tree
// its JSON stands for: what protojson must print to match the gateway's
// encoder, which splices raw Values in as their text.
func realize(t *testing.T, m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() || fd.IsMap() || fd.Message() == nil:
		case fd.Message().FullName() == "google.protobuf.Value":
			if raw, ok := jsonvalue.RawJSON(v.Message().Interface()); ok {
				tree := &structpb.Value{}
				if err := protojson.Unmarshal(raw, tree); err != nil {
					t.Fatalf("%s: %v", fd.FullName(), err)
				}
				m.Set(fd, protoreflect.ValueOfMessage(tree.ProtoReflect()))
			}
		default:
			realize(t, v.Message())
		}
		return true
	})
}

// dropOmitted removes from theirs (protojson's output) the nulls of the
// omit_empty fields that ours leaves out, at every depth.
func dropOmitted(ours, theirs any, md protoreflect.MessageDescriptor) {
	a, ok1 := ours.(map[string]any)
	b, ok2 := theirs.(map[string]any)
	if !ok1 || !ok2 {
		return
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := fd.JSONName()
		if _, has := a[name]; !has && isOmitEmpty(fd) && b[name] == nil {
			delete(b, name)
			continue
		}
		if fd.Message() == nil || fd.Message().ParentFile().Package() == "google.protobuf" {
			continue
		}
		switch {
		case fd.IsList():
			la, _ := a[name].([]any)
			lb, _ := b[name].([]any)
			for k := range min(len(la), len(lb)) {
				dropOmitted(la[k], lb[k], fd.Message())
			}
		case fd.IsMap():
			ma, _ := a[name].(map[string]any)
			mb, _ := b[name].(map[string]any)
			if fd.MapValue().Message() != nil {
				for k := range ma {
					dropOmitted(ma[k], mb[k], fd.MapValue().Message())
				}
			}
		default:
			dropOmitted(a[name], b[name], fd.Message())
		}
	}
}

// decodeNumbers decodes JSON keeping numbers as their text, so that two
// encoders that print one number two ways disagree.
func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, b)
	}
	return v
}

// FuzzEncoderMatchesProtojson fills every message of the contract with
// random values and checks that the gateway's encoder writes what protojson
// writes (with every field present), number for number, raw Values
// included: spliced in as their JSON, they must read as the Value tree
// protojson prints. The one difference on purpose is omit_empty: an unset
// field so marked is left out rather than null.
func FuzzEncoderMatchesProtojson(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	messages := contractMessages()
	if len(messages) < 50 {
		f.Fatalf("only %d messages found in the contract", len(messages))
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		for _, md := range messages {
			m := dynamicpb.NewMessage(md)
			fill(m, rng, 2)
			ours, err := appendMessage(nil, m)
			if err != nil {
				t.Fatalf("%s: %v", md.FullName(), err)
			}
			twin := proto.Clone(m).ProtoReflect()
			realize(t, twin)
			theirs, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(twin.Interface())
			if err != nil {
				t.Fatalf("%s: protojson: %v", md.FullName(), err)
			}
			a, b := decodeNumbers(t, ours), decodeNumbers(t, theirs)
			dropOmitted(a, b, md)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s: the encoders disagree\nours:      %s\nprotojson: %s", md.FullName(), ours, theirs)
			}
		}
	})
}

// TestFileSizeIsPlain pins the defect the differential test found: large
// sizes printed with an exponent.
func TestFileSizeIsPlain(t *testing.T) {
	out, err := appendMessage(nil, (&relayv1.UploadFileResponse{Path: "a", Size: 67108864}).ProtoReflect())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"path":"a","size":67108864}`; string(out) != want {
		t.Fatalf("got %s, want %s", out, want)
	}
}
