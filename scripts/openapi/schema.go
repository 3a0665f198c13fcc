package main

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// side says which way a message travels over REST. Responses carry every
// field (the gateway emits zero values), so their schemas require them
// all; requests require only the fields marked REQUIRED.
type side int

const (
	input side = iota
	output
)

// schemaRef is a reference to a component schema.
func schemaRef(name string) *obj {
	return newObj("$ref", "#/components/schemas/"+name)
}

// messageRef returns a reference to a message's schema for one side,
// queueing the schema for emission. A message that travels both ways gets
// one schema per side: `Currency` for answers, `CurrencyInput` for
// requests.
func (b *builder) messageRef(md protoreflect.MessageDescriptor, s side) *obj {
	name := string(md.Name())
	if s == input && b.bothWays[md.FullName()] {
		name += "Input"
	}
	if prev, ok := b.messageNames[name]; ok && prev != md.FullName() {
		b.fail(fmt.Errorf("schema name %s is taken by both %s and %s", name, prev, md.FullName()))
	}
	b.messageNames[name] = md.FullName()
	if !b.queued[name] {
		b.queued[name] = true
		b.queue = append(b.queue, queuedMessage{name: name, md: md, side: s})
	}
	return schemaRef(name)
}

// queuedMessage is a message schema waiting to be written.
type queuedMessage struct {
	name string
	md   protoreflect.MessageDescriptor
	side side
}

// emitQueued writes the schema of every queued message, including those
// queued while writing.
func (b *builder) emitQueued() {
	for len(b.queue) > 0 {
		q := b.queue[0]
		b.queue = b.queue[1:]
		b.schemas.set(q.name, b.messageSchema(q.md, q.side))
	}
}

// messageSchema is the schema of a message: its fields by JSON name, in
// proto order, documented by their comments.
func (b *builder) messageSchema(md protoreflect.MessageDescriptor, s side) *obj {
	schema := newObj("type", "object")
	if c := b.comment(md); c != "" {
		schema.set("description", c)
	}
	props := newObj()
	var required []any
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		props.set(fd.JSONName(), b.fieldSchema(fd, s, true))
		if isRequired(fd, s) {
			required = append(required, fd.JSONName())
		}
	}
	if len(required) > 0 {
		schema.set("required", required)
	}
	schema.set("properties", props)
	return schema
}

// isRequired reports whether a field must be present: on requests, a field
// marked `(google.api.field_behavior) = REQUIRED`; in responses, every
// field the gateway always writes (all but those of a oneof, optional
// fields included, which it leaves out when unset, and those marked
// omit_empty, which it leaves out when empty).
func isRequired(fd protoreflect.FieldDescriptor, s side) bool {
	if s == output {
		omit, _ := proto.GetExtension(fd.Options(), relayv1.E_OmitEmpty).(bool)
		return fd.ContainingOneof() == nil && !omit
	}
	return hasBehavior(fd, annotations.FieldBehavior_REQUIRED)
}

// hasBehavior reports whether a field carries a google.api.field_behavior.
func hasBehavior(fd protoreflect.FieldDescriptor, want annotations.FieldBehavior) bool {
	behaviors, _ := proto.GetExtension(fd.Options(), annotations.E_FieldBehavior).([]annotations.FieldBehavior)
	return slices.Contains(behaviors, want)
}

// isRawJSON reports whether a field holds a JSON value the relay keeps
// serialised (relay.v1.raw_json): REST shows it inline, and values.json
// gives its shape.
func isRawJSON(fd protoreflect.FieldDescriptor) bool {
	raw, _ := proto.GetExtension(fd.Options(), relayv1.E_RawJson).(bool)
	return raw
}

// fieldSchema is the schema of one field; documented adds its comment.
func (b *builder) fieldSchema(fd protoreflect.FieldDescriptor, s side, documented bool) *obj {
	var schema *obj
	switch {
	case isRawJSON(fd):
		schema = b.rawJSONSchema(fd)
	case fd.IsMap():
		schema = newObj("type", "object", "additionalProperties", b.valueSchema(fd.MapValue(), s))
	case fd.IsList():
		schema = newObj("type", "array", "items", b.valueSchema(fd, s))
	default:
		schema = b.valueSchema(fd, s)
		if s == output && fd.Kind() == protoreflect.MessageKind && b.values.nullable[string(fd.FullName())] {
			schema = nullable(schema)
		}
	}
	if documented {
		if c := b.comment(fd); c != "" && !schema.has("description") {
			schema = describe(schema, c)
		}
		if deprecated(fd) {
			schema.set("deprecated", true)
		}
	}
	return schema
}

// rawJSONSchema is the schema values.json gives a raw_json field.
func (b *builder) rawJSONSchema(fd protoreflect.FieldDescriptor) *obj {
	name := string(fd.FullName())
	v, ok := b.values.fields[name]
	if !ok {
		b.fail(fmt.Errorf("%s is a raw_json field without a schema in values.json", name))
		return newObj()
	}
	schema, _ := cloneValue(v).(*obj)
	b.queueRefs(schema)
	return schema
}

// valueSchema is the schema of one value of a field (an element of a
// repeated field, a map's value).
func (b *builder) valueSchema(fd protoreflect.FieldDescriptor, s side) *obj {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return newObj("type", "string")
	case protoreflect.BoolKind:
		return newObj("type", "boolean")
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return newObj("type", "integer", "format", "int32")
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return newObj("type", "integer", "format", "int64", "minimum", 0)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		// protojson writes 64-bit integers as strings.
		return newObj("type", "string", "format", "int64")
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return newObj("type", "string", "format", "uint64")
	case protoreflect.DoubleKind:
		return newObj("type", "number", "format", "double")
	case protoreflect.FloatKind:
		return newObj("type", "number", "format", "float")
	case protoreflect.BytesKind:
		return newObj("type", "string", "format", "byte")
	case protoreflect.EnumKind:
		var names []any
		for i := range fd.Enum().Values().Len() {
			names = append(names, string(fd.Enum().Values().Get(i).Name()))
		}
		return newObj("type", "string", "enum", names)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if wkt := wellKnownSchema(fd.Message()); wkt != nil {
			return wkt
		}
		return b.messageRef(fd.Message(), s)
	}
	b.fail(fmt.Errorf("%s: unsupported kind %v", fd.FullName(), fd.Kind()))
	return newObj()
}

// wellKnownSchema is the JSON form protojson gives a well-known type, or
// nil for any other message.
func wellKnownSchema(md protoreflect.MessageDescriptor) *obj {
	switch md.FullName() {
	case "google.protobuf.Struct":
		return newObj("type", "object", "additionalProperties", true)
	case "google.protobuf.Value":
		return newObj()
	case "google.protobuf.ListValue":
		return newObj("type", "array", "items", newObj())
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue":
		return newObj("type", "number", "nullable", true)
	case "google.protobuf.Int32Value", "google.protobuf.UInt32Value":
		return newObj("type", "integer", "nullable", true)
	case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
		return newObj("type", "string", "nullable", true)
	case "google.protobuf.StringValue":
		return newObj("type", "string", "nullable", true)
	case "google.protobuf.BoolValue":
		return newObj("type", "boolean", "nullable", true)
	case "google.protobuf.BytesValue":
		return newObj("type", "string", "format", "byte", "nullable", true)
	case "google.protobuf.Timestamp":
		return newObj("type", "string", "format", "date-time")
	case "google.protobuf.Duration":
		return newObj("type", "string", "description", "Seconds with an `s` suffix, for example `1.5s`.")
	case "google.protobuf.FieldMask":
		return newObj("type", "string")
	case "google.protobuf.Empty":
		return newObj("type", "object")
	}
	return nil
}

// describe adds a description to a schema. A reference cannot carry one
// in OpenAPI 3.0 (siblings of $ref are ignored), so it is wrapped.
func describe(schema *obj, text string) *obj {
	if schema.has("$ref") {
		schema = newObj("allOf", []any{schema})
	}
	return schema.set("description", text)
}

// nullable lets a schema be null, wrapping a reference for the same reason
// as describe. (Every message is an object; nullable needs a type beside
// it.)
func nullable(schema *obj) *obj {
	if schema.has("$ref") {
		schema = newObj("type", "object", "allOf", []any{schema})
	}
	return schema.set("nullable", true)
}

func deprecated(d protoreflect.Descriptor) bool {
	type deprecater interface{ GetDeprecated() bool }
	if o, ok := d.Options().(deprecater); ok {
		return o.GetDeprecated()
	}
	return false
}

// queueRefs queues the message schemas a values.json schema refers to by
// name (`#/components/schemas/RollMode`); names of values.json's own
// schemas need nothing.
func (b *builder) queueRefs(v any) {
	switch t := v.(type) {
	case *obj:
		if ref, ok := t.get("$ref").(string); ok {
			name := strings.TrimPrefix(ref, "#/components/schemas/")
			if !b.values.schemas.has(name) {
				md, err := b.files.FindDescriptorByName(protoreflect.FullName(b.pkg + "." + name))
				if err != nil {
					b.fail(fmt.Errorf("values.json refers to %s, which is neither one of its schemas nor a message", ref))
					return
				}
				b.messageRef(md.(protoreflect.MessageDescriptor), output)
			}
		}
		for _, k := range t.keys {
			b.queueRefs(t.vals[k])
		}
	case []any:
		for _, e := range t {
			b.queueRefs(e)
		}
	}
}

// comment is a descriptor's leading comment, without the space each line
// starts with.
func (b *builder) comment(d protoreflect.Descriptor) string {
	loc := d.ParentFile().SourceLocations().ByDescriptor(d)
	text := strings.TrimSpace(loc.LeadingComments)
	if text == "" {
		return ""
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, " ")
	}
	return strings.Join(lines, "\n")
}
