package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/tabletop-relay/relay/jsonvalue"
)

// A REST call's request message is read from its parameters in two steps:
// the merging the contract asks for (mergeFields: any parameter may come in
// the query string or the JSON body, the body winning; query values are
// text, with arrays and objects as JSON text), then protojson, which
// decodes the merged object and judges every value. Only when protojson
// refuses the object does the gateway look closer, to name the parameter
// at fault in its 400 (refusal).

// paramError is a bad request parameter; its text names the parameter and is
// shown to the caller.
type paramError struct{ msg string }

func (e *paramError) Error() string { return e.msg }

func paramErrorf(format string, args ...any) error {
	return &paramError{msg: fmt.Sprintf(format, args...)}
}

// paramsJSON decodes merged parameters: unknown ones are ignored.
var paramsJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

// jsonDecoderDepth is the nesting encoding/json refuses to decode.
const jsonDecoderDepth = 10000

// decodeParams reads a request message from a call's JSON body and query
// parameters. msg is left empty when they are refused.
func decodeParams(msg proto.Message, body []byte, query url.Values) error {
	fields, err := mergeFields(msg.ProtoReflect().Descriptor(), body, query)
	if err != nil {
		return err
	}
	return decodeFields(msg, fields)
}

// decodeFields decodes merged parameters into msg with protojson, and names
// the parameter at fault when it refuses them.
//
// A google.protobuf.Struct parameter (an update's or a creation's data) is
// not decoded into a Struct tree, which the service would only turn back
// into plain values: its JSON text is handed over as it is, in a raw
// Struct (see package jsonvalue), once checked to be a JSON object in
// valid UTF-8 as protojson would.
func decodeFields(msg proto.Message, fields map[string]json.RawMessage) error {
	m := msg.ProtoReflect()
	md := m.Descriptor()
	if err := unknownMember(md, fields); err != nil {
		return err
	}
	rest := fields
	var raws []protoreflect.FieldDescriptor
	valid := true
	for name, raw := range fields {
		fd := fieldByName(md, name)
		if fd == nil || fd.IsList() || fd.IsMap() || fd.Message() == nil || fd.Message().FullName() != "google.protobuf.Struct" {
			continue
		}
		if !isObject(raw) || !utf8.Valid(raw) {
			valid = false
			break
		}
		if len(raws) == 0 {
			rest = maps.Clone(fields)
		}
		delete(rest, name)
		raws = append(raws, fd)
	}
	if !valid || !setStrings(m, rest) && paramsJSON.Unmarshal(appendObject(nil, rest), msg) != nil {
		proto.Reset(msg)
		return refusal(md, fields, "")
	}
	for _, fd := range raws {
		m.Set(fd, protoreflect.ValueOfMessage(jsonvalue.RawStruct(fields[fd.JSONName()]).ProtoReflect()))
	}
	return nil
}

// unknownMember refuses a member that an object parameter of the
// contract's own (an account's quotas, a sum of currency) does not have,
// naming it and the members it does have. Unknown top-level parameters are
// ignored, as callers of the existing relay send some; inside such an
// object, an unknown member is a misspelt one (`quotas.key`), which would
// otherwise be dropped without a word and leave the caller believing it
// set.
func unknownMember(md protoreflect.MessageDescriptor, fields map[string]json.RawMessage) error {
	// Most calls have no object parameter: finding that allocates nothing.
	var objects []string
	for name := range fields {
		fd := fieldByName(md, name)
		if fd == nil || fd.IsList() || fd.IsMap() || scalarOf(fd) != 0 || fd.Message().ParentFile().Package() == "google.protobuf" {
			continue
		}
		objects = append(objects, name)
	}
	slices.Sort(objects)
	for _, name := range objects {
		fd := fieldByName(md, name)
		var members map[string]json.RawMessage
		if json.Unmarshal(fields[name], &members) != nil {
			continue // not an object: refused as such
		}
		for _, member := range slices.Sorted(maps.Keys(members)) {
			if fieldByName(fd.Message(), member) == nil {
				known := fd.Message().Fields()
				names := make([]string, 0, known.Len())
				for i := range known.Len() {
					names = append(names, known.Get(i).JSONName())
				}
				return paramErrorf("'%s.%s' is not one of its members (%s)", fd.JSONName(), member, strings.Join(names, ", "))
			}
		}
	}
	return nil
}

// setStrings sets the fields of m from merged parameters when every one of
// them is a plain string field given a JSON string without escapes (a
// call's uuid, client id and user id), as protojson would set them, without
// its decoding; it sets nothing and returns false otherwise, and protojson
// then decodes them.
func setStrings(m protoreflect.Message, fields map[string]json.RawMessage) bool {
	md := m.Descriptor()
	for name, raw := range fields {
		fd := fieldByName(md, name)
		if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || fd.IsMap() ||
			fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic() || !plainString(raw) {
			return false
		}
	}
	for name, raw := range fields {
		setString(m, fieldByName(md, name), string(raw[1:len(raw)-1]))
	}
	return true
}

// setString sets a string field. On a message generated by protoc-gen-go
// it sets the struct's field with Go's reflection: protoreflect's Set
// boxes the string in a protoreflect.Value and converts it back, three
// allocations for each parameter of each call.
func setString(m protoreflect.Message, fd protoreflect.FieldDescriptor, s string) {
	v := reflect.ValueOf(m.Interface())
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
		if i, ok := stringFieldIndex(v.Elem().Type(), fd.Number()); ok {
			v.Elem().Field(i).SetString(s)
			return
		}
	}
	m.Set(fd, protoreflect.ValueOfString(s))
}

// stringFields caches, per generated message struct, the index of each
// plain string field (a Go string, not a proto3 optional's *string) by its
// field number, read from the protobuf struct tags.
var stringFields sync.Map // reflect.Type → map[protoreflect.FieldNumber]int

// stringFieldIndex returns the index in t of the plain string field
// numbered n.
func stringFieldIndex(t reflect.Type, n protoreflect.FieldNumber) (int, bool) {
	cached, ok := stringFields.Load(t)
	if !ok {
		byNumber := map[protoreflect.FieldNumber]int{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("protobuf")
			if !f.IsExported() || tag == "" || f.Type.Kind() != reflect.String {
				continue
			}
			// The tag reads "bytes,3,opt,name=uuid,proto3": the number
			// is its second element.
			parts := strings.SplitN(tag, ",", 3)
			if len(parts) < 2 {
				continue
			}
			if num, err := strconv.Atoi(parts[1]); err == nil {
				byNumber[protoreflect.FieldNumber(num)] = i
			}
		}
		cached, _ = stringFields.LoadOrStore(t, byNumber)
	}
	i, ok := cached.(map[protoreflect.FieldNumber]int)[n]
	return i, ok
}

// plainString reports whether raw is a JSON string without escapes, in
// valid UTF-8: its text between the quotes is its value.
func plainString(raw json.RawMessage) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '"' || c == '\\' || c < 0x20 {
			return false
		}
	}
	return utf8.Valid(inner)
}

// objectMembers splits a request body into its members, as json.Unmarshal
// into a map of raw messages does but without copying them, for the usual
// body: valid JSON, an object, keys without escapes and in valid UTF-8. A
// repeated key keeps its last value, as with json.Unmarshal. ok is false
// for any other body, which json.Unmarshal then reads (and refuses, with
// its reasons).
func objectMembers(body []byte) (members map[string]json.RawMessage, ok bool) {
	if !json.Valid(body) {
		return nil, false
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return nil, false
	}
	members = make(map[string]json.RawMessage, 4)
	if i = skipSpace(body, i+1); body[i] == '}' {
		return members, true
	}
	for {
		// Valid JSON: a key, a colon, a value, then a comma or the end.
		end := stringEnd(body, i)
		key := body[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			return nil, false
		}
		i = skipSpace(body, skipSpace(body, end)+1)
		end = valueEnd(body, i)
		members[string(key)] = body[i:end:end]
		if i = skipSpace(body, end); body[i] == '}' {
			return members, true
		}
		i = skipSpace(body, i+1)
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// stringEnd returns the index just after the valid JSON string at i.
func stringEnd(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// valueEnd returns the index just after the valid JSON value at i.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\r' && b[i] != '\n' {
		i++
	}
	return i
}

// isObject reports whether valid JSON text is an object.
func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

// mergeParams merges a call's parameters into the one JSON object its
// request message is read from, and checks that protojson reads it.
func mergeParams(md protoreflect.MessageDescriptor, body []byte, query url.Values) ([]byte, error) {
	fields, err := mergeFields(md, body, query)
	if err != nil {
		return nil, err
	}
	if err := decodeFields(newMessage(md), fields); err != nil {
		return nil, err
	}
	return appendObject(nil, fields), nil
}

// newMessage returns an empty message of a descriptor's type.
func newMessage(md protoreflect.MessageDescriptor) proto.Message {
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName()); err == nil {
		return mt.New().Interface()
	}
	return dynamicpb.NewMessage(md)
}

// mergeFields merges the JSON body's members and every query parameter the
// body does not set, each by the JSON name of its field; unknown
// parameters and nulls are left out. Query values become JSON (queryJSON),
// and the few forms the contract accepts that protojson does not are
// brought to protojson's (lenient).
func mergeFields(md protoreflect.MessageDescriptor, body []byte, query url.Values) (map[string]json.RawMessage, error) {
	merged := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
		members, ok := objectMembers(body)
		if !ok {
			members = nil
			err := json.Unmarshal(body, &members)
			if err == nil && members == nil {
				err = errors.New("not an object")
			}
			if err != nil {
				var syntax *json.SyntaxError
				if errors.As(err, &syntax) && strings.Contains(syntax.Error(), "exceeded max depth") {
					// encoding/json's own bound; the worlds refuse values far
					// shallower, with the limit and the parameter named.
					return nil, paramErrorf("The request body nests deeper than %d levels", jsonDecoderDepth)
				}
				return nil, paramErrorf("The request body must be a JSON object")
			}
		}
		for name, raw := range members {
			fd := fieldByName(md, name)
			if fd == nil || isNull(raw) {
				continue
			}
			v, err := lenient(fd, raw)
			if err != nil {
				return nil, err
			}
			merged[fd.JSONName()] = v
		}
	}
	for name, values := range query {
		fd := fieldByName(md, name)
		if fd == nil || len(values) == 0 {
			continue
		}
		if _, set := merged[fd.JSONName()]; set {
			continue
		}
		v, err := queryJSON(fd, values)
		if err == nil {
			v, err = lenient(fd, v)
		}
		if err != nil {
			return nil, err
		}
		merged[fd.JSONName()] = v
	}
	return merged, nil
}

// appendObject appends a JSON object of already valid JSON values, its
// keys sorted (as encoding/json would write it, without the reflection).
func appendObject(dst []byte, fields map[string]json.RawMessage) []byte {
	keys := slices.Sorted(maps.Keys(fields))
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		dst = append(dst, fields[k]...)
	}
	return append(dst, '}')
}

// fieldByName finds a field by its JSON name or its proto name.
func fieldByName(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	if fd := fields.ByJSONName(name); fd != nil {
		return fd
	}
	return fields.ByName(protoreflect.Name(name))
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// queryJSON turns the query values of one field into JSON: JSON text for
// maps, objects and lists (a list of strings also takes a comma-separated
// list or repeated keys), a JSON string for any other value, which
// protojson reads for numbers too.
func queryJSON(fd protoreflect.FieldDescriptor, values []string) (json.RawMessage, error) {
	last := values[len(values)-1]
	switch {
	case fd.IsMap():
		return jsonText(fd, last, '{')
	case fd.IsList():
		if len(values) > 1 {
			return json.Marshal(values)
		}
		v := strings.TrimSpace(last)
		switch {
		case strings.HasPrefix(v, "["):
			return jsonText(fd, v, '[')
		case v == "":
			return json.RawMessage("[]"), nil
		case fd.Kind() == protoreflect.StringKind:
			return json.Marshal(strings.Split(v, ","))
		}
		return json.Marshal([]string{v})
	case fd.Kind() == protoreflect.MessageKind && scalarOf(fd) == 0:
		if fd.Message().FullName() == "google.protobuf.Value" {
			if json.Valid([]byte(last)) {
				return json.RawMessage(last), nil
			}
			return json.Marshal(last)
		}
		return jsonText(fd, last, '{')
	}
	// A JSON string, quoted as the REST encoder quotes (json.Marshal
	// would allocate twice for it, on every parameter of every call).
	return appendString(make([]byte, 0, len(last)+2), last), nil
}

// jsonText checks that a query value is JSON text opening with open (an
// object or an array).
func jsonText(fd protoreflect.FieldDescriptor, v string, open byte) (json.RawMessage, error) {
	v = strings.TrimSpace(v)
	if !json.Valid([]byte(v)) || v[0] != open {
		if open == '[' {
			return nil, paramErrorf("'%s' must be an array", fd.JSONName())
		}
		return nil, paramErrorf("'%s' must be a JSON object", fd.JSONName())
	}
	return json.RawMessage(v), nil
}

// lenient brings the values the contract accepts but protojson does not to
// protojson's form: a boolean given as a string ("true", "false", "1",
// "0"; empty is true, as a bare query flag) and a number given as a string
// with spaces around it. It refuses a string that is not a finite number
// for a numeric field, which protojson would take for a float
// ("NaN", "Infinity").
func lenient(fd protoreflect.FieldDescriptor, raw json.RawMessage) (json.RawMessage, error) {
	if fd.IsMap() {
		return raw, nil
	}
	if !fd.IsList() {
		return lenientValue(fd, raw)
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return raw, nil // protojson refuses it, and refusal names it
	}
	changed := false
	for i, item := range items {
		v, err := lenientValue(fd, item)
		if err != nil {
			return nil, err
		}
		changed = changed || !bytes.Equal(v, item)
		items[i] = v
	}
	if !changed {
		return raw, nil
	}
	return json.Marshal(items)
}

func lenientValue(fd protoreflect.FieldDescriptor, raw json.RawMessage) (json.RawMessage, error) {
	kind := scalarOf(fd)
	switch kind {
	case 0, protoreflect.StringKind, protoreflect.BytesKind, protoreflect.EnumKind:
		return raw, nil // taken as they are
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return raw, nil
	}
	switch kind {
	case protoreflect.BoolKind:
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "", "true", "1":
			return json.RawMessage("true"), nil
		case "false", "0":
			return json.RawMessage("false"), nil
		}
		return nil, paramErrorf("'%s' must be true or false", fd.JSONName())
	}
	n := strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(n, 64); err != nil || math.IsNaN(f) || math.IsInf(f, 0) || !json.Valid([]byte(n)) {
		return nil, paramErrorf("'%s' must be a number", fd.JSONName())
	}
	return json.RawMessage(n), nil
}

// scalarOf is the kind of a field's values: its own for a scalar, the
// wrapped one for a google.protobuf wrapper (StringValue, DoubleValue,
// ...), 0 for any other message.
func scalarOf(fd protoreflect.FieldDescriptor) protoreflect.Kind {
	if fd.Kind() != protoreflect.MessageKind {
		return fd.Kind()
	}
	md := fd.Message()
	if md.ParentFile().Path() != "google/protobuf/wrappers.proto" {
		return 0
	}
	return md.Fields().ByName("value").Kind()
}

// refusal names the parameter protojson refused among fields (each tried
// alone, in order of name) and says what it must be. A member of a nested
// object is named with its path from the request's top, after prefix
// (`quotas.keys`), so that it cannot be taken for a top-level parameter of
// the same name.
func refusal(md protoreflect.MessageDescriptor, fields map[string]json.RawMessage, prefix string) error {
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		fd := fieldByName(md, name)
		if fd != nil && !accepted(md, fd, fields[name]) {
			return fieldRefusal(fd, fields[name], prefix)
		}
	}
	return paramErrorf("Invalid parameters")
}

// accepted reports whether protojson reads raw as the value of fd alone.
func accepted(md protoreflect.MessageDescriptor, fd protoreflect.FieldDescriptor, raw json.RawMessage) bool {
	obj := appendObject(nil, map[string]json.RawMessage{fd.JSONName(): raw})
	return paramsJSON.Unmarshal(obj, newMessage(md)) == nil
}

// fieldRefusal says what a refused field's value must be, naming the field
// after prefix.
func fieldRefusal(fd protoreflect.FieldDescriptor, raw json.RawMessage, prefix string) error {
	name := prefix + fd.JSONName()
	switch {
	case fd.IsMap():
		return paramErrorf("'%s' must be a JSON object", name)
	case fd.IsList():
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return paramErrorf("'%s' must be an array", name)
		}
		for _, item := range items {
			if !accepted(fd.ContainingMessage(), fd, json.RawMessage("["+string(item)+"]")) {
				return valueRefusal(fd, item, prefix)
			}
		}
		return paramErrorf("'%s' must be an array", name)
	}
	return valueRefusal(fd, raw, prefix)
}

// valueRefusal says what one value of a field must be, naming the field
// after prefix.
func valueRefusal(fd protoreflect.FieldDescriptor, raw json.RawMessage, prefix string) error {
	name := prefix + fd.JSONName()
	switch kind := scalarOf(fd); kind {
	case protoreflect.BoolKind:
		return paramErrorf("'%s' must be true or false", name)
	case protoreflect.StringKind:
		return paramErrorf("'%s' must be a string", name)
	case protoreflect.BytesKind:
		return paramErrorf("'%s' must be base64 text", name)
	case protoreflect.EnumKind:
		return paramErrorf("'%s' is not one of its values", name)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		f, err := strconv.ParseFloat(strings.Trim(string(raw), `" `), 64)
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange):
			return paramErrorf("'%s' must be a number", name)
		case err == nil && f != math.Trunc(f):
			return paramErrorf("'%s' must be a whole number", name)
		}
		return paramErrorf("'%s' is out of range", name)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return paramErrorf("'%s' must be a number", name)
	case 0:
		var members map[string]json.RawMessage
		if json.Unmarshal(raw, &members) != nil || members == nil {
			return paramErrorf("'%s' must be a JSON object", name)
		}
		// A message of our own (a Currency): name the member at fault
		// by its path.
		if fd.Message().ParentFile().Package() != "google.protobuf" {
			return refusal(fd.Message(), members, name+".")
		}
		return paramErrorf("'%s' must be a JSON object", name)
	}
	return paramErrorf("'%s' is not valid", name)
}
