// Package contract holds the one list of the relay's services, which its
// gRPC server (package server) and its REST gateway (package gateway) both
// take from here, since the gateway must not import the server: the server
// registers, reflects, reports health for and reads the policies of
// exactly [Services], and the gateway routes the REST rules of exactly the
// same list. The names that travel on the wire are in package wire.
package contract

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// Services are the services of the relay's contract, as their generated
// gRPC descriptions (name, methods and the interface an implementation
// must satisfy), in the order of its documentation. Adding a service to
// proto/ means adding it here; a test checks that this list and the
// generated descriptors name the same services.
var Services = []*grpc.ServiceDesc{
	&relayv1.DocumentService_ServiceDesc,
	&relayv1.FolderService_ServiceDesc,
	&relayv1.CanvasService_ServiceDesc,
	&relayv1.ScriptService_ServiceDesc,
	&relayv1.CombatService_ServiceDesc,
	&relayv1.FileService_ServiceDesc,
	&relayv1.Dnd5EService_ServiceDesc,
	&relayv1.EventService_ServiceDesc,
	&relayv1.KeyService_ServiceDesc,
	&relayv1.ClientService_ServiceDesc,
	&relayv1.TicketService_ServiceDesc,
	&relayv1.LinkService_ServiceDesc,
	&relayv1.AccountService_ServiceDesc,
	&relayv1.WorldService_ServiceDesc,
	&relayv1.SigninService_ServiceDesc,
	&relayv1.AuditService_ServiceDesc,
}

// Descriptors returns the descriptor of every service of [Services], in
// the same order, from the generated code.
func Descriptors() ([]protoreflect.ServiceDescriptor, error) {
	out := make([]protoreflect.ServiceDescriptor, 0, len(Services))
	for _, s := range Services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(s.ServiceName))
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", s.ServiceName, err)
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("%s is not a service", s.ServiceName)
		}
		out = append(out, sd)
	}
	return out, nil
}

// FullMethodName is the name gRPC gives a method:
// `/relay.v1.DocumentService/GetDocument`.
func FullMethodName(md protoreflect.MethodDescriptor) string {
	return "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
}
