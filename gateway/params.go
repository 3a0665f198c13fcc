package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

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
	merged := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
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
	return appendObject(nil, merged), nil
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

// paramsKey is the query key under which the middleware hands the merged
// parameters of a body-less route to queryParser.
const paramsKey = "__relay_params"

// queryParser is the gateway's runtime.QueryParameterParser: it reads the
// merged JSON the parameter middleware left under paramsKey. Values already
// in the message (path variables such as `/keys/{id}`) win.
type queryParser struct{}

func (queryParser) Parse(msg proto.Message, values url.Values, _ *utilities.DoubleArray) error {
	raw := values.Get(paramsKey)
	if raw == "" {
		return nil
	}
	// Unmarshal starts from an empty message, so path variables already
	// set are kept aside and merged back over the result.
	var fromPath proto.Message
	if hasFields(msg) {
		fromPath = proto.Clone(msg)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(raw), msg); err != nil {
		return paramErrorf("Invalid parameters: %v", err)
	}
	if fromPath != nil {
		proto.Merge(msg, fromPath)
	}
	return nil
}

// hasFields reports whether any field of msg is set.
func hasFields(msg proto.Message) bool {
	set := false
	msg.ProtoReflect().Range(func(protoreflect.FieldDescriptor, protoreflect.Value) bool {
		set = true
		return false
	})
	return set
}
