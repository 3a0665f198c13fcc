// Package contract is what the relay's gRPC server (package server) and its
// REST gateway (package gateway) share about the API beyond the generated
// code: the one list of the contract's services, and the names that travel
// on the wire between them and to callers (header and metadata names,
// error reasons, the envelope's fields, the events the streams add).
//
// The gateway must not import the server, so what both must agree on lives
// here, once. The server registers, reflects, reports health for and reads
// the policies of exactly [Services]; the gateway binds the REST routes of
// exactly the same list.
package contract

import (
	"context"
	"fmt"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	relayv1 "relay/gen/go/relay/v1"
)

// Service is one service of the contract.
type Service struct {
	// Desc is the generated gRPC description: its name, methods and the
	// interface an implementation must satisfy.
	Desc *grpc.ServiceDesc
	// BindREST registers the service's REST routes (its google.api.http
	// rules) on a grpc-gateway mux, calling the service through conn.
	BindREST func(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error
}

// Name is the service's full name, `relay.v1.DocumentService`.
func (s Service) Name() string { return s.Desc.ServiceName }

// Services are the services of the relay's contract, in the order of its
// documentation. Adding a service to proto/ means adding it here; a test
// checks that this list and the generated descriptors name the same
// services.
var Services = []Service{
	{&relayv1.DocumentService_ServiceDesc, bind(relayv1.RegisterDocumentServiceHandlerClient, relayv1.NewDocumentServiceClient)},
	{&relayv1.FolderService_ServiceDesc, bind(relayv1.RegisterFolderServiceHandlerClient, relayv1.NewFolderServiceClient)},
	{&relayv1.CanvasService_ServiceDesc, bind(relayv1.RegisterCanvasServiceHandlerClient, relayv1.NewCanvasServiceClient)},
	{&relayv1.ScriptService_ServiceDesc, bind(relayv1.RegisterScriptServiceHandlerClient, relayv1.NewScriptServiceClient)},
	{&relayv1.CombatService_ServiceDesc, bind(relayv1.RegisterCombatServiceHandlerClient, relayv1.NewCombatServiceClient)},
	{&relayv1.FileService_ServiceDesc, bind(relayv1.RegisterFileServiceHandlerClient, relayv1.NewFileServiceClient)},
	{&relayv1.Dnd5EService_ServiceDesc, bind(relayv1.RegisterDnd5EServiceHandlerClient, relayv1.NewDnd5EServiceClient)},
	{&relayv1.EventService_ServiceDesc, bind(relayv1.RegisterEventServiceHandlerClient, relayv1.NewEventServiceClient)},
	{&relayv1.KeyService_ServiceDesc, bind(relayv1.RegisterKeyServiceHandlerClient, relayv1.NewKeyServiceClient)},
	{&relayv1.ClientService_ServiceDesc, bind(relayv1.RegisterClientServiceHandlerClient, relayv1.NewClientServiceClient)},
	{&relayv1.TicketService_ServiceDesc, bind(relayv1.RegisterTicketServiceHandlerClient, relayv1.NewTicketServiceClient)},
	{&relayv1.LinkService_ServiceDesc, bind(relayv1.RegisterLinkServiceHandlerClient, relayv1.NewLinkServiceClient)},
}

// bind pairs a service's generated REST registration with its client
// constructor, so that every service binds the same way over any
// connection.
func bind[C any](register func(context.Context, *runtime.ServeMux, C) error, newClient func(grpc.ClientConnInterface) C) func(context.Context, *runtime.ServeMux, grpc.ClientConnInterface) error {
	return func(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
		return register(ctx, mux, newClient(conn))
	}
}

// Descriptors returns the descriptor of every service of [Services], in
// the same order, from the generated code.
func Descriptors() ([]protoreflect.ServiceDescriptor, error) {
	out := make([]protoreflect.ServiceDescriptor, 0, len(Services))
	for _, s := range Services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(s.Name()))
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", s.Name(), err)
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("%s is not a service", s.Name())
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
