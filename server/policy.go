package server

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	relayv1 "relay/gen/go/relay/v1"
)

// Policies maps full gRPC method names (`/relay.v1.DocumentService/GetDocument`)
// to the access rule declared on the RPC in the proto. The interceptors refuse
// any method missing from it.
type Policies map[string]*relayv1.Policy

// relayServices are the services of the relay's contract, in the order they
// appear in the documentation.
var relayServices = []protoreflect.FullName{
	"relay.v1.DocumentService",
	"relay.v1.FolderService",
	"relay.v1.CanvasService",
	"relay.v1.ScriptService",
	"relay.v1.CombatService",
	"relay.v1.FileService",
	"relay.v1.Dnd5EService",
	"relay.v1.EventService",
	"relay.v1.KeyService",
	"relay.v1.ClientService",
	"relay.v1.TicketService",
	"relay.v1.LinkService",
}

// ServiceDescriptors returns the descriptors of every service of the relay's
// contract.
func ServiceDescriptors() ([]protoreflect.ServiceDescriptor, error) {
	out := make([]protoreflect.ServiceDescriptor, 0, len(relayServices))
	for _, name := range relayServices {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", name, err)
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("%s is not a service", name)
		}
		out = append(out, sd)
	}
	return out, nil
}

// LoadPolicies reads the policy option of every method of the relay's
// services. A method without one is an error: the contract must declare the
// access rule of every RPC.
func LoadPolicies() (Policies, error) {
	services, err := ServiceDescriptors()
	if err != nil {
		return nil, err
	}
	policies := make(Policies)
	for _, sd := range services {
		methods := sd.Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			p := MethodPolicy(md)
			if p == nil {
				return nil, fmt.Errorf("method %s declares no policy", md.FullName())
			}
			policies[fullMethodName(md)] = p
		}
	}
	return policies, nil
}

// MethodPolicy returns the policy declared on a method, or nil.
func MethodPolicy(md protoreflect.MethodDescriptor) *relayv1.Policy {
	opts := md.Options()
	if opts == nil || !proto.HasExtension(opts, relayv1.E_Policy) {
		return nil
	}
	p, _ := proto.GetExtension(opts, relayv1.E_Policy).(*relayv1.Policy)
	if p == nil || p.GetOperation() == "" || p.GetScope() == "" {
		return nil
	}
	return p
}

// fullMethodName is the name gRPC uses for a method:
// `/<package>.<Service>/<Method>`.
func fullMethodName(md protoreflect.MethodDescriptor) string {
	return "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
}
