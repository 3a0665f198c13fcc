package main

import (
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tabletop-relay/relay/gen/openapi"
)

// oaDoc is the relay's OpenAPI document read as plain JSON, with a
// validator for the part of OpenAPI 3.0's schema language it uses. The
// validator is stricter than OpenAPI in one way, on purpose: an object
// schema that lists properties and says nothing of others accepts no
// others, so an answer field the document does not describe fails.
type oaDoc struct {
	root    map[string]any
	mu      sync.Mutex
	regexps map[string]*regexp.Regexp
}

// loadOADoc reads the embedded document (the one /openapi.json serves).
func loadOADoc(t *testing.T) *oaDoc {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(openapi.JSON, &root); err != nil {
		t.Fatal(err)
	}
	return &oaDoc{root: root, regexps: map[string]*regexp.Regexp{}}
}

// resolve follows a local reference, `#/components/schemas/Name`.
func (d *oaDoc) resolve(ref string) any {
	var node any = d.root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, _ := node.(map[string]any)
		node = m[part]
	}
	return node
}

// deref follows references until a non-reference.
func (d *oaDoc) deref(v any) map[string]any {
	for range 20 {
		m, _ := v.(map[string]any)
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		v = d.resolve(ref)
	}
	return nil
}

// oaOperation is one operation of the document.
type oaOperation struct {
	id, method, path string
	op               map[string]any
}

// operations lists every operation.
func (d *oaDoc) operations() []oaOperation {
	var out []oaOperation
	paths, _ := d.root["paths"].(map[string]any)
	for path, item := range paths {
		for method, op := range item.(map[string]any) {
			if o, ok := op.(map[string]any); ok {
				out = append(out, oaOperation{id: fmt.Sprint(o["operationId"]), method: strings.ToUpper(method), path: path, op: o})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// find returns the operation a request reaches: its method and a path
// template whose variables match one segment each.
func (d *oaDoc) find(method, path string) (oaOperation, bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, op := range d.operations() {
		if op.method != method {
			continue
		}
		tmpl := strings.Split(strings.Trim(op.path, "/"), "/")
		if len(tmpl) != len(segs) {
			continue
		}
		match := true
		for i, s := range tmpl {
			if !strings.HasPrefix(s, "{") && s != segs[i] {
				match = false
				break
			}
		}
		if match {
			return op, true
		}
	}
	return oaOperation{}, false
}

// responseSchema is the schema an operation gives a status and content
// type (the `default` response for a status it does not list), or false
// when it gives none.
func (d *oaDoc) responseSchema(op oaOperation, status int, contentType string) (any, bool) {
	responses, _ := op.op["responses"].(map[string]any)
	r, ok := responses[strconv.Itoa(status)]
	if !ok {
		r, ok = responses["default"]
	}
	if !ok {
		return nil, false
	}
	content, _ := d.deref(r)["content"].(map[string]any)
	mediaType, _, _ := mime.ParseMediaType(contentType)
	media, ok := content[mediaType].(map[string]any)
	if !ok {
		return nil, false
	}
	return media["schema"], true
}

// validate checks a JSON value (as encoding/json decodes it) against a
// schema and lists what does not match, each with its place in the value.
func (d *oaDoc) validate(schema, v any, at string) []string {
	s, _ := schema.(map[string]any)
	if s == nil {
		return nil
	}
	if ref, ok := s["$ref"].(string); ok {
		return d.validate(d.resolve(ref), v, at)
	}
	if v == nil {
		if s["nullable"] == true {
			return nil
		}
		if _, typed := s["type"]; typed {
			return []string{at + ": null, but not nullable"}
		}
	}
	var errs []string
	if all, ok := s["allOf"].([]any); ok {
		for _, sub := range all {
			errs = append(errs, d.validate(sub, v, at)...)
		}
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		alts, ok := s[key].([]any)
		if !ok {
			continue
		}
		matched := 0
		var why []string
		for i, sub := range alts {
			if e := d.validate(sub, v, at); len(e) == 0 {
				matched++
			} else {
				why = append(why, fmt.Sprintf("[%d] %s", i, strings.Join(e, "; ")))
			}
		}
		if matched == 0 || key == "oneOf" && matched > 1 {
			errs = append(errs, fmt.Sprintf("%s: matches %d of the %s alternatives: %s", at, matched, key, strings.Join(why, " | ")))
		}
	}
	if v == nil {
		return errs
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if reflect.DeepEqual(e, v) {
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Sprintf("%s: %v is not one of %v", at, v, enum))
		}
	}
	switch s["type"] {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return append(errs, fmt.Sprintf("%s: %T, want an object", at, v))
		}
		errs = append(errs, d.validateObject(s, obj, at)...)
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return append(errs, fmt.Sprintf("%s: %T, want an array", at, v))
		}
		for i, e := range arr {
			errs = append(errs, d.validate(s["items"], e, fmt.Sprintf("%s[%d]", at, i))...)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return append(errs, fmt.Sprintf("%s: %T %v, want a string", at, v, v))
		}
		if p, ok := s["pattern"].(string); ok && !d.regexp(p).MatchString(str) {
			errs = append(errs, fmt.Sprintf("%s: %q does not match %s", at, str, p))
		}
	case "integer":
		n, ok := v.(float64)
		if !ok || n != math.Trunc(n) {
			errs = append(errs, fmt.Sprintf("%s: %v, want an integer", at, v))
		}
	case "number":
		if _, ok := v.(float64); !ok {
			errs = append(errs, fmt.Sprintf("%s: %T %v, want a number", at, v, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			errs = append(errs, fmt.Sprintf("%s: %T %v, want a boolean", at, v, v))
		}
	}
	return errs
}

// validateObject checks an object's members: the required ones are there,
// each described one matches, and others are allowed only when the schema
// says so (see oaDoc).
func (d *oaDoc) validateObject(s map[string]any, obj map[string]any, at string) []string {
	var errs []string
	for _, r := range asList(s["required"]) {
		if _, ok := obj[r]; !ok {
			errs = append(errs, fmt.Sprintf("%s: required %q is missing", at, r))
		}
	}
	props, hasProps := s["properties"].(map[string]any)
	extra, extraSet := s["additionalProperties"]
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if p, ok := props[k]; ok {
			errs = append(errs, d.validate(p, obj[k], at+"."+k)...)
			continue
		}
		switch {
		case extraSet && extra == false, !extraSet && hasProps:
			errs = append(errs, fmt.Sprintf("%s: %q is not described", at, k))
		case extraSet && extra != true:
			errs = append(errs, d.validate(extra, obj[k], at+"."+k)...)
		}
	}
	return errs
}

func (d *oaDoc) regexp(p string) *regexp.Regexp {
	d.mu.Lock()
	defer d.mu.Unlock()
	re, ok := d.regexps[p]
	if !ok {
		re = regexp.MustCompile(p)
		d.regexps[p] = re
	}
	return re
}

func asList(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// TestOpenAPIValidatorRejects keeps the validator honest: each kind of
// mismatch it must catch, caught.
func TestOpenAPIValidatorRejects(t *testing.T) {
	t.Parallel()
	d := loadOADoc(t)
	env := map[string]any{"$ref": "#/components/schemas/GetDocumentResult"}
	good := map[string]any{"type": "entity-result", "requestId": "entity_1", "data": map[string]any{"uuid": "Actor.x", "name": "X", "img": nil}}
	if errs := d.validate(env, good, "body"); len(errs) > 0 {
		t.Fatalf("a good answer fails: %v", errs)
	}
	for name, bad := range map[string]map[string]any{
		"missing field":  {"type": "entity-result", "data": map[string]any{}},
		"wrong enum":     {"type": "get-result", "requestId": "x", "data": map[string]any{}},
		"wrong type":     {"type": "entity-result", "requestId": 1.0, "data": map[string]any{}},
		"undescribed":    {"type": "entity-result", "requestId": "x", "data": map[string]any{}, "extra": true},
		"nested type":    {"type": "entity-result", "requestId": "x", "data": map[string]any{"name": 3.0}},
		"null not typed": {"type": "entity-result", "requestId": "x", "data": map[string]any{"sort": nil}},
	} {
		if errs := d.validate(env, bad, "body"); len(errs) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
	frame := map[string]any{"$ref": "#/components/schemas/SubscribeActorsEvent"}
	if errs := d.validate(frame, map[string]any{"id": "3", "event": "actor-update", "data": map[string]any{"actorUuid": "a", "uuid": "a", "changes": map[string]any{}}}, "frame"); len(errs) > 0 {
		t.Errorf("a good frame fails: %v", errs)
	}
	if errs := d.validate(frame, map[string]any{"id": "3", "event": "actor-updated", "data": map[string]any{}}, "frame"); len(errs) == 0 {
		t.Errorf("an unknown event is not caught")
	}
}
