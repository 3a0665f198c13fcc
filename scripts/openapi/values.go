package main

import (
	"fmt"
)

// values is values.json: the schemas of the JSON values and event payloads
// that the protos cannot type.
type values struct {
	// schemas are added to components.schemas as they are.
	schemas *obj
	// fields maps a raw_json field's full name to its schema.
	fields map[string]any
	// streamEvents are the events every stream may send.
	streamEvents []streamEvent
	// streams maps an event RPC's full name to its channel's events.
	streams map[string][]streamEvent
	// nullable lists message fields of responses that may be null.
	nullable map[string]bool
}

// streamEvent is one kind of event of a stream: a fixed name or a pattern
// of names, and the schema of its payload.
type streamEvent struct {
	name        string // the frame's schema name
	event       string
	pattern     string
	example     string
	description string
	data        any
}

// loadValues reads values.json, resolving `{"$use": name}` to a copy of the
// schema of that name in its `shared` section.
func loadValues(raw []byte) (*values, error) {
	v, err := decodeOrdered(raw)
	if err != nil {
		return nil, err
	}
	root, ok := v.(*obj)
	if !ok {
		return nil, fmt.Errorf("not an object")
	}
	shared, _ := root.get("shared").(*obj)
	out := &values{
		schemas:  newObj(),
		fields:   map[string]any{},
		streams:  map[string][]streamEvent{},
		nullable: map[string]bool{},
	}
	if s, ok := root.get("schemas").(*obj); ok {
		out.schemas = s
	}
	if f, ok := root.get("fields").(*obj); ok {
		for _, name := range f.keys {
			schema := f.get(name)
			if use, ok := schema.(*obj); ok && use.has("$use") {
				ref, _ := use.get("$use").(string)
				target, ok := shared.get(ref).(*obj)
				if !ok {
					return nil, fmt.Errorf("field %s uses %q, which is not in shared", name, ref)
				}
				schema = target.clone()
			}
			out.fields[name] = schema
		}
	}
	if out.streamEvents, err = readEvents(root.get("streamEvents")); err != nil {
		return nil, fmt.Errorf("streamEvents: %w", err)
	}
	if s, ok := root.get("streams").(*obj); ok {
		for _, name := range s.keys {
			events, err := readEvents(s.get(name))
			if err != nil {
				return nil, fmt.Errorf("stream %s: %w", name, err)
			}
			out.streams[name] = events
		}
	}
	if list, ok := root.get("nullable").([]any); ok {
		for _, n := range list {
			out.nullable[fmt.Sprint(n)] = true
		}
	}
	return out, nil
}

func readEvents(v any) ([]streamEvent, error) {
	list, _ := v.([]any)
	var out []streamEvent
	for i, e := range list {
		o, ok := e.(*obj)
		if !ok {
			return nil, fmt.Errorf("event %d is not an object", i)
		}
		str := func(k string) string { s, _ := o.get(k).(string); return s }
		ev := streamEvent{name: str("name"), event: str("event"), pattern: str("eventPattern"), example: str("example"), description: str("description"), data: o.get("data")}
		if ev.name == "" || (ev.event == "") == (ev.pattern == "") || ev.data == nil {
			return nil, fmt.Errorf("event %d needs a name, one of event and eventPattern, and data", i)
		}
		out = append(out, ev)
	}
	return out, nil
}
