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
//
// The services are those of contract.Services, each registered with the
// implementation of its generated interface. [Server] serves them two
// ways, through the same interceptors: to the network on grpc-go's own
// HTTP/2 transport ([Server.Serve]), where every call is admitted from its
// headers before its message is read ([Server.Admit], run as the
// transport's tap) and each message must arrive within an allowance
// (recvguard.go); and to the gateway in process, without a transport
// ([LocalConn]). [Server.ServeHTTP] serves the gRPC calls that reach the
// relay's HTTP server instead.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/tabletop-relay/relay/contract"
	"github.com/tabletop-relay/relay/observe"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/server/signin"
)

// Config wires a relay gRPC server.
type Config struct {
	// Keys authenticates callers and administers keys.
	Keys interface {
		Authenticator
		KeyAdmin
		keys.Accounts
	}
	// Worlds resolves client ids to the worlds that serve them, whatever
	// their kind: the services reach worlds only through it.
	Worlds Worlds
	// TicketStore keeps the stream tickets (tickets.go); in memory when
	// nil. A cluster shares one store among its nodes.
	TicketStore TicketStore
	// Owners tells which account owns each world; nil means the
	// operator's account owns every world, so that the keys of every
	// other account reach none.
	Owners WorldOwners
	// AccountMaxKeys is how many unrevoked keys an account other than the
	// operator's may hold when its own quota does not say; 0 sets no
	// limit.
	AccountMaxKeys int
	// AccountDefaults are the quotas of an account other than the
	// operator's where its own are 0 (its Keys field is AccountMaxKeys);
	// 0 in a field sets no limit.
	AccountDefaults keys.Quotas
	// WorldDocumentBytes bounds the database of each embedded world: calls
	// that would make a world whose database holds this much hold more
	// are refused (see Chain.checkStoredBytes); 0 sets no bound.
	WorldDocumentBytes int64
	// EmbeddedWorlds makes and removes embedded worlds for the world
	// service, which answers Unavailable when it is nil.
	EmbeddedWorlds EmbeddedWorlds
	// MaxKeysPerCreator is how many unrevoked keys one key may have
	// created, whatever its account (the operator's too); 0 sets no limit.
	MaxKeysPerCreator int
	// ReleaseAccount, when set, lets go of an account's worlds before the
	// account is deleted: it revokes the tokens of the linked worlds the
	// account owns.
	ReleaseAccount func(ctx context.Context, accountID string) error
	// Signin keeps the accounts' passwords, console sessions and invites;
	// nil keeps none (the methods that need it are Unimplemented).
	Signin *signin.Service
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
	// with ResourceExhausted before it is read (grpc-go's own status, see
	// decode.go), as the gateway refuses a REST body over the same limit
	// with 413.
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
	// IdleTimeout closes a network gRPC connection that has had no call
	// open for this long (with GOAWAY, which clients take as a sign to
	// reconnect when they next call); 0 never does.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds how long a new network gRPC connection may
	// take to send its HTTP/2 preface; grpc-go's default (120 s) when 0.
	HandshakeTimeout time.Duration
	// RecvTimeout and RecvMinRate bound how long a network caller's
	// message may take to arrive whole: RecvTimeout, plus the time
	// MaxMessageBytes takes at RecvMinRate bytes a second (none when 0);
	// a later message ends its call. No bound when RecvTimeout is 0 (see
	// recvguard.go).
	RecvTimeout time.Duration
	RecvMinRate int
	// Metrics counts the gRPC-native calls (REST calls are counted by
	// the HTTP middleware, see package observe); nil counts nothing.
	Metrics *observe.Metrics
	// Audit is the audit log: the audited calls are recorded in it and
	// AuditService lists it. Without it nothing is recorded and the
	// listing is Unimplemented.
	Audit AuditLog
	// LiveNodes, on a node of a cluster, counts the live nodes (itself
	// included) from memory: each node then allows its share of an
	// account's requests a minute. Nil on a node alone.
	LiveNodes func() int
	// StreamTally, on a node of a cluster, shares the accounts' open
	// event streams with the other nodes, so that an account's quota of
	// open streams holds for all of them together. Nil on a node alone.
	StreamTally StreamTally
	// Idempotency bounds what is kept of the writes sent with an
	// idempotency key (idempotency.go).
	Idempotency IdempotencyConfig
}

// DefaultMaxMessageBytes is the request size limit when Config leaves it
// 0: 1 MiB, the gateway's default body limit.
const DefaultMaxMessageBytes = 1 << 20

// Server is the relay's gRPC server with its health service.
type Server struct {
	// GRPC serves gRPC callers from the network.
	GRPC   *grpc.Server
	Health *health.Server
	// Local calls the same services in process, unary calls and streams,
	// through the same interceptors (see LocalConn): the gateway's one
	// connection to the services.
	Local *LocalConn

	recvAllowance   time.Duration
	chain           *Chain
	authFailures    *RateLimiter
	maxMessageBytes int
	log             *slog.Logger
	// streams counts the open event streams.
	streams *streamLimits
}

// OpenStreams counts this node's open event streams of each account with
// any open (a copy: the tally of a cluster publishes it).
func (s *Server) OpenStreams() map[string]int64 { return s.streams.byAccounts() }

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
		Tickets:    NewTicketsIn(cfg.TicketStore, nil, keyLookup(cfg.Keys)),
		RateLimit:  cfg.RateLimit,
		Metrics:    cfg.Metrics,
		Accounts:   cfg.Keys,
		Owners:     cfg.Owners,
	}
	defaults := cfg.AccountDefaults
	defaults.Keys = int64(cfg.AccountMaxKeys)
	quotas := &quotaPolicy{accounts: cfg.Keys, defaults: defaults, worlds: cfg.EmbeddedWorlds, worldBytes: cfg.WorldDocumentBytes}
	quotas.rates.shareWith(cfg.LiveNodes)
	chain.Quotas = quotas
	if chain.idempotency, err = newIdempotency(cfg.Idempotency, cfg.Log); err != nil {
		return nil, err
	}
	if cfg.Audit != nil {
		chain.Audit = cfg.Audit
	}
	srv := &Server{chain: chain, authFailures: cfg.AuthFailures, maxMessageBytes: cfg.MaxMessageBytes, log: cfg.Log,
		recvAllowance: recvAllowance(cfg.RecvTimeout, cfg.RecvMinRate, cfg.MaxMessageBytes)}
	// One chained interceptor of each kind serves the network server and
	// the in-process connection, so both run the same steps in the same
	// order.
	unary, stream := chainUnary(chain.Unary()), chainStream(chain.Stream())
	srv.GRPC = grpc.NewServer(
		grpc.UnaryInterceptor(unary),
		grpc.StreamInterceptor(stream),
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.ForceServerCodecV2(newServerCodec()),
		// Received messages (an upload's chunks of 32 KiB and more) go
		// into buffers of finer classes than grpc-go's default pool, which
		// jumps from 32 KiB to 1 MiB and clears each buffer it hands out.
		experimental.BufferPool(receivePool),
		// Calls without a valid key are refused from their headers,
		// before their message is read (admission.go).
		grpc.InTapHandle(srv.admitTap),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		// The HTTP server's header limit (64 KiB), which bounded gRPC
		// calls' headers too when they went through it.
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		// --idle-timeout: a connection without a call for that long is
		// sent GOAWAY and closed (0: never).
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}),
		grpc.ConnectionTimeout(handshakeTimeout(cfg.HandshakeTimeout)),
	)
	// Every service of the contract is served twice: on the network server
	// and on the in-process connection that carries the gateway's calls. On
	// the network server, every service (health and reflection too) refuses
	// the request messages the codec could not decode (decode.go).
	network := decodeRegistrar{server: srv.GRPC}
	srv.Local = newLocalConn(unary, stream)
	both := registrars{network, srv.Local}
	events := newEventService(cfg.Events)
	events.limits.tally = cfg.StreamTally
	srv.streams = events.limits
	events.setAccounts(cfg.Keys)
	if cfg.Signin != nil {
		events.setSessions(cfg.Signin)
	}
	events.quotas = quotas
	files := newFileService(cfg.MaxUploadBytes)
	files.quotas, files.worlds = quotas, cfg.EmbeddedWorlds
	files.idempotency = chain.idempotency
	if err := registerServices(both, []any{
		documentService{},
		folderService{},
		canvasService{},
		scriptService{timeout: cfg.ScriptTimeout},
		keyService{store: cfg.Keys, accounts: cfg.Keys, defaultMaxKeys: int64(cfg.AccountMaxKeys), maxPerCreator: cfg.MaxKeysPerCreator, chain: chain},
		accountService{store: cfg.Keys, release: cfg.ReleaseAccount, chain: chain, quotas: quotas, worlds: cfg.EmbeddedWorlds, streams: events.limits, signin: cfg.Signin},
		worldService{worlds: cfg.EmbeddedWorlds, quotas: quotas, chain: chain, creating: &accountLocks{}},
		signinService{signin: cfg.Signin},
		auditService{log: cfg.Audit},
		clientService{worlds: cfg.Worlds, chain: chain},
		linkService{links: cfg.Links, now: time.Now, chain: chain, quotas: quotas, worlds: cfg.EmbeddedWorlds},
		events,
		ticketService{tickets: chain.Tickets},
		combatService{},
		files,
		dnd5eService{},
	}); err != nil {
		return nil, err
	}

	srv.Health = health.NewServer()
	// The gateway's /healthz asks the health service over the in-process
	// connection too.
	healthpb.RegisterHealthServer(both, srv.Health)
	reflection.Register(network)
	return srv, nil
}

// maxHeaderListBytes bounds a network gRPC call's headers.
const maxHeaderListBytes = 64 << 10

// maxConcurrentStreams is how many calls one network gRPC connection may
// have open at once: net/http's default for HTTP/2, which bounded gRPC
// connections when they went through it.
const maxConcurrentStreams = 250

// handshakeTimeout is the gRPC transport's handshake time-out for a
// setting: grpc-go's own default (120 s) for 0.
func handshakeTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return 120 * time.Second
	}
	return d
}

// registerServices registers, for every service of the contract
// (contract.Services), the one implementation among impls that satisfies
// its generated server interface. A service without an implementation, or
// an implementation of no listed service, is an error: the list of services
// is written once, in package contract.
func registerServices(reg grpc.ServiceRegistrar, impls []any) error {
	used := make([]bool, len(impls))
	for _, svc := range contract.Services {
		iface := reflect.TypeOf(svc.HandlerType).Elem()
		found := -1
		for i, impl := range impls {
			if reflect.TypeOf(impl).Implements(iface) {
				if found >= 0 {
					return fmt.Errorf("server: %T and %T both implement %s", impls[found], impl, svc.ServiceName)
				}
				found = i
			}
		}
		if found < 0 {
			return fmt.Errorf("server: no implementation of %s", svc.ServiceName)
		}
		used[found] = true
		reg.RegisterService(svc, impls[found])
	}
	for i, ok := range used {
		if !ok {
			return fmt.Errorf("server: %T implements no service of the contract", impls[i])
		}
	}
	return nil
}

// Serve serves gRPC callers from the network on lis, with grpc-go's own
// HTTP/2 transport, until Stop.
func (s *Server) Serve(lis net.Listener) error {
	return s.GRPC.Serve(lis)
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
