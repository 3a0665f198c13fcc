package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tabletop-relay/relay/contract"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// route is one HTTP binding of an RPC, read from its google.api.http rule,
// or one of the gateway's own paths.
type route struct {
	httpMethod string
	path       string   // as written in the rule: `/keys/{id}`
	segments   []string // path segments; "{name}" matches any one segment
	fullMethod string   // `/relay.v1.DocumentService/GetDocument`
	operation  string   // the policy's operation name
	input      protoreflect.MessageDescriptor
	request    protoreflect.MessageType
	output     protoreflect.MessageType
	// serverStreaming RPCs go through the gateway's stream bridge.
	serverStreaming bool
	// clientStreaming RPCs (uploads) read their body themselves.
	clientStreaming bool
	// responseBody is the response field the rule's response_body names,
	// which the envelope holds instead of the whole response; nil for the
	// whole response.
	responseBody protoreflect.FieldDescriptor
	// own, for the gateway's own paths (no RPC), serves the request.
	own http.HandlerFunc
}

// routeTable finds the binding of a request: it is what decides which RPC
// (or which of the gateway's own handlers) a request reaches. It matches a
// path exactly as grpc-gateway's mux does (split on every "/", literal
// segments compared as they are, a variable taking any one segment), and no
// two of its patterns may match the same request (see add), so the mux,
// which holds the same patterns for the RPCs the gateway passes it, can
// only ever find the route the table found, whatever order the patterns
// were registered in.
type routeTable struct {
	byMethod map[string][]*route
	byRPC    map[string]*route // first binding of each RPC, by full method
}

// loadRoutes reads every HTTP rule of the contract's services
// (contract.Services), and adds the gateway's own paths.
func loadRoutes(own map[string]http.HandlerFunc) (*routeTable, error) {
	t := &routeTable{byMethod: map[string][]*route{}, byRPC: map[string]*route{}}
	services, err := contract.Descriptors()
	if err != nil {
		return nil, err
	}
	for _, sd := range services {
		methods := sd.Methods()
		for j := range methods.Len() {
			if err := t.addMethod(methods.Get(j)); err != nil {
				return nil, err
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(own)) {
		method, path, _ := strings.Cut(key, " ")
		if err := t.add(&route{httpMethod: method, path: path, segments: splitPath(path), own: own[key]}); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (t *routeTable) addMethod(md protoreflect.MethodDescriptor) error {
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule == nil {
		return nil
	}
	policy, _ := proto.GetExtension(md.Options(), relayv1.E_Policy).(*relayv1.Policy)
	full := contract.FullMethodName(md)
	for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
		method, path := ruleMethodPath(r)
		if method == "" {
			continue
		}
		rt := &route{
			httpMethod:      method,
			path:            path,
			segments:        splitPath(path),
			fullMethod:      full,
			operation:       policy.GetOperation(),
			input:           md.Input(),
			request:         messageType(md.Input()),
			output:          messageType(md.Output()),
			responseBody:    md.Output().Fields().ByName(protoreflect.Name(r.GetResponseBody())),
			serverStreaming: md.IsStreamingServer(),
			clientStreaming: md.IsStreamingClient(),
		}
		for _, s := range rt.segments {
			if fd := md.Input().Fields().ByName(protoreflect.Name(strings.Trim(s, "{}"))); isVariable(s) && (fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList()) {
				return fmt.Errorf("gateway: %s %s: the path variable %s is not a string field of %s", method, path, s, md.Input().FullName())
			}
		}
		if err := t.add(rt); err != nil {
			return err
		}
		if _, ok := t.byRPC[full]; !ok {
			t.byRPC[full] = rt
		}
	}
	return nil
}

// add adds a route, refusing one that could match a request another route
// of the same HTTP method matches: then the route a request reaches would
// depend on the order of registration.
func (t *routeTable) add(rt *route) error {
	for _, other := range t.byMethod[rt.httpMethod] {
		if overlap(rt.segments, other.segments) {
			return fmt.Errorf("gateway: %s %s (%s) and %s (%s) match the same requests", rt.httpMethod, rt.path, rt.name(), other.path, other.name())
		}
	}
	t.byMethod[rt.httpMethod] = append(t.byMethod[rt.httpMethod], rt)
	return nil
}

// name is the RPC a route calls, or "the gateway" for its own paths.
func (rt *route) name() string {
	if rt.fullMethod == "" {
		return "the gateway"
	}
	return rt.fullMethod
}

// overlap reports whether some path matches both patterns: as many
// segments, and at every one a variable or the same literal.
func overlap(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !isVariable(a[i]) && !isVariable(b[i]) && a[i] != b[i] {
			return false
		}
	}
	return true
}

func isVariable(segment string) bool { return strings.HasPrefix(segment, "{") }

// messageType returns the Go type of a message of the contract.
func messageType(md protoreflect.MessageDescriptor) protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		panic(fmt.Sprintf("gateway: message type %s is not registered: %v", md.FullName(), err))
	}
	return mt
}

// ruleMethodPath returns the HTTP method and path of a rule.
func ruleMethodPath(r *annotations.HttpRule) (string, string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		return http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		return http.MethodPut, p.Put
	case *annotations.HttpRule_Delete:
		return http.MethodDelete, p.Delete
	case *annotations.HttpRule_Patch:
		return http.MethodPatch, p.Patch
	}
	return "", ""
}

// splitPath splits a path into its segments as the mux does: the leading
// "/" dropped, then every "/" a separator (so "/get/" has an empty last
// segment and matches no route). A path without the leading "/" has no
// segments.
func splitPath(p string) []string {
	rest, ok := strings.CutPrefix(p, "/")
	if !ok {
		return nil
	}
	return strings.Split(rest, "/")
}

// match finds the route of a request, or nil.
func (t *routeTable) match(method, path string) *route {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return nil
	}
	for _, rt := range t.byMethod[method] {
		if segmentsMatchPath(rt.segments, rest) {
			return rt
		}
	}
	return nil
}

// segmentsMatchPath reports whether a request's path (rest, without its
// leading slash) matches a route's segments: a literal the same text, a
// variable any segment but an empty one, so that `/accounts/` is no call
// of `/accounts/{id}` with an empty id. It walks the path's segments in
// place rather than splitting them into a new slice for every route of
// every request.
func segmentsMatchPath(pattern []string, rest string) bool {
	for i, p := range pattern {
		seg, after, more := strings.Cut(rest, "/")
		if isVariable(p) {
			if seg == "" {
				return false
			}
		} else if p != seg {
			return false
		}
		if i == len(pattern)-1 {
			return !more
		}
		if !more {
			return false
		}
		rest = after
	}
	return false
}

// otherMethod reports whether a route of another HTTP method matches path.
func (t *routeTable) otherMethod(method, path string) bool {
	for m := range t.byMethod {
		if m != method && t.match(m, path) != nil {
			return true
		}
	}
	return false
}

// pathVariables returns the values a request's path gives the route's
// variables, by variable name (`id` for `{id}`).
func (rt *route) pathVariables(path string) map[string]string {
	if !slices.ContainsFunc(rt.segments, isVariable) {
		return nil
	}
	var vars map[string]string
	segs := splitPath(path)
	for i, s := range rt.segments {
		if isVariable(s) && i < len(segs) {
			if vars == nil {
				vars = map[string]string{}
			}
			vars[strings.Trim(s, "{}")] = segs[i]
		}
	}
	return vars
}

// operation returns the operation name of a full method, or "".
func (t *routeTable) operation(fullMethod string) string {
	if rt := t.byRPC[fullMethod]; rt != nil {
		return rt.operation
	}
	return ""
}
