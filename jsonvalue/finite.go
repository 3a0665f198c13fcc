package jsonvalue

import (
	"math"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// NonFinite finds the first number in m's google.protobuf.Value, Struct
// and ListValue fields that JSON cannot hold (NaN or an infinity), and
// returns its path, starting with the field's JSON name (`data.flags.3`),
// or "" when there is none. A gRPC caller can send such numbers, which a
// REST caller cannot: the relay refuses them the same way for both.
// Messages that cannot hold a Value are not walked.
func NonFinite(m proto.Message) string {
	if m == nil {
		return ""
	}
	r := m.ProtoReflect()
	if !mayHoldValue(r.Descriptor()) {
		return ""
	}
	var path []string
	if findNonFinite(r, &path) {
		return strings.Join(path, ".")
	}
	return ""
}

// listValueName is the full name of google.protobuf.ListValue.
const listValueName = "google.protobuf.ListValue"

// holdsValue caches mayHoldValue by message name.
var holdsValue sync.Map

// mayHoldValue reports whether a message of type md has, at any depth, a
// Value, Struct or ListValue field.
func mayHoldValue(md protoreflect.MessageDescriptor) bool {
	if v, ok := holdsValue.Load(md.FullName()); ok {
		return v.(bool)
	}
	v := mayHoldValueIn(md, map[protoreflect.FullName]bool{})
	holdsValue.Store(md.FullName(), v)
	return v
}

func mayHoldValueIn(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		for _, sub := range []protoreflect.FieldDescriptor{fd, fd.MapValue()} {
			if sub == nil || sub.Message() == nil {
				continue
			}
			switch sub.Message().FullName() {
			case valueName, structName, listValueName:
				return true
			}
			if sub.Message().ParentFile().Package() != "google.protobuf" && mayHoldValueIn(sub.Message(), seen) {
				return true
			}
		}
	}
	return false
}

// findNonFinite walks the set fields of a message, appending each step to
// path and leaving the path of the first non-finite number in it.
func findNonFinite(r protoreflect.Message, path *[]string) bool {
	found := false
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil && (fd.MapValue() == nil || fd.MapValue().Message() == nil) {
			return true
		}
		*path = append(*path, fd.JSONName())
		switch {
		case fd.IsList():
			list := v.List()
			for i := range list.Len() {
				*path = append(*path, strconv.Itoa(i))
				if found = messageNonFinite(list.Get(i).Message(), path); found {
					return false
				}
				*path = (*path)[:len(*path)-1]
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				*path = append(*path, k.String())
				if found = messageNonFinite(mv.Message(), path); found {
					return false
				}
				*path = (*path)[:len(*path)-1]
				return true
			})
			if found {
				return false
			}
		default:
			if found = messageNonFinite(v.Message(), path); found {
				return false
			}
		}
		*path = (*path)[:len(*path)-1]
		return true
	})
	return found
}

// messageNonFinite looks into one message: a Value, Struct or ListValue
// tree directly, any other message of the relay's through its fields.
func messageNonFinite(r protoreflect.Message, path *[]string) bool {
	switch m := r.Interface().(type) {
	case *structpb.Value:
		return valueNonFinite(m, path, 0)
	case *structpb.Struct:
		return structNonFinite(m, path, 0)
	case *structpb.ListValue:
		return listNonFinite(m, path, 0)
	}
	if r.Descriptor().ParentFile().Package() == "google.protobuf" || !mayHoldValue(r.Descriptor()) {
		return false
	}
	return findNonFinite(r, path)
}

// maxWalkDepth stops the walk of a Value tree deeper than protobuf could
// have decoded; it only guards the stack.
const maxWalkDepth = 10000

func valueNonFinite(v *structpb.Value, path *[]string, depth int) bool {
	if depth > maxWalkDepth {
		return false
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return math.IsNaN(k.NumberValue) || math.IsInf(k.NumberValue, 0)
	case *structpb.Value_StructValue:
		return structNonFinite(k.StructValue, path, depth+1)
	case *structpb.Value_ListValue:
		return listNonFinite(k.ListValue, path, depth+1)
	}
	return false
}

func structNonFinite(s *structpb.Struct, path *[]string, depth int) bool {
	for name, member := range s.GetFields() {
		*path = append(*path, name)
		if valueNonFinite(member, path, depth) {
			return true
		}
		*path = (*path)[:len(*path)-1]
	}
	return false
}

func listNonFinite(l *structpb.ListValue, path *[]string, depth int) bool {
	for i, e := range l.GetValues() {
		*path = append(*path, strconv.Itoa(i))
		if valueNonFinite(e, path, depth) {
			return true
		}
		*path = (*path)[:len(*path)-1]
	}
	return false
}
