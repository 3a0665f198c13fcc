// Command openapienvelope completes the OpenAPI document that
// protoc-gen-openapiv2 writes from the protos with what the gateway adds on
// the wire, so that the document describes the REST API as callers see it:
//
//   - every success body is the envelope `{type, requestId, data}`, with the
//     RPC's response (or its response_body field) as `data` and `type` fixed
//     to `<operation>-result`;
//   - every failure is `{type, requestId, error}` (the `default` response);
//   - bytes fields marked `relay.v1.raw_json` are JSON, not base64;
//   - the event streams are Server-Sent Events.
//
// It reads the operation names and raw_json marks from the compiled
// descriptors, so it stays in step with the protos. scripts/generate.sh runs
// it on gen/openapi/relay.json.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	relayv1 "relay/gen/go/relay/v1"
)

// object is a JSON object of the document, kept generic on purpose: the
// document is rewritten in a few places and otherwise passed through.
type object = map[string]any

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: openapienvelope <openapi.json>")
		os.Exit(2)
	}
	if err := rewrite(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "openapienvelope:", err)
		os.Exit(1)
	}
}

func rewrite(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc object
	if err := json.Unmarshal(raw, &doc); err != nil {
		return err
	}
	methods := relayMethods()
	definitions, _ := doc["definitions"].(object)
	markRawJSON(definitions)
	definitions["relayError"] = object{
		"type":        "object",
		"description": "The body of every failure; the HTTP status tells the kind.",
		"required":    []any{"type", "requestId", "error"},
		"properties": object{
			"type":      object{"type": "string", "description": "`<operation>-result`."},
			"requestId": object{"type": "string", "description": "`<operation>_<digits>`, also in the X-Request-Id header."},
			"error":     object{"type": "string", "description": "What went wrong, naming the parameter where one is at fault."},
		},
	}
	paths, _ := doc["paths"].(object)
	for _, item := range paths {
		ops, _ := item.(object)
		for _, op := range ops {
			operation, _ := op.(object)
			md := methods[fmt.Sprint(operation["operationId"])]
			if md == nil {
				continue
			}
			rewriteOperation(operation, md, definitions)
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	out = append(out, '\n')
	if bytes.Equal(out, raw) {
		return nil
	}
	return os.WriteFile(path, out, 0o644)
}

// relayMethods maps OpenAPI operation ids (`DocumentService_GetDocument`) to
// method descriptors.
func relayMethods() map[string]protoreflect.MethodDescriptor {
	out := map[string]protoreflect.MethodDescriptor{}
	protoregistry.GlobalFiles.RangeFilesByPackage("relay.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				out[string(sd.Name())+"_"+string(md.Name())] = md
			}
		}
		return true
	})
	return out
}

// rewriteOperation wraps the success schema in the envelope and adds the
// error body.
func rewriteOperation(op object, md protoreflect.MethodDescriptor, definitions object) {
	policy, _ := proto.GetExtension(md.Options(), relayv1.E_Policy).(*relayv1.Policy)
	responses, _ := op["responses"].(object)
	ok, _ := responses["200"].(object)
	if ok == nil {
		return
	}
	responses["default"] = object{
		"description": "A failure: 400 bad parameter, 401 bad key, 403 refused, 404 unknown, 409 conflict, 413 too large, 429 too many, 501 not built yet, 503 unavailable, 504 time-out.",
		"schema":      object{"$ref": "#/definitions/relayError"},
	}
	if md.IsStreamingServer() && strings.HasPrefix(string(md.Parent().Name()), "EventService") {
		op["produces"] = []any{"text/event-stream"}
		ok["description"] = "A stream of Server-Sent Events: a `connected` event, then `id:`, `event:` and `data:` frames whose data is the Event's payload."
		ok["schema"] = object{"type": "string"}
		return
	}
	data, _ := ok["schema"].(object)
	if data == nil {
		data = object{"type": "object"}
	}
	if isBytesSchema(data) {
		// A response_body naming a raw_json field: the JSON itself.
		data = jsonSchema(fmt.Sprint(ok["description"]))
	}
	ok["schema"] = object{
		"type":     "object",
		"required": []any{"type", "requestId", "data"},
		"properties": object{
			"type":      object{"type": "string", "enum": []any{policy.GetOperation() + "-result"}},
			"requestId": object{"type": "string", "description": "`" + policy.GetOperation() + "_<digits>`, also in the X-Request-Id header."},
			"data":      data,
		},
	}
}

// markRawJSON replaces the base64 schema of raw_json fields with a JSON one.
func markRawJSON(definitions object) {
	protoregistry.GlobalFiles.RangeFilesByPackage("relay.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Messages().Len() {
			md := fd.Messages().Get(i)
			def, _ := definitions["v1"+string(md.Name())].(object)
			props, _ := def["properties"].(object)
			for j := range md.Fields().Len() {
				f := md.Fields().Get(j)
				raw, _ := proto.GetExtension(f.Options(), relayv1.E_RawJson).(bool)
				prop, _ := props[f.JSONName()].(object)
				if !raw || prop == nil {
					continue
				}
				props[f.JSONName()] = jsonSchema(fmt.Sprint(prop["description"]))
			}
		}
		return true
	})
}

func isBytesSchema(s object) bool {
	return s["type"] == "string" && s["format"] == "byte"
}

// jsonSchema is the schema of a raw_json value; its description says whether
// it is an object, an array or any value.
func jsonSchema(description string) object {
	s := object{"description": description}
	switch {
	case strings.HasPrefix(description, "A JSON array"):
		s["type"] = "array"
		s["items"] = object{"type": "object"}
	case strings.HasPrefix(description, "A JSON object"):
		s["type"] = "object"
	}
	return s
}
