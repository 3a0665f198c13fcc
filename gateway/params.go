package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
)

// paramError is a bad request parameter; its text names the parameter and is
// shown to the caller.
type paramError struct{ msg string }

func (e *paramError) Error() string { return e.msg }

func paramErrorf(format string, args ...any) error {
	return &paramError{msg: fmt.Sprintf(format, args...)}
}

// mergeParams builds the one JSON object a request message is read from: the
// JSON body's fields, plus every query parameter the body does not set. Both
// are checked against the message's fields, so a bad value is refused with
// its parameter named instead of a decoder's message; unknown parameters are
// ignored. Query values are text: numbers and booleans are parsed, and
// arrays and objects are JSON text (a repeated string also takes repeated
// keys or a comma-separated list).
func mergeParams(md protoreflect.MessageDescriptor, body []byte, query url.Values) ([]byte, error) {
	fields, err := mergeFields(md, body, query)
	if err != nil {
		return nil, err
	}
	return appendObject(nil, fields), nil
}

// jsonDecoderDepth is the nesting encoding/json refuses to decode.
const jsonDecoderDepth = 10000

// mergeFields is mergeParams before the object is written: each field's
// JSON value by the field's JSON name.
func mergeFields(md protoreflect.MessageDescriptor, body []byte, query url.Values) (map[string]json.RawMessage, error) {
	merged := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
			var syntax *json.SyntaxError
			if errors.As(err, &syntax) && strings.Contains(syntax.Error(), "exceeded max depth") {
				// encoding/json's own bound; the worlds refuse values far
				// shallower, with the limit and the parameter named.
				return nil, paramErrorf("The request body nests deeper than %d levels", jsonDecoderDepth)
			}
			return nil, paramErrorf("The request body must be a JSON object")
		}
		for name, raw := range fields {
			fd := fieldByName(md, name)
			if fd == nil || isNull(raw) {
				continue
			}
			v, err := normalizeJSON(fd, raw)
			if err != nil {
				return nil, err
			}
			merged[fd.JSONName()] = v
		}
	}
	for name, values := range query {
		fd := fieldByName(md, name)
		if fd == nil {
			continue
		}
		if _, set := merged[fd.JSONName()]; set {
			continue
		}
		v, err := queryJSON(fd, values)
		if err != nil {
			return nil, err
		}
		if v != nil {
			merged[fd.JSONName()] = v
		}
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

// queryJSON converts the query values of one field to JSON.
func queryJSON(fd protoreflect.FieldDescriptor, values []string) (json.RawMessage, error) {
	if len(values) == 0 {
		return nil, nil
	}
	name := fd.JSONName()
	switch {
	case fd.IsMap():
		return objectText(name, values[len(values)-1])
	case fd.IsList():
		var items []string
		if len(values) == 1 {
			v := strings.TrimSpace(values[0])
			if strings.HasPrefix(v, "[") {
				return normalizeJSON(fd, json.RawMessage(v))
			}
			if v == "" {
				return json.RawMessage("[]"), nil
			}
			if fd.Kind() == protoreflect.StringKind {
				items = strings.Split(v, ",")
			} else {
				items = []string{v}
			}
		} else {
			items = values
		}
		out := make([]json.RawMessage, 0, len(items))
		for _, item := range items {
			v, err := scalarText(fd, strings.TrimSpace(item))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return json.Marshal(out)
	}
	return scalarText(fd, values[len(values)-1])
}

// scalarText converts one query value of a singular field (or one element of
// a repeated field) to JSON.
func scalarText(fd protoreflect.FieldDescriptor, v string) (json.RawMessage, error) {
	name := fd.JSONName()
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.EnumKind:
		return appendString(nil, v), nil
	case protoreflect.BoolKind:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "", "true", "1":
			return json.RawMessage("true"), nil
		case "false", "0":
			return json.RawMessage("false"), nil
		}
		return nil, paramErrorf("'%s' must be true or false", name)
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Value":
			if json.Valid([]byte(v)) {
				return json.RawMessage(v), nil
			}
			return json.Marshal(v)
		case "google.protobuf.StringValue":
			return appendString(nil, v), nil
		}
		return objectText(name, v)
	case protoreflect.BytesKind:
		return json.Marshal(v)
	}
	return numberText(fd, strings.TrimSpace(v))
}

// objectText checks that a query value is a JSON object.
func objectText(name, v string) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &obj); err != nil || obj == nil {
		return nil, paramErrorf("'%s' must be a JSON object", name)
	}
	return json.RawMessage(v), nil
}

// numberText parses a number for a numeric field, refusing fractions for
// integer fields and values out of range.
func numberText(fd protoreflect.FieldDescriptor, v string) (json.RawMessage, error) {
	name := fd.JSONName()
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, paramErrorf("'%s' must be a number", name)
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if f != math.Trunc(f) {
			return nil, paramErrorf("'%s' must be a whole number", name)
		}
		if f < math.MinInt32 || f > math.MaxInt32 {
			return nil, paramErrorf("'%s' is out of range", name)
		}
		return json.RawMessage(strconv.FormatInt(int64(f), 10)), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || (n < 0 && (fd.Kind() == protoreflect.Uint32Kind || fd.Kind() == protoreflect.Uint64Kind ||
			fd.Kind() == protoreflect.Fixed32Kind || fd.Kind() == protoreflect.Fixed64Kind)) {
			return nil, paramErrorf("'%s' must be a whole number", name)
		}
		return json.RawMessage(strconv.Quote(strconv.FormatInt(n, 10))), nil
	}
	return json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64)), nil
}

// normalizeJSON checks a JSON value against a field and returns it in the
// form protojson reads. Numbers and booleans given as strings are accepted,
// as query values are.
func normalizeJSON(fd protoreflect.FieldDescriptor, raw json.RawMessage) (json.RawMessage, error) {
	name := fd.JSONName()
	if fd.IsList() {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, paramErrorf("'%s' must be an array", name)
		}
		out := make([]json.RawMessage, 0, len(items))
		for _, item := range items {
			v, err := normalizeScalar(fd, item)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return json.Marshal(out)
	}
	if fd.IsMap() {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, paramErrorf("'%s' must be a JSON object", name)
		}
		return raw, nil
	}
	return normalizeScalar(fd, raw)
}

func normalizeScalar(fd protoreflect.FieldDescriptor, raw json.RawMessage) (json.RawMessage, error) {
	name := fd.JSONName()
	raw = bytes.TrimSpace(raw)
	var s string
	isString := json.Unmarshal(raw, &s) == nil
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.EnumKind, protoreflect.BytesKind:
		if !isString {
			return nil, paramErrorf("'%s' must be a string", name)
		}
		return raw, nil
	case protoreflect.BoolKind:
		if isString {
			return scalarText(fd, s)
		}
		if string(raw) != "true" && string(raw) != "false" {
			return nil, paramErrorf("'%s' must be true or false", name)
		}
		return raw, nil
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Value":
			return raw, nil
		case "google.protobuf.StringValue":
			if !isString {
				return nil, paramErrorf("'%s' must be a string", name)
			}
			return raw, nil
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, paramErrorf("'%s' must be a JSON object", name)
		}
		if fd.Message().FullName() == "google.protobuf.Struct" {
			return raw, nil
		}
		// A nested message of our own (such as Currency): check its fields too.
		return mergeParams(fd.Message(), raw, nil)
	}
	if isString {
		return numberText(fd, strings.TrimSpace(s))
	}
	return numberText(fd, string(raw))
}

// queryParser is the gateway's runtime.QueryParameterParser. For a
// body-less route the parameter middleware leaves the merged parameters in
// r.Form, one entry per field: the field's JSON name and its JSON value
// (see formFields). Values already in the message (path variables such as
// `/keys/{id}`) win.
type queryParser struct{}

func (queryParser) Parse(msg proto.Message, values url.Values, _ *utilities.DoubleArray) error {
	m := msg.ProtoReflect()
	fields := m.Descriptor().Fields()
	for name, raw := range values {
		fd := fields.ByJSONName(name)
		if fd == nil || len(raw) == 0 || m.Has(fd) {
			continue
		}
		if err := decodeField(m, fd, raw[0]); err != nil {
			return paramErrorf("Invalid parameters: %v", err)
		}
	}
	return nil
}

// formFields puts merged parameters into the form queryParser reads.
func formFields(fields map[string]json.RawMessage) url.Values {
	form := make(url.Values, len(fields))
	for name, raw := range fields {
		form[name] = []string{string(raw)}
	}
	return form
}

// decodeField sets one field from its JSON value, as protojson would. The
// merged parameters are mostly plain strings, numbers and booleans, which
// are set directly; anything else goes through protojson.
func decodeField(m protoreflect.Message, fd protoreflect.FieldDescriptor, raw string) error {
	if !fd.IsList() && !fd.IsMap() {
		if v, ok := scalarValue(fd.Kind(), raw); ok {
			m.Set(fd, v)
			return nil
		}
	}
	tmp := m.New()
	obj := appendString(nil, fd.JSONName())
	obj = append(append(append([]byte{'{'}, obj...), ':'), raw...)
	obj = append(obj, '}')
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(obj, tmp.Interface()); err != nil {
		return err
	}
	if tmp.Has(fd) {
		m.Set(fd, tmp.Get(fd))
	}
	return nil
}

// scalarValue reads the plainest JSON forms of a scalar: a string without
// escapes, true or false, an integer without exponent or leading zeros.
// Anything else is left to protojson (ok false), so that every form
// protojson accepts or refuses is still accepted or refused.
func scalarValue(kind protoreflect.Kind, raw string) (protoreflect.Value, bool) {
	switch kind {
	case protoreflect.StringKind:
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
			return protoreflect.Value{}, false
		}
		s := raw[1 : len(raw)-1]
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
				return protoreflect.Value{}, false
			}
		}
		if !utf8.ValidString(s) {
			return protoreflect.Value{}, false
		}
		return protoreflect.ValueOfString(s), true
	case protoreflect.BoolKind:
		switch raw {
		case "true":
			return protoreflect.ValueOfBool(true), true
		case "false":
			return protoreflect.ValueOfBool(false), true
		}
		return protoreflect.Value{}, false
	}
	if !plainInteger(raw) {
		return protoreflect.Value{}, false
	}
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if n, err := strconv.ParseInt(raw, 10, 32); err == nil {
			return protoreflect.ValueOfInt32(int32(n)), true
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
			return protoreflect.ValueOfInt64(n), true
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if n, err := strconv.ParseUint(raw, 10, 32); err == nil {
			return protoreflect.ValueOfUint32(uint32(n)), true
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if n, err := strconv.ParseUint(raw, 10, 64); err == nil {
			return protoreflect.ValueOfUint64(n), true
		}
	case protoreflect.DoubleKind:
		if n, err := strconv.ParseFloat(raw, 64); err == nil {
			return protoreflect.ValueOfFloat64(n), true
		}
	case protoreflect.FloatKind:
		if n, err := strconv.ParseFloat(raw, 32); err == nil {
			return protoreflect.ValueOfFloat32(float32(n)), true
		}
	}
	return protoreflect.Value{}, false
}

// plainInteger reports whether s is an optional minus and decimal digits,
// without leading zeros, of a length that cannot lose precision as a float.
func plainInteger(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 15 || digits[0] == '0' && len(digits) > 1 {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}
