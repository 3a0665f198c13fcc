package gateway

import (
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	relayv1 "relay/gen/go/relay/v1"
)

// route is one HTTP binding of an RPC, read from its google.api.http rule.
type route struct {
	httpMethod string
	pattern    string   // the rule's path, `/keys/{id}`: the route's metrics label
	segments   []string // path segments; "{name}" matches any one segment
	fullMethod string   // `/relay.v1.DocumentService/GetDocument`
	operation  string   // the policy's operation name
	input      protoreflect.MessageDescriptor
	output     protoreflect.MessageType
	bodyStar   bool // the rule reads the whole request message from the body
	// serverStreaming RPCs go through the gateway's stream bridge.
	serverStreaming bool
	// clientStreaming RPCs (uploads) read their body themselves.
	clientStreaming bool
}

// routeTable finds the binding of a request. The relay's paths are fixed
// (only `/keys/{id}` has a variable), so a linear scan per method over a
// handful of routes is as fast as anything cleverer.
type routeTable struct {
	byMethod map[string][]*route
	byRPC    map[string]*route // first binding of each RPC, by full method
}

// loadRoutes reads every HTTP rule of the relay's services.
func loadRoutes() *routeTable {
	t := &routeTable{byMethod: map[string][]*route{}, byRPC: map[string]*route{}}
	protoregistry.GlobalFiles.RangeFilesByPackage("relay.v1", func(fd protoreflect.FileDescriptor) bool {
		services := fd.Services()
		for i := range services.Len() {
			methods := services.Get(i).Methods()
			for j := range methods.Len() {
				t.addMethod(methods.Get(j))
			}
		}
		return true
	})
	return t
}

func (t *routeTable) addMethod(md protoreflect.MethodDescriptor) {
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule == nil {
		return
	}
	policy, _ := proto.GetExtension(md.Options(), relayv1.E_Policy).(*relayv1.Policy)
	full := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
		method, path := ruleMethodPath(r)
		if method == "" {
			continue
		}
		rt := &route{
			httpMethod:      method,
			pattern:         path,
			segments:        splitPath(path),
			fullMethod:      full,
			operation:       policy.GetOperation(),
			input:           md.Input(),
			output:          outputType(md),
			bodyStar:        r.GetBody() == "*",
			serverStreaming: md.IsStreamingServer(),
			clientStreaming: md.IsStreamingClient(),
		}
		t.byMethod[method] = append(t.byMethod[method], rt)
		if _, ok := t.byRPC[full]; !ok {
			t.byRPC[full] = rt
		}
	}
}

// outputType returns the Go type of a method's response message.
func outputType(md protoreflect.MethodDescriptor) protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		panic(fmt.Sprintf("gateway: response type of %s is not registered: %v", md.FullName(), err))
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

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}

// match finds the route of a request, or nil.
func (t *routeTable) match(method, path string) *route {
	segs := splitPath(path)
	for _, rt := range t.byMethod[method] {
		if segmentsMatch(rt.segments, segs) {
			return rt
		}
	}
	return nil
}

func segmentsMatch(pattern, segs []string) bool {
	if len(pattern) != len(segs) {
		return false
	}
	for i, p := range pattern {
		if strings.HasPrefix(p, "{") {
			if segs[i] == "" {
				return false
			}
			continue
		}
		if p != segs[i] {
			return false
		}
	}
	return true
}

// operation returns the operation name of a full method, or "".
func (t *routeTable) operation(fullMethod string) string {
	if rt := t.byRPC[fullMethod]; rt != nil {
		return rt.operation
	}
	return ""
}
