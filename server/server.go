// Package server implements the relay's gRPC services over worlds of any
// kind, the interceptor chain that authenticates and authorises every call,
// the single mapping from world errors to gRPC statuses, and the in-process
// connection ([LocalConn]) through which the gateway calls the services.
//
// Services only translate between protobuf messages and world types; the
// rules live in the worlds. A registry ([Worlds]) resolves the call's
// `clientId` to the world that serves it, and a service asks that world for
// the capability it needs, through the interfaces of package world:
//
//	DocumentService   world.Documents, world.DocumentSearch, world.Folders (structure)
//	FolderService     world.Folders
//	CanvasService     world.Selection
//	CombatService     world.Encounters
//	FileService       world.Files
//	Dnd5EService      world.Dnd5e
//	ScriptService     world.Scripts
//	EventService      world.Events
//	(every call)      world.World: Info, users and world permissions
//
// A world without the capability answers Unimplemented (HTTP 501) naming
// the operation and the world. The services never see a world's concrete
// type: the relay's own worlds (package world/embedded), a linked tabletop
// or a world on another node are all the same to them. The request flow is
// documented on [Chain].
package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	relayv1 "relay/gen/go/relay/v1"
	"relay/observe"
)

// Config wires a relay gRPC server.
type Config struct {
	// Keys authenticates callers and administers keys.
	Keys interface {
		Authenticator
		KeyAdmin
	}
	// Worlds resolves client ids to the worlds that serve them, whatever
	// their kind: the services reach worlds only through it.
	Worlds Worlds
	// Links pairs and unpairs linked worlds; the link service answers
	// Unavailable when nil.
	Links WorldLinks
	// RequestIDs issues request ids; a random node number when nil.
	RequestIDs *RequestIDs
	// Log receives one line per call; discarded when nil.
	Log *slog.Logger
	// ScriptTimeout bounds execute-js scripts; the world's default when 0.
	ScriptTimeout time.Duration
	// MaxMessageBytes bounds each message a gRPC caller sends, unary
	// requests and every message of a client stream (an upload's chunks)
	// alike; DefaultMaxMessageBytes when 0. A larger message is refused
	// with ResourceExhausted and the TOO_LARGE reason (HTTP 413), as the
	// gateway refuses a REST body over the same limit.
	MaxMessageBytes int
	// Events configures the event streams (events.go).
	Events EventsConfig
	// MaxUploadBytes bounds an uploaded file; DefaultMaxUploadBytes when 0.
	MaxUploadBytes int64
	// RateLimit limits each API key's requests (ratelimit.go); nil allows
	// everything.
	RateLimit *RateLimiter
	// AuthFailures limits, per client address, the calls that fail
	// authentication (see [Server.Admit]); nil allows any number.
	AuthFailures *RateLimiter
	// Metrics counts the gRPC-native calls (REST calls are counted by
	// the HTTP middleware, see package observe); nil counts nothing.
	Metrics *observe.Metrics
}

// DefaultMaxMessageBytes is the request size limit when Config leaves it
// 0: 1 MiB, the gateway's default body limit.
const DefaultMaxMessageBytes = 1 << 20

// Server is the relay's gRPC server with its health service.
type Server struct {
	GRPC   *grpc.Server
	Health *health.Server
	// Local calls the same services in process, unary calls and streams,
	// through the same interceptors (see LocalConn): the gateway's one
	// connection to the services.
	Local *LocalConn

	chain           *Chain
	authFailures    *RateLimiter
	maxMessageBytes int
	log             *slog.Logger
}

// New builds the gRPC server with every relay service, the interceptor
// chain, the standard health service and server reflection.
func New(cfg Config) (*Server, error) {
	if cfg.Keys == nil || cfg.Worlds == nil {
		return nil, errors.New("server: Keys and Worlds are required")
	}
	if cfg.RequestIDs == nil {
		cfg.RequestIDs = NewRequestIDs(-1, nil)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	policies, err := LoadPolicies()
	if err != nil {
		return nil, err
	}
	chain := &Chain{
		Policies:   policies,
		Keys:       cfg.Keys,
		Worlds:     cfg.Worlds,
		RequestIDs: cfg.RequestIDs,
		Log:        cfg.Log,
		Tickets:    NewTickets(nil, keyLookup(cfg.Keys)),
		RateLimit:  cfg.RateLimit,
		Metrics:    cfg.Metrics,
	}
	// One chained interceptor of each kind serves the network server and
	// the in-process connection, so both run the same steps in the same
	// order.
	unary, stream := chainUnary(chain.Unary()), chainStream(chain.Stream())
	s := grpc.NewServer(
		grpc.UnaryInterceptor(unary),
		grpc.StreamInterceptor(stream),
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.ForceServerCodecV2(newRequestCodec()),
	)
	// Every service is served twice: on the network server and on the
	// in-process connection that carries the gateway's calls. On the
	// network server, every service (health and reflection too) refuses
	// the request messages the codec could not decode (decode.go).
	network := decodeRegistrar{server: s}
	local := newLocalConn(unary, stream)
	both := registrars{network, local}
	relayv1.RegisterDocumentServiceServer(both, documentService{})
	relayv1.RegisterFolderServiceServer(both, folderService{})
	relayv1.RegisterCanvasServiceServer(both, canvasService{})
	relayv1.RegisterScriptServiceServer(both, scriptService{timeout: cfg.ScriptTimeout})
	relayv1.RegisterKeyServiceServer(both, keyService{store: cfg.Keys})
	relayv1.RegisterClientServiceServer(both, clientService{worlds: cfg.Worlds})
	relayv1.RegisterLinkServiceServer(both, linkService{links: cfg.Links, now: time.Now})
	relayv1.RegisterEventServiceServer(both, newEventService(cfg.Events))
	relayv1.RegisterTicketServiceServer(both, ticketService{tickets: chain.Tickets})
	relayv1.RegisterCombatServiceServer(both, combatService{})
	relayv1.RegisterFileServiceServer(both, newFileService(cfg.MaxUploadBytes))
	relayv1.RegisterDnd5EServiceServer(both, dnd5eService{})

	hs := health.NewServer()
	// The gateway's /healthz asks the health service over the in-process
	// connection too.
	healthpb.RegisterHealthServer(both, hs)
	reflection.Register(network)
	return &Server{GRPC: s, Health: hs, Local: local, chain: chain, authFailures: cfg.AuthFailures, maxMessageBytes: cfg.MaxMessageBytes, log: cfg.Log}, nil
}

// SetServing marks the relay (and each of its services) serving or not in
// the health service.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.Health.SetServingStatus("", st)
	for name := range s.GRPC.GetServiceInfo() {
		s.Health.SetServingStatus(name, st)
	}
}

// Stop stops the server gracefully, waiting at most for ctx.
func (s *Server) Stop(ctx context.Context) {
	s.Health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.GRPC.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.GRPC.Stop()
	}
}

// registrars registers a service with each of its registrars.
type registrars []grpc.ServiceRegistrar

func (r registrars) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, reg := range r {
		reg.RegisterService(desc, impl)
	}
}
