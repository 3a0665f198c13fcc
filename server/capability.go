package server

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"

	"github.com/tabletop-relay/relay/contract"
	"github.com/tabletop-relay/relay/world"
)

// capability returns the call's world as the capability C (one of the
// world's capability interfaces, see package world) with the call, or
// ErrUnimplemented (gRPC Unimplemented, HTTP 501) naming the call's
// operation and the world when the world does not offer it. Services reach
// worlds only this way: whatever kind of world serves the call, they never
// see its concrete type.
func capability[C any](ctx context.Context) (C, *Call, error) {
	call := CallFrom(ctx)
	c, err := world.Capability[C](call.World, operationName(call.Method))
	return c, call, err
}

// operationName names a method for callers: its REST path without the
// leading slash (`dnd5e/short-rest`, `get`), which REST callers know and
// gRPC callers find in the contract; the method's own name when it has no
// HTTP rule.
func operationName(method string) string {
	if name, ok := operationNames()[method]; ok {
		return name
	}
	return strings.TrimPrefix(method, "/")
}

// operationNames maps full method names to their REST paths, read once from
// the HTTP rules of the contract.
var operationNames = sync.OnceValue(func() map[string]string {
	names := map[string]string{}
	services, err := ServiceDescriptors()
	if err != nil {
		return names
	}
	for _, sd := range services {
		methods := sd.Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			var path string
			switch p := rule.GetPattern().(type) {
			case *annotations.HttpRule_Get:
				path = p.Get
			case *annotations.HttpRule_Put:
				path = p.Put
			case *annotations.HttpRule_Post:
				path = p.Post
			case *annotations.HttpRule_Delete:
				path = p.Delete
			case *annotations.HttpRule_Patch:
				path = p.Patch
			}
			if path != "" {
				names[contract.FullMethodName(md)] = strings.TrimPrefix(path, "/")
			}
		}
	}
	return names
})
