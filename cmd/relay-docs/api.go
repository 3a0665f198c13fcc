package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// openAPI is the part of the OpenAPI document the API reference reads.
type openAPI struct {
	Info struct {
		Title       string `json:"title"`
		Version     string `json:"version"`
		Description string `json:"description"`
	} `json:"info"`
	Tags []struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	} `json:"tags"`
	Paths      json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type schema struct {
	Ref         string             `json:"$ref"`
	Type        string             `json:"type"`
	Format      string             `json:"format"`
	Description string             `json:"description"`
	Enum        []any              `json:"enum"`
	Items       *schema            `json:"items"`
	AllOf       []*schema          `json:"allOf"`
	OneOf       []*schema          `json:"oneOf"`
	Properties  map[string]*schema `json:"properties"`
	Required    []string           `json:"required"`
}

type operation struct {
	Tags        []string `json:"tags"`
	Summary     string   `json:"summary"`
	Description string   `json:"description"`
	OperationID string   `json:"operationId"`
	Parameters  []struct {
		Name        string  `json:"name"`
		In          string  `json:"in"`
		Description string  `json:"description"`
		Required    bool    `json:"required"`
		Schema      *schema `json:"schema"`
	} `json:"parameters"`
	RequestBody *struct {
		Content map[string]struct {
			Schema *schema `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct {
			Schema *schema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

// route is one operation with its method and path, in the document's order.
type route struct {
	method, path string
	op           operation
}

// apiPage renders the API reference: every operation by service, with its
// parameters and the fields of its answer's data.
func apiPage(file string) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var doc openAPI
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	routes, err := orderedRoutes(doc.Paths)
	if err != nil {
		return nil, err
	}
	byTag := map[string][]route{}
	for _, r := range routes {
		tag := "Other"
		if len(r.op.Tags) > 0 {
			tag = r.op.Tags[0]
		}
		byTag[tag] = append(byTag[tag], r)
	}

	var b bytes.Buffer
	b.WriteString(generatedNote)
	b.WriteString("# API reference\n\n")
	fmt.Fprintf(&b, "Every operation of the API (%s, version %s), by service, from the OpenAPI document `gen/openapi/relay.json` that the relay also serves at `/openapi.json` and renders at `/docs`. ", doc.Info.Title, doc.Info.Version)
	b.WriteString("Parameters may come in the query string or in the JSON body on every method (see [Using the API](../guide/using-the-api.md)); every answer is the envelope `{type, requestId, data}`, and the tables list the fields of `data`.\n\n")
	for _, t := range doc.Tags {
		rs := byTag[t.Name]
		if len(rs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", t.Name, oneLine(firstParagraph(t.Description)))
		for _, r := range rs {
			writeRoute(&b, doc.Components.Schemas, r)
		}
	}
	return b.Bytes(), nil
}

// orderedRoutes reads the paths object keeping the document's order, which
// groups the operations as the contract does.
func orderedRoutes(paths json.RawMessage) ([]route, error) {
	dec := json.NewDecoder(bytes.NewReader(paths))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var routes []route
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		path := tok.(string)
		var ops map[string]operation
		if err := dec.Decode(&ops); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		methods := make([]string, 0, len(ops))
		for m := range ops {
			methods = append(methods, m)
		}
		sort.Strings(methods)
		for _, m := range methods {
			routes = append(routes, route{strings.ToUpper(m), path, ops[m]})
		}
	}
	return routes, nil
}

func writeRoute(b *bytes.Buffer, schemas map[string]*schema, r route) {
	fmt.Fprintf(b, "### `%s %s`\n\n", r.method, r.path)
	if d := strings.TrimSpace(r.op.Description); d != "" {
		b.WriteString(d + "\n\n")
	} else if r.op.Summary != "" {
		b.WriteString(r.op.Summary + ".\n\n")
	}
	type param struct{ name, in, typ, desc string }
	var params []param
	for _, p := range r.op.Parameters {
		name := "`" + p.Name + "`"
		if p.Required {
			name += " (required)"
		}
		params = append(params, param{name, p.In, typeName(schemas, p.Schema), p.Description})
	}
	if r.op.RequestBody != nil {
		if body := firstContent(r.op.RequestBody.Content); body != nil {
			s := resolve(schemas, body)
			required := map[string]bool{}
			for _, n := range s.Required {
				required[n] = true
			}
			for _, n := range sortedKeys(s.Properties) {
				name := "`" + n + "`"
				if required[n] {
					name += " (required)"
				}
				params = append(params, param{name, "body", typeName(schemas, s.Properties[n]), describe(schemas, s.Properties[n])})
			}
		}
	}
	if len(params) > 0 {
		b.WriteString("| parameter | in | type | meaning |\n|---|---|---|---|\n")
		for _, p := range params {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", p.name, p.in, cell(p.typ), cell(p.desc))
		}
		b.WriteString("\n")
	}
	ok, found := r.op.Responses["200"]
	if !found {
		return
	}
	types := make([]string, 0, len(ok.Content))
	for ctype := range ok.Content {
		types = append(types, ctype)
	}
	sort.Strings(types)
	for _, ctype := range types {
		c := ok.Content[ctype]
		if ctype != "application/json" {
			fmt.Fprintf(b, "Answers `%s`.\n\n", ctype)
			continue
		}
		envelope := resolve(schemas, c.Schema)
		data := envelope.Properties["data"]
		if data == nil {
			continue
		}
		ds := resolve(schemas, data)
		if len(ds.Properties) == 0 {
			if d := describe(schemas, data); d != "" {
				fmt.Fprintf(b, "`data`: %s\n\n", oneLine(d))
			}
			continue
		}
		b.WriteString("| `data` field | type | meaning |\n|---|---|---|\n")
		for _, n := range sortedKeys(ds.Properties) {
			fmt.Fprintf(b, "| `%s` | %s | %s |\n", n, cell(typeName(schemas, ds.Properties[n])), cell(describe(schemas, ds.Properties[n])))
		}
		b.WriteString("\n")
	}
}

// firstContent returns the schema of a request body, the JSON one when the
// body may come in several types.
func firstContent(content map[string]struct {
	Schema *schema `json:"schema"`
}) *schema {
	keys := make([]string, 0, len(content))
	for k := range content {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "application/json") != (keys[j] == "application/json") {
			return keys[i] == "application/json"
		}
		return keys[i] < keys[j]
	})
	if len(keys) == 0 {
		return nil
	}
	return content[keys[0]].Schema
}

// resolve follows $ref and a single allOf to the schema they name.
func resolve(schemas map[string]*schema, s *schema) *schema {
	for i := 0; s != nil && i < 10; i++ {
		switch {
		case s.Ref != "":
			s = schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
		case len(s.AllOf) == 1 && len(s.Properties) == 0:
			s = s.AllOf[0]
		default:
			return s
		}
	}
	if s == nil {
		return &schema{}
	}
	return s
}

// describe is a schema's own description, else the one of what it refers to.
func describe(schemas map[string]*schema, s *schema) string {
	if s == nil {
		return ""
	}
	if s.Description != "" {
		return s.Description
	}
	return resolve(schemas, s).Description
}

// typeName names a schema's type as a reader expects it: the message name
// for an object, `T[]` for an array, the enum's values.
func typeName(schemas map[string]*schema, s *schema) string {
	if s == nil {
		return ""
	}
	name := ""
	if s.Ref != "" {
		name = strings.TrimPrefix(s.Ref, "#/components/schemas/")
	} else if len(s.AllOf) == 1 && s.AllOf[0].Ref != "" {
		name = strings.TrimPrefix(s.AllOf[0].Ref, "#/components/schemas/")
	}
	r := resolve(schemas, s)
	switch {
	case len(r.Enum) > 0:
		vals := make([]string, len(r.Enum))
		for i, v := range r.Enum {
			vals[i] = fmt.Sprintf("`%v`", v)
		}
		return strings.Join(vals, ", ")
	case r.Type == "array":
		return typeName(schemas, r.Items) + "[]"
	case name != "":
		return name
	case r.Format != "":
		return r.Type + " (" + r.Format + ")"
	case r.Type != "":
		return r.Type
	case len(r.OneOf) > 0:
		return "one of several"
	}
	return "any"
}

func sortedKeys(m map[string]*schema) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func firstParagraph(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "\n\n"); i >= 0 {
		return s[:i]
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", "\\|")
}
