package server

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tabletop-relay/relay/contract"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// Policies maps full gRPC method names (`/relay.v1.DocumentService/GetDocument`)
// to the access rule declared on the RPC in the proto. The interceptors refuse
// any method missing from it.
type Policies map[string]*relayv1.Policy

// ServiceDescriptors returns the descriptors of every service of the relay's
// contract (contract.Services).
func ServiceDescriptors() ([]protoreflect.ServiceDescriptor, error) {
	return contract.Descriptors()
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
			policies[contract.FullMethodName(md)] = p
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
