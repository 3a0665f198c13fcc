package main

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// The contract's package, and the RPCs whose REST bodies the gateway reads
// and writes itself (gateway/files.go).
const (
	contractPackage = "relay.v1"
	uploadMethod    = "relay.v1.FileService.UploadFile"
	downloadMethod  = "relay.v1.FileService.DownloadFile"
)

// serviceOrder is the order of the services in the document: the reference
// reads from documents to administration. Services not listed follow in
// name order.
var serviceOrder = []string{
	"DocumentService", "FolderService", "CanvasService", "ScriptService",
	"Dnd5eService", "CombatService", "FileService", "EventService",
	"TicketService", "ClientService", "KeyService", "LinkService",
}

// builder assembles the document.
type builder struct {
	files        *protoregistry.Files
	values       *values
	pkg          string
	schemas      *obj
	queue        []queuedMessage
	queued       map[string]bool
	messageNames map[string]protoreflect.FullName
	bothWays     map[protoreflect.FullName]bool
	operationIDs map[string]bool
	errs         []error
}

func (b *builder) fail(err error) { b.errs = append(b.errs, err) }

// build writes the whole document.
func build(files *protoregistry.Files, v *values) (*obj, error) {
	b := &builder{
		files:        files,
		values:       v,
		pkg:          contractPackage,
		schemas:      newObj(),
		queued:       map[string]bool{},
		messageNames: map[string]protoreflect.FullName{},
		operationIDs: map[string]bool{},
	}
	services := b.services()
	if len(services) == 0 {
		return nil, fmt.Errorf("no services in package %s", contractPackage)
	}
	b.bothWays = travelsBothWays(services)

	paths := newObj()
	var tags []any
	for _, sd := range services {
		tags = append(tags, newObj("name", string(sd.Name()), "description", b.comment(sd)))
		for i := range sd.Methods().Len() {
			b.addMethod(paths, sd.Methods().Get(i))
		}
	}
	tags = append(tags, newObj("name", "Relay", "description", "The relay's own public paths: its health, this document and its reference page. They need no API key."))
	b.addPublicPaths(paths)

	b.checkRawJSONFields()
	b.emitQueued()
	for _, name := range v.schemas.keys {
		if b.schemas.has(name) {
			b.fail(fmt.Errorf("values.json's schema %s has the name of a message", name))
		}
		schema := v.schemas.get(name)
		b.queueRefs(schema)
		b.schemas.set(name, schema)
	}
	b.emitQueued()
	b.schemas.set("Error", errorSchema())
	sortKeys(b.schemas)
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}

	doc := newObj(
		"openapi", "3.0.3",
		"info", newObj(
			"title", "Relay API",
			"version", majorVersion(contractPackage),
			"description", strings.TrimSpace(introMarkdown),
			"license", newObj("name", "Apache 2.0", "url", "https://www.apache.org/licenses/LICENSE-2.0.html"),
		),
		"servers", []any{
			newObj("url", "{scheme}://{host}", "description", "A relay; by default one started locally with `relay serve`.",
				"variables", newObj(
					"scheme", newObj("default", "http", "enum", []any{"http", "https"}),
					"host", newObj("default", "127.0.0.1:8080", "description", "The relay's address (`--listen`, or its public name)."),
				)),
		},
		"security", []any{newObj("ApiKey", []any{})},
		"tags", tags,
		"paths", paths,
		"components", newObj(
			"securitySchemes", newObj(
				"ApiKey", newObj("type", "apiKey", "in", "header", "name", "x-api-key",
					"description", "An API key (`relay keys create`, `POST /keys`). Its scopes decide which operations it may call; it may be bound to worlds and act as a tabletop user."),
				"StreamTicket", newObj("type", "apiKey", "in", "query", "name", "ticket",
					"description", "A short-lived stream ticket from `POST /stream-tickets`, for a browser's `EventSource`, which cannot send headers. It opens event streams only, with its key's rights."),
			),
			"headers", newObj(
				"RequestId", newObj("description", "The request id, as in the body's `requestId`.", "schema", newObj("type", "string")),
				"RetryAfter", newObj("description", "Seconds to wait before trying again.", "schema", newObj("type", "integer")),
			),
			"responses", errorResponses(),
			"schemas", b.schemas,
		),
	)
	return doc, nil
}

// checkRawJSONFields checks that values.json describes exactly the
// contract's raw_json fields, those of gRPC-only messages included, so that
// a new field cannot go undescribed and a removed one cannot leave a stale
// description.
func (b *builder) checkRawJSONFields() {
	raw := map[string]bool{}
	var walk func(protoreflect.MessageDescriptors)
	walk = func(msgs protoreflect.MessageDescriptors) {
		for i := range msgs.Len() {
			md := msgs.Get(i)
			for j := range md.Fields().Len() {
				if fd := md.Fields().Get(j); isRawJSON(fd) {
					raw[string(fd.FullName())] = true
				}
			}
			walk(md.Messages())
		}
	}
	b.files.RangeFilesByPackage(protoreflect.FullName(b.pkg), func(fd protoreflect.FileDescriptor) bool {
		walk(fd.Messages())
		return true
	})
	for name := range raw {
		if _, ok := b.values.fields[name]; !ok {
			b.fail(fmt.Errorf("%s is a raw_json field without a schema in values.json", name))
		}
	}
	for name := range b.values.fields {
		if !raw[name] {
			b.fail(fmt.Errorf("values.json describes %s, which is not a raw_json field of the contract", name))
		}
	}
}

// majorVersion is the contract's version, from its package: `relay.v1` is
// version 1. Compatible changes keep it (buf breaking guards them).
func majorVersion(pkg string) string {
	return strings.TrimPrefix(pkg[strings.LastIndex(pkg, ".")+1:], "v")
}

// services returns the contract's services in document order.
func (b *builder) services() []protoreflect.ServiceDescriptor {
	var out []protoreflect.ServiceDescriptor
	b.files.RangeFilesByPackage(protoreflect.FullName(b.pkg), func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			out = append(out, fd.Services().Get(i))
		}
		return true
	})
	rank := func(sd protoreflect.ServiceDescriptor) int {
		if i := slices.Index(serviceOrder, string(sd.Name())); i >= 0 {
			return i
		}
		return len(serviceOrder)
	}
	sort.SliceStable(out, func(i, j int) bool {
		ri, rj := rank(out[i]), rank(out[j])
		if ri != rj {
			return ri < rj
		}
		return out[i].Name() < out[j].Name()
	})
	return out
}

// travelsBothWays finds the messages that appear in REST requests and in
// REST answers, which need a schema for each.
func travelsBothWays(services []protoreflect.ServiceDescriptor) map[protoreflect.FullName]bool {
	in, out := map[protoreflect.FullName]bool{}, map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool, top bool)
	walk = func(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool, top bool) {
		if seen[md.FullName()] || wellKnownSchema(md) != nil {
			return
		}
		if !top {
			seen[md.FullName()] = true
		}
		for i := range md.Fields().Len() {
			fd := md.Fields().Get(i)
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			if fd.Message() != nil {
				walk(fd.Message(), seen, false)
			}
		}
	}
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			walk(md.Input(), in, true)
			if !md.IsStreamingServer() {
				walk(md.Output(), out, true)
			}
		}
	}
	both := map[protoreflect.FullName]bool{}
	for name := range in {
		if out[name] {
			both[name] = true
		}
	}
	return both
}

// httpBinding is one HTTP rule of an RPC.
type httpBinding struct {
	method, path, body, responseBody string
}

// bindings returns an RPC's HTTP rules, the primary first.
func bindings(md protoreflect.MethodDescriptor) []httpBinding {
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule == nil {
		return nil
	}
	var out []httpBinding
	for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
		b := httpBinding{body: r.GetBody(), responseBody: r.GetResponseBody()}
		switch p := r.GetPattern().(type) {
		case *annotations.HttpRule_Get:
			b.method, b.path = http.MethodGet, p.Get
		case *annotations.HttpRule_Post:
			b.method, b.path = http.MethodPost, p.Post
		case *annotations.HttpRule_Put:
			b.method, b.path = http.MethodPut, p.Put
		case *annotations.HttpRule_Delete:
			b.method, b.path = http.MethodDelete, p.Delete
		case *annotations.HttpRule_Patch:
			b.method, b.path = http.MethodPatch, p.Patch
		default:
			continue
		}
		out = append(out, b)
	}
	return out
}

// pathParam matches a path template's variable.
var pathParam = regexp.MustCompile(`\{([a-z_][a-z0-9_.]*)\}`)

// addMethod adds the operations of one RPC, one per HTTP binding.
func (b *builder) addMethod(paths *obj, md protoreflect.MethodDescriptor) {
	policy, _ := proto.GetExtension(md.Options(), relayv1.E_Policy).(*relayv1.Policy)
	binds := bindings(md)
	if len(binds) == 0 {
		if !policy.GetGrpcOnly() {
			b.fail(fmt.Errorf("%s has no HTTP rule and is not marked grpc_only", md.FullName()))
		}
		return
	}
	if policy.GetOperation() == "" {
		b.fail(fmt.Errorf("%s has no policy operation", md.FullName()))
		return
	}
	full := string(md.FullName())
	if md.IsStreamingClient() && full != uploadMethod || md.IsStreamingServer() && full != downloadMethod && b.values.streams[full] == nil {
		b.fail(fmt.Errorf("%s streams, and the document does not know how it looks over REST", full))
		return
	}
	for i, bind := range binds {
		opID := string(md.Parent().Name()) + "_" + string(md.Name())
		if i > 0 {
			opID += fmt.Sprint(i + 1)
		}
		if b.operationIDs[opID] {
			b.fail(fmt.Errorf("operation id %s is used twice", opID))
		}
		b.operationIDs[opID] = true
		path, params := b.pathParams(md, bind.path)
		op := newObj("tags", []any{string(md.Parent().Name())})
		summary, description := b.methodText(md, policy)
		if i > 0 {
			description = fmt.Sprintf("The same operation as `%s %s`, under another name.\n\n%s", binds[0].method, binds[0].path, description)
		}
		op.set("summary", summary)
		op.set("description", description)
		op.set("operationId", opID)
		op.set("x-relay-policy", policyObject(policy))

		switch {
		case full == uploadMethod:
			b.uploadOperation(op, md, params)
		case full == downloadMethod:
			b.downloadOperation(op, md, policy, params)
		case md.IsStreamingServer():
			b.streamOperation(op, md, policy, params)
		default:
			b.unaryOperation(op, md, policy, bind, params)
		}
		item, _ := paths.get(path).(*obj)
		if item == nil {
			item = newObj()
			paths.set(path, item)
		}
		verb := strings.ToLower(bind.method)
		if item.has(verb) {
			b.fail(fmt.Errorf("%s %s is bound twice", bind.method, path))
		}
		item.set(verb, op)
	}
}

// pathParams turns a rule's path template into an OpenAPI path, with the
// path parameters named by their JSON names.
func (b *builder) pathParams(md protoreflect.MethodDescriptor, template string) (string, []any) {
	var params []any
	path := pathParam.ReplaceAllStringFunc(template, func(m string) string {
		name := m[1 : len(m)-1]
		fd := md.Input().Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			b.fail(fmt.Errorf("%s: path variable %s is not a field of %s", md.FullName(), name, md.Input().FullName()))
			return m
		}
		p := newObj("name", fd.JSONName(), "in", "path", "required", true)
		if c := b.comment(fd); c != "" {
			p.set("description", c)
		}
		p.set("schema", b.valueSchema(fd, input))
		params = append(params, p)
		return "{" + fd.JSONName() + "}"
	})
	return path, params
}

// methodText is an operation's summary (the first sentence of the RPC's
// comment) and description (the comment and the policy).
func (b *builder) methodText(md protoreflect.MethodDescriptor, policy *relayv1.Policy) (string, string) {
	text := b.comment(md)
	if text == "" {
		b.fail(fmt.Errorf("%s has no comment", md.FullName()))
	}
	summary := strings.Join(strings.Fields(text), " ")
	if i := strings.Index(summary, ". "); i >= 0 {
		summary = summary[:i]
	}
	summary = strings.TrimSuffix(summary, ".")
	var rules []string
	rules = append(rules, fmt.Sprintf("Scope: `%s`.", policy.GetScope()))
	if policy.GetGmOnly() {
		rules = append(rules, "GM only: a call acting as a user needs a GM (role ASSISTANT or GAMEMASTER).")
	}
	if p := policy.GetWorldPermission(); p != "" {
		rules = append(rules, fmt.Sprintf("A call acting as a user needs the %s world permission.", p))
	}
	if policy.GetWorldless() {
		rules = append(rules, "Targets no world.")
	}
	return summary, text + "\n\n" + strings.Join(rules, " ")
}

// policyObject is the RPC's policy as the `x-relay-policy` extension, for
// tools that want the scope or the operation name.
func policyObject(p *relayv1.Policy) *obj {
	o := newObj("operation", p.GetOperation(), "scope", p.GetScope())
	if p.GetGmOnly() {
		o.set("gmOnly", true)
	}
	if p.GetWorldPermission() != "" {
		o.set("worldPermission", p.GetWorldPermission())
	}
	if p.GetWorldless() {
		o.set("worldless", true)
	}
	return o
}

// queryParams describes the request fields not in the path as query
// parameters.
func (b *builder) queryParams(md protoreflect.MethodDescriptor, pathParams []any, skip func(protoreflect.FieldDescriptor) bool) []any {
	inPath := map[string]bool{}
	for _, p := range pathParams {
		inPath[p.(*obj).get("name").(string)] = true
	}
	params := slices.Clone(pathParams)
	fields := md.Input().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if inPath[fd.JSONName()] || skip != nil && skip(fd) {
			continue
		}
		p := newObj("name", fd.JSONName(), "in", "query")
		desc := b.comment(fd)
		if fd.IsList() {
			desc = strings.TrimSpace(desc + " In a query string: JSON array text (`[\"a\",\"b\"]`), repeated keys or a comma-separated list.")
		}
		if desc != "" {
			p.set("description", desc)
		}
		if hasBehavior(fd, annotations.FieldBehavior_REQUIRED) {
			p.set("required", true)
		}
		if deprecated(fd) {
			p.set("deprecated", true)
		}
		schema := b.fieldSchema(fd, input, false)
		if fd.Kind() == protoreflect.MessageKind && !fd.IsList() || fd.IsMap() {
			// An object parameter is JSON text.
			p.set("content", newObj("application/json", newObj("schema", schema)))
		} else {
			p.set("schema", schema)
		}
		params = append(params, p)
	}
	return params
}

// unaryOperation is an ordinary call: parameters in the query or a JSON
// body, the envelope around the answer.
func (b *builder) unaryOperation(op *obj, md protoreflect.MethodDescriptor, policy *relayv1.Policy, bind httpBinding, pathParams []any) {
	switch bind.body {
	case "":
		if params := b.queryParams(md, pathParams, nil); len(params) > 0 {
			op.set("parameters", params)
		}
	case "*":
		if len(pathParams) > 0 {
			op.set("parameters", pathParams)
		}
		op.set("requestBody", newObj(
			"description", "The parameters, as a JSON object. Any of them may come in the query string instead; the body wins.",
			"content", newObj("application/json", newObj("schema", b.messageRef(md.Input(), input))),
		))
	default:
		b.fail(fmt.Errorf("%s: body %q: only `*` is supported", md.FullName(), bind.body))
		return
	}
	// A write on a world takes an idempotency key.
	write := bind.method != http.MethodGet && !policy.GetWorldless()
	if write {
		addIdempotencyKey(op)
	}
	var data *obj
	if bind.responseBody != "" {
		fd := md.Output().Fields().ByName(protoreflect.Name(bind.responseBody))
		if fd == nil {
			b.fail(fmt.Errorf("%s: response_body %q is not a field", md.FullName(), bind.responseBody))
			return
		}
		data = b.fieldSchema(fd, output, true)
	} else {
		data = b.messageRef(md.Output(), output)
	}
	headers := newObj("X-Request-Id", newObj("$ref", "#/components/headers/RequestId"))
	if write {
		headers.set("Idempotent-Replay", idempotentReplayHeader())
	}
	op.set("responses", b.responses(newObj(
		"description", "Success: the envelope, with the answer in `data`.",
		"headers", headers,
		"content", newObj("application/json", newObj("schema", b.envelope(md, policy, data))),
	)))
}

// addIdempotencyKey adds the Idempotency-Key header to a write's
// parameters.
func addIdempotencyKey(op *obj) {
	params, _ := op.get("parameters").([]any)
	op.set("parameters", append(params, newObj(
		"name", "Idempotency-Key", "in", "header",
		"description", "Makes the write safe to send again: a retry with the same key gets the first answer and is not applied again; 409 when the key was used for another request (see Using the API).",
		"schema", newObj("type", "string", "minLength", 1, "maxLength", 255),
	)))
}

// idempotentReplayHeader describes the header of an answer given again
// for an idempotency key.
func idempotentReplayHeader() *obj {
	return newObj(
		"description", "Present when the answer is the one kept for the request's Idempotency-Key: the request id of the first request, whose answer (envelope and all) this is.",
		"schema", newObj("type", "string"))
}

// envelope names the success body of an RPC, `<Method>Result`, and writes
// its schema: `{type, requestId, data}`.
func (b *builder) envelope(md protoreflect.MethodDescriptor, policy *relayv1.Policy, data *obj) *obj {
	name := string(md.Name()) + "Result"
	if b.schemas.has(name) {
		return schemaRef(name)
	}
	if _, taken := b.messageNames[name]; taken || b.values.schemas.has(name) {
		b.fail(fmt.Errorf("envelope %s has the name of another schema", name))
	}
	b.messageNames[name] = md.FullName()
	op := policy.GetOperation()
	b.schemas.set(name, newObj(
		"type", "object",
		"description", fmt.Sprintf("The success body of `%s`.", op),
		"required", []any{"type", "requestId", "data"},
		"properties", newObj(
			"type", newObj("type", "string", "enum", []any{op + "-result"}),
			"requestId", newObj("type", "string", "description", fmt.Sprintf("`%s_<digits>`; also in the X-Request-Id header.", op), "example", op+"_1234567890"),
			"data", data,
		),
	))
	return schemaRef(name)
}

// responses adds the failures every operation may answer to its success.
func (b *builder) responses(ok *obj) *obj {
	return newObj(
		"200", ok,
		"400", newObj("$ref", "#/components/responses/BadRequest"),
		"401", newObj("$ref", "#/components/responses/Unauthorized"),
		"403", newObj("$ref", "#/components/responses/Forbidden"),
		"404", newObj("$ref", "#/components/responses/NotFound"),
		"429", newObj("$ref", "#/components/responses/TooManyRequests"),
		"default", newObj("$ref", "#/components/responses/Error"),
	)
}

// errorSchema is the body of every failure.
func errorSchema() *obj {
	return newObj(
		"type", "object",
		"description", "The body of every failure; the HTTP status tells its kind.",
		"required", []any{"type", "requestId", "error"},
		"properties", newObj(
			"type", newObj("type", "string", "description", "`<operation>-result`, as on success."),
			"requestId", newObj("type", "string", "description", "`<operation>_<digits>`; also in the X-Request-Id header."),
			"error", newObj("type", "string", "description", "What went wrong, naming the parameter when one is at fault."),
		),
	)
}

// errorResponses are the shared failure answers.
func errorResponses() *obj {
	response := func(description string, extraHeaders ...any) *obj {
		headers := newObj("X-Request-Id", newObj("$ref", "#/components/headers/RequestId"))
		for i := 0; i+1 < len(extraHeaders); i += 2 {
			headers.set(extraHeaders[i].(string), extraHeaders[i+1])
		}
		return newObj(
			"description", description,
			"headers", headers,
			"content", newObj("application/json", newObj("schema", schemaRef("Error"))),
		)
	}
	return newObj(
		"BadRequest", response("A missing or malformed parameter (named in `error`), a body that is not a JSON object, or an unknown user."),
		"Unauthorized", response("A missing, unknown, disabled, revoked or expired API key.",
			"WWW-Authenticate", newObj("description", "`ApiKey header=\"x-api-key\"`", "schema", newObj("type", "string"))),
		"Forbidden", response("The key lacks the scope or is not bound to the world, or the user lacks a permission (a document's, GM, a world permission)."),
		"NotFound", response("An unknown world, document, folder, key or path."),
		"TooManyRequests", response("The key's rate limit, too many failed authentications from one address, or too many open streams.",
			"Retry-After", newObj("$ref", "#/components/headers/RetryAfter")),
		"URITooLong", response("A query string over the relay's limit (`--max-query-bytes`): send large parameters in the JSON body."),
		"Error", response("Another failure: 408 a body too slow, 409 a conflict, 413 too large, 414 a query string too long, 501 not offered by the world, 503 unavailable (with Retry-After where waiting helps), 504 past its time limit."),
	)
}

// streamOperation is an event stream: Server-Sent Events whose frames are
// described one kind of event at a time.
func (b *builder) streamOperation(op *obj, md protoreflect.MethodDescriptor, policy *relayv1.Policy, pathParams []any) {
	params := b.queryParams(md, pathParams, nil)
	params = append(params, newObj(
		"name", "Last-Event-ID", "in", "header",
		"description", "Resume after this event id (what an EventSource sends when it reconnects); `lastEventId` does the same.",
		"schema", newObj("type", "string"),
	))
	op.set("parameters", params)
	op.set("security", []any{newObj("ApiKey", []any{}), newObj("StreamTicket", []any{})})
	if !b.schemas.has("ConnectedFrame") {
		var names []string
		for _, ev := range b.values.streamEvents {
			names = append(names, ev.event)
		}
		if !slices.Equal(names, []string{"connected", "reset", "overflow"}) {
			b.fail(fmt.Errorf("values.json must list exactly the connected, reset and overflow events under streamEvents"))
			return
		}
		for _, ev := range b.values.streamEvents {
			b.schemas.set(ev.name, b.frameSchema(ev, false))
		}
	}
	// Frames with fixed names are told apart by their `event`
	// (a discriminator); the hooks' open-ended names only by pattern.
	frames := []any{}
	mapping := newObj()
	fixed := true
	for _, ev := range append(slices.Clone(b.values.streamEvents), b.values.streams[string(md.FullName())]...) {
		if !b.schemas.has(ev.name) {
			b.schemas.set(ev.name, b.frameSchema(ev, true))
		}
		frames = append(frames, schemaRef(ev.name))
		if ev.event == "" {
			fixed = false
		} else {
			mapping.set(ev.event, "#/components/schemas/"+ev.name)
		}
	}
	name := string(md.Name()) + "Event"
	frame := newObj("description", fmt.Sprintf("One frame of `%s`: `id:` (absent on connected, reset and overflow), `event:` and `data:` lines, described as an object.", policy.GetOperation()))
	if fixed {
		frame.set("oneOf", frames)
		frame.set("discriminator", newObj("propertyName", "event", "mapping", mapping))
	} else {
		frame.set("anyOf", frames)
	}
	b.schemas.set(name, frame)
	op.set("responses", b.responses(newObj(
		"description", "A stream of Server-Sent Events: `connected` at once, then the events of the channel that the caller may see, and keepalive comments. Each frame is described as an object of its `id`, `event` and `data` (JSON) lines.",
		"headers", newObj("X-Request-Id", newObj("$ref", "#/components/headers/RequestId")),
		"content", newObj("text/event-stream", newObj("schema", schemaRef(name))),
	)))
}

// frameSchema describes the frame of one kind of event.
func (b *builder) frameSchema(ev streamEvent, sequenced bool) *obj {
	if prev, taken := b.messageNames[ev.name]; taken || b.values.schemas.has(ev.name) {
		b.fail(fmt.Errorf("event frame %s has the name of another schema (%s)", ev.name, prev))
	}
	event := newObj("type", "string")
	title := ev.event
	if ev.pattern != "" {
		event.set("pattern", ev.pattern)
		event.set("example", ev.example)
		title = ev.example
	} else {
		event.set("enum", []any{ev.event})
	}
	data := cloneValue(ev.data)
	b.queueRefs(data)
	props := newObj()
	required := []any{"event", "data"}
	if sequenced {
		props.set("id", newObj("type", "string", "description", "The world's sequence number of the event: send it as Last-Event-ID to resume after it."))
		required = append([]any{"id"}, required...)
	}
	props.set("event", event)
	props.set("data", data)
	return newObj(
		"type", "object",
		"title", title,
		"description", ev.description,
		"required", required,
		"properties", props,
	)
}

// downloadOperation is `GET /download`: the file's bytes, or the envelope
// with base64 data.
func (b *builder) downloadOperation(op *obj, md protoreflect.MethodDescriptor, policy *relayv1.Policy, pathParams []any) {
	params := b.queryParams(md, pathParams, nil)
	for _, p := range params {
		if po := p.(*obj); po.get("name") == "format" {
			po.set("schema", newObj("type", "string", "enum", []any{"raw", "base64"}, "default", "raw"))
		}
	}
	op.set("parameters", params)
	data := newObj(
		"type", "object",
		"required", []any{"path", "filename", "mimeType", "size", "fileData"},
		"properties", newObj(
			"path", newObj("type", "string"),
			"filename", newObj("type", "string"),
			"mimeType", newObj("type", "string"),
			"size", newObj("type", "integer"),
			"fileData", newObj("type", "string", "description", "A data URL: `data:<mimeType>;base64,<data>`."),
		),
	)
	op.set("responses", b.responses(newObj(
		"description", "The file: its bytes as they are, with the file's own Content-Type, Content-Length and Content-Disposition; or with `format=base64` the envelope with the bytes as a data URL.",
		"headers", newObj(
			"X-Request-Id", newObj("$ref", "#/components/headers/RequestId"),
			"Content-Disposition", newObj("description", "`attachment; filename=<name>`, on the raw bytes.", "schema", newObj("type", "string")),
		),
		"content", newObj(
			"application/octet-stream", newObj("schema", newObj("type", "string", "format", "binary", "description", "The file's bytes; the Content-Type is the file's own.")),
			"application/json", newObj("schema", b.envelope(md, policy, data)),
		),
	)))
}

// uploadOperation is `POST /upload`: a multipart form or a JSON object.
func (b *builder) uploadOperation(op *obj, md protoreflect.MethodDescriptor, pathParams []any) {
	if len(pathParams) > 0 {
		op.set("parameters", pathParams)
	}
	addIdempotencyKey(op)
	fields := func() (*obj, []any) {
		props := newObj()
		var required []any
		for i := range md.Input().Fields().Len() {
			fd := md.Input().Fields().Get(i)
			if fd.Kind() == protoreflect.BytesKind {
				continue // the file itself, below
			}
			props.set(fd.JSONName(), b.fieldSchema(fd, input, true))
			if isRequired(fd, input) {
				required = append(required, fd.JSONName())
			}
		}
		return props, required
	}
	formProps, formRequired := fields()
	// A form's file part names the file when the `filename` field does not.
	formRequired = slices.DeleteFunc(formRequired, func(name any) bool { return name == "filename" })
	formProps.set("file", newObj("type", "string", "format", "binary", "description", "The file, as the form's file part (any field name; `file` or `upload` even without a file name). Fields after it are refused: send them first."))
	jsonProps, jsonRequired := fields()
	jsonProps.set("fileData", newObj("type", "string", "description", "The file's bytes as a data URL (`data:image/png;base64,...`) or plain base64."))
	op.set("requestBody", newObj(
		"required", true,
		"description", "The file and where to write it: a multipart form (streamed, never held whole) or a JSON object with base64 data. Parameters may also come in the query string.",
		"content", newObj(
			"multipart/form-data", newObj("schema", newObj("type", "object", "required", append([]any{"file"}, formRequired...), "properties", formProps)),
			"application/json", newObj("schema", newObj("type", "object", "required", append([]any{"fileData"}, jsonRequired...), "properties", jsonProps)),
		),
	))
	policy, _ := proto.GetExtension(md.Options(), relayv1.E_Policy).(*relayv1.Policy)
	op.set("responses", b.responses(newObj(
		"description", "The file was written.",
		"headers", newObj("X-Request-Id", newObj("$ref", "#/components/headers/RequestId"), "Idempotent-Replay", idempotentReplayHeader()),
		"content", newObj("application/json", newObj("schema", b.envelope(md, policy, b.messageRef(md.Output(), output)))),
	)))
}

// addPublicPaths describes the gateway's own paths, which need no key.
func (b *builder) addPublicPaths(paths *obj) {
	public := func(id, summary, description string, responses *obj) *obj {
		return newObj("get", newObj(
			"tags", []any{"Relay"},
			"summary", summary,
			"description", description,
			"operationId", id,
			"security", []any{},
			"responses", responses.set("414", newObj("$ref", "#/components/responses/URITooLong")),
		))
	}
	health := newObj(
		"type", "object",
		"required", []any{"status", "version", "commit", "date"},
		"properties", newObj(
			"status", newObj("type", "string", "enum", []any{"SERVING", "NOT_SERVING"}),
			"version", newObj("type", "string", "description", "The relay's version (`relay --version`): a release such as `v1.2.0`, or `devel`."),
			"commit", newObj("type", "string", "description", "The git commit it was built from (`-dirty` with local changes); empty when unknown."),
			"date", newObj("type", "string", "description", "Its build date (or its commit's), RFC 3339; empty when unknown."),
		),
	)
	paths.set("/healthz", public("Relay_Health", "Health check",
		"Whether the relay is serving, and its version. Never rate-limited.",
		newObj(
			"200", newObj("description", "The relay is serving.", "content", newObj("application/json", newObj("schema", health))),
			"503", newObj("description", "The relay is not serving (starting or stopping).", "content", newObj("application/json", newObj("schema", health))),
		)))
	paths.set("/openapi.json", public("Relay_OpenAPI", "This document",
		"The OpenAPI document of the REST API (this document).",
		newObj("200", newObj("description", "The document.", "content", newObj("application/json", newObj("schema", newObj("type", "object")))))))
	paths.set("/docs", public("Relay_Docs", "The API reference page",
		"A page that renders this document, served by the relay itself (no outside resources).",
		newObj("200", newObj("description", "The page.", "content", newObj("text/html", newObj("schema", newObj("type", "string")))))))
}

// sortKeys orders an object's members by name.
func sortKeys(o *obj) {
	sort.SliceStable(o.keys, func(i, j int) bool {
		return strings.Map(unicode.ToLower, o.keys[i]) < strings.Map(unicode.ToLower, o.keys[j])
	})
}
