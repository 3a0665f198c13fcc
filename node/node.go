package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tabletop-relay/relay/audit"
	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/shared"
	"github.com/tabletop-relay/relay/connroute"
	"github.com/tabletop-relay/relay/console"
	"github.com/tabletop-relay/relay/gateway"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/netlimit"
	"github.com/tabletop-relay/relay/observe"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/server/signin"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/dice"
	"github.com/tabletop-relay/relay/world/embedded"
	"github.com/tabletop-relay/relay/world/events"
	"github.com/tabletop-relay/relay/world/files"
	"github.com/tabletop-relay/relay/world/script"
)

// Node is a running relay: its listeners, servers and stores. Start
// returns one; Close stops it.
type Node struct {
	addr string
	// grpcAddr is the address of the gRPC-only port, when there is one.
	grpcAddr string
	router   *connroute.Router
	http     *http.Server
	conns    *netlimit.Listener
	bodies   *netlimit.BodyGuard
	grpc     *server.Server
	keys     keys.Backend
	// shared is the node's part of a cluster's state; nil for a node
	// alone (see shared.go).
	shared  *shared.Attached
	worlds  *world.Host
	hub     *events.Hub
	scripts *script.Pool
	links   *link.Service
	linkDB  *link.SQLiteStore
	// signinDB keeps the passwords, sessions and invites of a node alone
	// (a cluster's are in its shared state); signin serves them, and
	// authKeys authenticates API keys and session tokens alike.
	signinDB *signin.SQLiteKV
	signin   *signin.Service
	authKeys signin.Keys
	// audit is the audit log, auditDB its table of relay.db on a node
	// alone (nil in a cluster, whose audit stream keeps the records).
	audit   *audit.Log
	auditDB *audit.SQLiteStore
	// linkEvents are the linked worlds' event streams.
	linkEvents *link.Events
	// cluster is the node's membership of a cluster, registry its world
	// registry; nil for a relay alone (cluster.go).
	cluster  *cluster.Node
	registry *cluster.Registry
	// replication replicates the embedded worlds in a cluster of several
	// nodes; nil otherwise.
	replication   *cluster.Replication
	clusterWiring clusterWiring
	served        chan error
	log           *slog.Logger
	adminKey      string
	// dataDir is the data directory (Config.DataDir).
	dataDir string
	// metrics is nil unless Config.MetricsListen is set; metricsStop
	// stops its server.
	metrics     *observe.Metrics
	metricsAddr string
	metricsStop func()

	// stopSuspensionSweep stops closing the suspended accounts' linked
	// worlds (accounts.go).
	stopSuspensionSweep context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

// openAudit opens the audit log: a table of relay.db on a node alone,
// the cluster's audit stream in a cluster.
func (r *Node) openAudit(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.AuditRetention < 0 {
		return &ConfigError{fmt.Errorf("audit retention must be 0 or more: %s", cfg.AuditRetention)}
	}
	if cfg.AuditMaxRecords < 0 {
		return &ConfigError{fmt.Errorf("audit max records must be 0 or more: %d", cfg.AuditMaxRecords)}
	}
	opts := audit.Options{Retention: cfg.AuditRetention, MaxRecords: cfg.AuditMaxRecords, Log: log}
	if opts.Retention == 0 {
		opts.Retention = audit.DefaultRetention
	}
	if opts.MaxRecords == 0 {
		opts.MaxRecords = audit.DefaultMaxRecords
	}
	var store audit.Store
	if r.shared != nil {
		s, err := shared.OpenAudit(ctx, r.shared.JetStream(), shared.Options{Replicas: r.shared.Replicas()}, opts.Retention, opts.MaxRecords)
		if err != nil {
			return err
		}
		store = s
	} else {
		db, err := audit.OpenSQLite(filepath.Join(cfg.DataDir, "relay.db"))
		if err != nil {
			return fmt.Errorf("open audit log: %w", err)
		}
		r.auditDB, store = db, db
	}
	r.audit = audit.New(store, opts)
	return nil
}

// Audit is the node's audit log.
func (r *Node) Audit() *audit.Log { return r.audit }

// Addr is the address the relay serves REST, SSE and gRPC on.
func (r *Node) Addr() string { return r.addr }

// GRPCAddr is the address of the gRPC-only port, or "" when there is none.
func (r *Node) GRPCAddr() string { return r.grpcAddr }

// AdminKey is the admin API key created on the first start of a data
// directory, or "" when the data directory already had one.
func (r *Node) AdminKey() string { return r.adminKey }

// Keys is the API key store: relay.db's, or the cluster's.
func (r *Node) Keys() keys.Backend { return r.keys }

// Worlds is the host of the embedded worlds of the data directory.
func (r *Node) Worlds() *world.Host { return r.worlds }

// Links is the service of the linked worlds (tabletops connected to
// /relay).
func (r *Node) Links() *link.Service { return r.links }

// GRPC is the gRPC server; its Local connection reaches the services
// through the same interceptors as network callers, without a network hop.
func (r *Node) GRPC() *server.Server { return r.grpc }

// Scripts is the pool of execute-js worker processes.
func (r *Node) Scripts() *script.Pool { return r.scripts }

// Conns is the listener that caps connections and bounds stalled writes.
func (r *Node) Conns() *netlimit.Listener { return r.conns }

// Bodies is the guard that cuts off request bodies that arrive too slowly.
func (r *Node) Bodies() *netlimit.BodyGuard { return r.bodies }

// Metrics is the Prometheus registry, or nil unless Config.MetricsListen
// is set.
func (r *Node) Metrics() *observe.Metrics { return r.metrics }

// MetricsAddr is the address serving /metrics, or "" when there is none.
func (r *Node) MetricsAddr() string { return r.metricsAddr }

// Start opens the stores, creates the demo world and admin key on
// first start, and starts serving. It returns once the relay accepts
// requests. A new admin key is printed on stdout, the only place it is
// ever shown (and AdminKey returns it); log gets everything else. A
// setting Start cannot work with is a *ConfigError; on any error, what was
// already open is closed again.
func Start(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) (*Node, error) {
	// The listeners are bound before anything is written: a relay that
	// cannot have its ports (one busy, an address mistyped) leaves no
	// data directory, demo world or admin key behind.
	lns, err := bindListeners(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		lns.close()
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	keyStore, err := keys.Open(filepath.Join(cfg.DataDir, "relay.db"), time.Now)
	if err != nil {
		lns.close()
		return nil, fmt.Errorf("open key store: %w", err)
	}
	r := &Node{keys: keyStore, log: log, served: make(chan error, 1), dataDir: cfg.DataDir}
	timing := newSteps()
	if cfg.MetricsListen != "" {
		r.metrics = observe.NewMetrics()
	}
	fail := func(err error) (*Node, error) {
		// Listeners already handed to their servers are closed by Close;
		// closing them twice is harmless.
		lns.close()
		_ = r.Close(context.Background())
		return nil, err
	}
	// The event hub numbers and stores each transaction's events in the
	// transaction (as the worlds' journal), then publishes them once
	// committed (as a host listener).
	r.hub = events.New(events.Options{RingSize: cfg.EventRingSize, RingBytes: cfg.EventRingBytes, QueueSize: cfg.EventQueueSize, Coalesce: cfg.EventCoalesce})
	limits := world.Limits{MaxDocumentBytes: cfg.MaxDocumentBytes, MaxDepth: cfg.MaxJSONDepth}
	worldOpts := world.Options{Journal: r.hub, Limits: limits, CommitDelay: cfg.CommitDelay}
	if r.metrics != nil {
		worldOpts.ObserveCommit = r.metrics.ObserveCommit
	}
	if r.worlds, err = world.OpenHost(cfg.DataDir, worldOpts); err != nil {
		return fail(fmt.Errorf("open worlds: %w", err))
	}
	r.worlds.Watch(r.hub.Committed)
	// Uploads cut short by a crash leave temporary files behind; nothing
	// is writing yet, so every one of them is abandoned.
	if n, err := files.RemoveTemporaryAll(cfg.DataDir); err != nil {
		log.Warn("could not remove the temporary files of unfinished uploads", "error", err)
	} else if n > 0 {
		log.Info("removed the temporary files of unfinished uploads", "files", n)
	}
	// JSON uploads whose file comes before its name wait in the spool; any
	// left there was cut short by a stop.
	spoolDir := filepath.Join(cfg.DataDir, "spool")
	if err := os.RemoveAll(spoolDir); err != nil {
		return fail(fmt.Errorf("clear the upload spool: %w", err))
	}
	if err := os.MkdirAll(spoolDir, 0o700); err != nil {
		return fail(fmt.Errorf("create the upload spool: %w", err))
	}
	if cfg.Cluster.Enabled() {
		ccfg := cfg.Cluster
		ccfg.DataDir = cfg.DataDir
		if err := ccfg.Check(); err != nil {
			return fail(&ConfigError{err})
		}
		if r.cluster, err = cluster.Start(ctx, ccfg, log); err != nil {
			return fail(err)
		}
		// The embedded worlds are replicated when other nodes can keep
		// copies of them; no world is open yet.
		r.replication = cluster.NewReplication(r.cluster, cluster.ReplicationOptions{
			Worlds: r.worlds, DataDir: cfg.DataDir, TookOver: r.tookOver,
			Demoted: func(clientID string) { r.hub.Forget(clientID) },
		})
		if r.replication != nil {
			r.worlds.SetReplicator(r.replication)
		}
		timing.done("cluster")
	}
	if st := sharedState(cfg, r.cluster); st != nil {
		// One of a cluster's nodes: the keys and the rest of the shared
		// state are the cluster's (shared.go).
		if r.shared, err = attachShared(ctx, st, r.hub, cfg.EventRingSize, cfg.EventRingBytes, keyStore, log); err != nil {
			r.keys = nil // closed by attachShared
			return fail(err)
		}
		r.keys = r.shared.Keys
		timing.done("shared")
	}
	if cfg.Demo {
		if err := ensureDemoWorld(ctx, r.worlds, cfg.DataDir, log); err != nil {
			return fail(err)
		}
	}
	adminFile := filepath.Join(cfg.DataDir, "admin.key")
	plaintext, created, err := r.keys.Bootstrap(ctx, adminFile)
	if err != nil {
		return fail(fmt.Errorf("create admin key: %w", err))
	}
	if created {
		r.adminKey = plaintext
		fmt.Fprintf(stdout, "Created the admin API key (every scope); it is shown only this once and saved in %s:\n%s\n", adminFile, plaintext)
	}

	if r.scripts, err = script.NewPool(script.PoolOptions{Workers: cfg.ScriptWorkers, MemoryBytes: cfg.ScriptMemory}); err != nil {
		return fail(&ConfigError{err})
	}

	ids := server.NewRequestIDs(cfg.NodeID, nil)
	var rolls dice.Source // nil: the server rolls with real randomness
	if cfg.DiceSeed != 0 {
		rolls = dice.NewSeeded(cfg.DiceSeed)
	}
	// The services reach the worlds through the registry of the embedded
	// worlds: the engines of the data directory with the rules, the event
	// hub, the file areas and the script pool applied to them.
	worlds := embedded.NewRegistry(r.worlds, embedded.Options{
		// Each world's file area is <data>/worlds/<clientId>/files.
		DataDir: cfg.DataDir,
		Hub:     r.hub,
		Dice:    rolls,
		Scripts: r.scripts,
	})
	// Failed authentications count against an address the same whether
	// they presented an API key or a tabletop's connection token.
	authFailures := server.NewRateLimiter(cfg.AuthFailureLimit, 0, nil)
	pairAttempts := server.NewRateLimiter(cfg.PairRateLimit, 0, nil)
	pairFailures := server.NewRateLimiter(cfg.PairFailureLimit, 0, nil)
	requestAttempts := server.NewRateLimiter(cfg.RequestRateLimit, 0, nil)
	requestPolls := server.NewRateLimiter(cfg.RequestPollLimit, 0, nil)
	rateLimit := server.NewRateLimiter(cfg.RateLimit, cfg.RateLimitBurst, nil)
	if r.linkDB, err = link.OpenSQLite(filepath.Join(cfg.DataDir, "relay.db")); err != nil {
		return fail(fmt.Errorf("open linked worlds: %w", err))
	}
	var signinKV signin.KV
	if r.shared != nil {
		signinKV = r.shared.Signin
	} else {
		if r.signinDB, err = signin.OpenSQLite(filepath.Join(cfg.DataDir, "relay.db")); err != nil {
			return fail(fmt.Errorf("open sign-in state: %w", err))
		}
		signinKV = r.signinDB
	}
	signInAttempts := server.NewRateLimiter(cfg.SignInRateLimit, 0, nil)
	signupAttempts := server.NewRateLimiter(cfg.SignupRateLimit, 0, nil)
	if r.signin, err = signin.New(signin.Config{
		KV:             signinKV,
		Accounts:       r.keys,
		Signup:         cfg.Signup,
		IdleTimeout:    cfg.SessionIdleTimeout,
		SecureCookies:  strings.HasPrefix(strings.ToLower(cfg.PublicURL), "https://"),
		SignInAttempts: signInAttempts,
		SignupAttempts: signupAttempts,
		Log:            log,
	}); err != nil {
		return fail(&ConfigError{err})
	}
	r.authKeys = signin.Keys{Backend: r.keys, Sessions: r.signin}
	// Linked worlds' events get their ids and subscribers here; the hub
	// hands every event message to it.
	linkEvents := link.NewEvents()
	linkEvents.SetJournal(r.linkDB)
	linkEvents.SetLimits(link.EventLimits{RingBytes: cfg.EventRingBytes, MaxEventBytes: cfg.LinkMaxEventBytes, MaxDepth: cfg.MaxJSONDepth, Log: log})
	r.linkEvents = linkEvents
	// The stores of relay.db and memory, or the cluster's (shared.go).
	linkStore, ticketStore, err := r.sharedStores(ctx, linkEvents, log, authFailures, pairAttempts, pairFailures, rateLimit, requestAttempts, requestPolls, signInAttempts, signupAttempts)
	if err != nil {
		return fail(err)
	}
	// A linked world's numbering is settled with the cluster again each
	// time its tabletop connects here (link/cluster.go), and in a cluster
	// the node holding its socket hosts it.
	onConnect := linkEvents.Connected
	var onDisconnect func(string)
	if r.shared == nil {
		// Alone, a world whose tabletop left keeps its retained events
		// in relay.db only. In a cluster they stay in memory: the other
		// nodes' events of the world reach this node's copy, not its
		// journal.
		onDisconnect = linkEvents.Disconnected
	}
	if r.cluster != nil {
		claim, release := r.clusterWiring.linkHooks()
		onConnect = func(info link.ConnInfo) {
			linkEvents.Connected(info)
			claim(info)
		}
		onDisconnect = release
	}
	if r.links, err = link.New(link.Config{
		Store: linkStore,
		// A new linked world never takes the id of an embedded one.
		Taken: func(clientID string) bool {
			ids, err := r.worlds.IDs(context.Background())
			return err != nil || slices.Contains(ids, clientID)
		},
		PublicURL:    cfg.PublicURL,
		AuthTimeout:  cfg.LinkAuthTimeout,
		AuthFailures: authFailures,
		PairAttempts: pairAttempts,
		Refuse:       r.refuseSuspended,
		PairFailures: pairFailures,
		// Key requests and pair requests: in memory on a node alone, in
		// the cluster's shared state otherwise, approved through the
		// relay's own services with the approver's key.
		Requests:        r.requestStore(),
		Approvals:       approvals{r},
		RequestAttempts: requestAttempts,
		RequestPolls:    requestPolls,
		Hub: link.HubOptions{
			ReplyTimeout:    cfg.LinkReplyTimeout,
			PingInterval:    cfg.LinkPingInterval,
			MaxMessageBytes: cfg.LinkMaxMessageBytes,
			MaxReplyBytes:   cfg.LinkMaxReplyBytes,
			MaxEventBytes:   cfg.LinkMaxEventBytes,
			MaxDepth:        cfg.MaxJSONDepth,
			MaxPending:      cfg.LinkMaxPending,
			OnEvent:         linkEvents.Publish,
			OnConnect:       onConnect,
			OnDisconnect:    onDisconnect,
			// Subscribers on other nodes cannot be counted here.
			AllChannels: r.shared != nil,
		},
		Log: log,
	}); err != nil {
		return fail(&ConfigError{err})
	}
	linkEvents.SetHub(r.links.Hub())
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	r.stopSuspensionSweep = stopSweep
	go sweepSuspended(sweepCtx, r.keys, r.links.Pairings(), r.links.Hub())
	if err := r.watchUnpaired(ctx); err != nil {
		return fail(err)
	}
	// Embedded worlds first, then the linked ones; in a cluster, the
	// registry of the whole cluster in front of them.
	var allWorlds server.Worlds = link.NewRegistry(worlds, r.links, linkEvents)
	if r.cluster != nil {
		if r.registry, err = r.clusterWiring.startRegistry(ctx, r.cluster, allWorlds, r.worlds, r.links.Hub(), r.remoteEvents(), r.replication); err != nil {
			return fail(err)
		}
		allWorlds = r.registry
		timing.done("registry")
		if r.shared != nil {
			r.backfillEvents(ctx)
			timing.done("backfill")
		}
		r.registry.Answer()
	}
	worldBytes, err := worldDocumentBytes(cfg)
	if err != nil {
		return fail(err)
	}
	if err := checkIdempotency(cfg); err != nil {
		return fail(err)
	}
	if err := r.openAudit(ctx, cfg, log); err != nil {
		return fail(err)
	}
	var liveNodes func() int
	var streamTally server.StreamTally
	if r.shared != nil {
		liveNodes = r.shared.Presence.Count
		streamTally = r.shared.Streams
	}
	if r.grpc, err = server.New(server.Config{
		Audit: r.audit,
		// In a cluster an account's requests a minute and open streams
		// are counted across the nodes.
		LiveNodes:          liveNodes,
		StreamTally:        streamTally,
		WorldDocumentBytes: worldBytes,
		// API keys, and the console's session tokens as the keys their
		// sessions stand for.
		Keys:              r.authKeys,
		Signin:            r.signin,
		TicketStore:       ticketStore,
		Worlds:            allWorlds,
		Links:             worldLinks{r.links},
		Owners:            worldOwners{r.links.Pairings(), r.keys},
		ReleaseAccount:    r.releaseAccount,
		AccountMaxKeys:    cfg.AccountMaxKeys,
		MaxKeysPerCreator: cfg.MaxKeysPerCreator,
		AccountDefaults: keys.Quotas{
			Worlds:            int64(cfg.AccountMaxWorlds),
			Streams:           int64(cfg.AccountMaxStreams),
			RequestsPerMinute: int64(cfg.AccountRequestsPerMinute),
			UploadBytes:       cfg.AccountMaxUploadBytes,
			StoredBytes:       cfg.AccountMaxStoredBytes,
		},
		EmbeddedWorlds: embeddedWorlds{r},
		Idempotency:    server.IdempotencyConfig{TTL: cfg.IdempotencyTTL, MaxKeys: cfg.IdempotencyKeys, AnswerBytes: cfg.IdempotencyAnswerBytes},
		RequestIDs:     ids,
		Log:            log,
		ScriptTimeout:  cfg.ScriptTimeout,
		// One request size limit for both transports: the gateway bounds
		// REST bodies with it, the gRPC server every message.
		MaxMessageBytes: int(cfg.MaxBodyBytes),
		MaxUploadBytes:  cfg.MaxUploadBytes,
		RateLimit:       rateLimit,
		AuthFailures:    authFailures,
		// The network gRPC transport's share of the slow and idle client
		// limits; the connection caps and the write stall guard apply to
		// its connections through the listener.
		IdleTimeout:      cfg.IdleTimeout,
		HandshakeTimeout: cfg.ReadHeaderTimeout,
		RecvTimeout:      cfg.BodyReadTimeout,
		RecvMinRate:      cfg.BodyMinRate,
		Metrics:          r.metrics,
		Events: server.EventsConfig{
			MaxStreamsPerKey:   cfg.MaxStreamsPerKey,
			MaxStreamsPerWorld: cfg.MaxStreamsPerWorld,
			QueueSize:          cfg.EventQueueSize,
		},
	}); err != nil {
		return fail(err)
	}
	if r.shared != nil {
		r.shared.Streams.SetSource(r.grpc.OpenStreams)
	}
	corsOrigins, err := gateway.ParseCORSOrigins(cfg.CORSOrigins)
	if err != nil {
		return fail(&ConfigError{fmt.Errorf("cors origins: %w", err)})
	}
	// The gateway calls the services through the server's in-process
	// connection, unary calls and streams alike: REST calls pass the same
	// interceptors as gRPC calls, without a network hop.
	rest, err := gateway.New(ctx, r.grpc.Local, gateway.Options{CORSOrigins: corsOrigins, NewRequestID: ids.New, Build: cfg.Build, MaxBodyBytes: cfg.MaxBodyBytes, KeepaliveInterval: cfg.EventKeepalive, MaxUploadBytes: cfg.MaxUploadBytes,
		MaxQueryBytes: cfg.MaxQueryBytes, UnaryTimeout: cfg.RequestTimeout, SpoolDir: spoolDir,
		Admit: func(ctx context.Context, method, apiKey, ticket, authorization, remoteAddr string) error {
			return r.grpc.Admit(ctx, method, server.Credentials{APIKey: apiKey, Ticket: ticket, Authorization: authorization}, remoteAddr)
		}})
	if err != nil {
		return fail(err)
	}

	// The web console's static files sit beside the API, outside its
	// admission: they hold nothing, and every call the console makes is an
	// API call like any other.
	web := rest
	if cfg.Console {
		web = console.Handler(rest)
	}

	ln := lns.api
	r.addr = ln.Addr().String()
	grpcOnly := lns.grpcOnly
	if grpcOnly != nil {
		r.grpcAddr = grpcOnly.Addr().String()
		ln = connroute.Join(ln, grpcOnly)
	}
	// Slow and idle clients: the listener caps the connections of both
	// ports together and bounds stalled writes, the body guard makes REST
	// request bodies keep arriving, and each server's own time-outs bound
	// headers and idle keep-alive connections (for gRPC, see the
	// server.Config above). HTTP/2 (h2c) takes its idle time-out from the
	// server too; its streams' bodies are guarded one by one.
	r.conns = netlimit.Listen(ln, netlimit.Config{
		MaxConns:          cfg.MaxConns,
		MaxConnsPerIP:     cfg.MaxConnsPerIP,
		WriteStallTimeout: cfg.WriteStallTimeout,
		NewRequestID:      ids.New,
		Log:               log,
	})
	// Each connection of the shared port goes to gRPC's own transport or
	// to the HTTP server by its first request (package connroute); those
	// of the gRPC-only port go to gRPC unseen.
	routeCfg := connroute.Config{HeaderTimeout: cfg.ReadHeaderTimeout, Log: log}
	if grpcOnly != nil {
		routeCfg.Direct = func(c net.Conn) bool { return connroute.SameAddr(c.LocalAddr(), grpcOnly.Addr()) }
	}
	r.router = connroute.New(r.conns, routeCfg)
	r.bodies = &netlimit.BodyGuard{Timeout: cfg.BodyReadTimeout, MinRate: cfg.BodyMinRate, Log: log}
	// The access middleware logs and counts every HTTP request (gRPC-native
	// calls pass it untouched: the interceptor chain logs and counts them).
	access := observe.AccessOptions{Log: log, Metrics: r.metrics, Routes: []string{"/healthz", "/readyz", "/cluster", "/docs", "/openapi.json", "/console", signin.PathSignup}, Label: linkRoute,
		// A request's code fetches what its approval granted: it is
		// never written to the log.
		Hidden: func(path string) bool { _, ok := link.RequestRoute(path); return ok }}
	r.http = &http.Server{
		// Every request carries the audit log and its client's address
		// (package audit); then the sign-in paths, and a session cookie turned into its token
		// as the API key of every other request, in front of everything
		// that authenticates.
		Handler:           r.bodies.Wrap(observe.Access(audit.Handler(r.signin.Handler(r.clusterRoutes(ids, routeLinks(r.links.Handler(), splitGRPC(r.grpc, web)))), r.audit), access)),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// An event stream over HTTP/1.1 is written from the event hub's writer
	// goroutines straight to its connection (see gateway.pushSink).
	r.http.ConnContext = gateway.ConnContext
	// REST clients speak HTTP/1.1 or HTTP/2 without TLS (h2c).
	r.http.Protocols = new(http.Protocols)
	r.http.Protocols.SetHTTP1(true)
	r.http.Protocols.SetUnencryptedHTTP2(true)
	go func() { r.served <- r.http.Serve(r.router.HTTP()) }()
	go func() { _ = r.grpc.Serve(r.router.GRPC()) }()
	if r.metrics != nil {
		r.registerMetrics(cfg.Build, rateLimit, authFailures, pairAttempts, pairFailures, requestAttempts, requestPolls)
		r.metricsAddr, r.metricsStop = serveMetrics(lns.metrics, r.metrics, log)
	}
	r.clusterWiring.server.Store(r.grpc)
	r.grpc.SetServing(true)
	timing.done("serve")
	log.Info("relay ready", "addr", r.addr, "grpcAddr", r.grpcAddr, "data", cfg.DataDir, "version", cfg.Build.Version, timing.group("start"))
	return r, nil
}

// splitGRPC sends the gRPC requests that reach the HTTP server (those of
// an h2c connection whose first request was REST; the router gives every
// other gRPC connection to the gRPC transport) to server.Server's
// ServeHTTP, which admits a call from its headers and refuses an oversized
// message, both before reading it, and everything else to the REST
// gateway.
func splitGRPC(grpcServer http.Handler, rest http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			grpcServer.ServeHTTP(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	})
}

// routeLinks sends the tabletop module's endpoints (`/relay`, `/auth/pair`,
// `/api/self-unpair`, `/api/clients/{clientId}/active`, and the key
// requests and pair requests under `/auth/`) to the link service and
// everything else on. They are not routes of the API's contract: they
// authenticate by pairing code, connection token or request code, so the
// gateway's admission must not see them. The approval endpoints of the
// requests do take an API key, which the link service checks and then
// presents to the key and link services in process (approvals.go), where
// the interceptors judge it as for any call.
func routeLinks(links, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if link.Owns(r.URL.Path) {
			links.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// worldLinks adapts the link service to what the server's link service
// needs.
type worldLinks struct{ s *link.Service }

func (l worldLinks) CreatePairingCode(ctx context.Context, account, clientID, createdBy string) (server.PairingCode, error) {
	code, c, err := l.s.CreatePairingCodeIn(ctx, linkAccount(account), clientID, createdBy)
	if err != nil {
		return server.PairingCode{}, err
	}
	return server.PairingCode{Code: code, ClientID: c.ClientID, ExpiresAt: c.ExpiresAt}, nil
}

// linkAccount is how the link store records an account: "" for the
// operator's, which owns every world linked before accounts existed.
func linkAccount(account string) string {
	if account == keys.OperatorAccount {
		return ""
	}
	return account
}

// worldOwners tells the server which account owns each world: a linked
// world belongs to the account of the pairing code that linked it, an
// embedded world to the account recorded when it was made; the other
// embedded worlds, and any id that names no world, to the operator's.
type worldOwners struct {
	pairings *link.Pairings
	embedded keys.WorldOwners
}

// EmbeddedOwner is the account that owns an embedded world: its record's,
// else the operator's (worlds made before accounts had owners).
func (o worldOwners) EmbeddedOwner(clientID string) string {
	if a, ok := o.embedded.WorldOwner(clientID); ok {
		return a
	}
	return keys.OperatorAccount
}

func (o worldOwners) Owner(ctx context.Context, clientID string) (string, error) {
	if a, ok := o.embedded.WorldOwner(clientID); ok {
		return a, nil
	}
	w, err := o.pairings.World(ctx, clientID)
	switch {
	case errors.Is(err, link.ErrUnknownWorld):
		return keys.OperatorAccount, nil
	case err != nil:
		return "", err
	case w.Account == "":
		return keys.OperatorAccount, nil
	}
	return w.Account, nil
}

func (l worldLinks) Unpair(ctx context.Context, clientID string) (server.Unpaired, error) {
	n, closed, err := l.s.Unpair(ctx, clientID)
	return server.Unpaired{RevokedTokens: n, Disconnected: closed}, err
}

// Close stops serving and closes the stores; later calls return the first
// call's result. ctx bounds the graceful stop of the HTTP server.
func (r *Node) Close(ctx context.Context) error {
	r.closeOnce.Do(func() { r.closeErr = r.shutdown(ctx) })
	return r.closeErr
}

func (r *Node) shutdown(ctx context.Context) error {
	var errs []error
	timing := newSteps()
	// The order of a cluster node's stop: take no new connections, release
	// the leases (the other nodes answer 503 for this node's worlds at
	// once, and this node claims none again), end the event streams, let
	// the calls under way finish, then leave NATS. Each step that needs
	// the cluster is bounded, so a node stops in a moment even when the
	// cluster does not answer.
	if r.grpc != nil {
		r.grpc.SetServing(false)
	}
	if r.router != nil {
		_ = r.router.Close() // no new connections, on either port
	}
	if r.registry != nil {
		r.registry.Close(ctx)
		timing.done("leases")
	}
	if r.hub != nil {
		r.hub.Close() // ends the event streams, which would hold up a graceful stop
	}
	if r.linkEvents != nil {
		r.linkEvents.Close() // and those of the linked worlds
	}
	if r.stopSuspensionSweep != nil {
		r.stopSuspensionSweep()
	}
	if r.links != nil {
		// The sockets were hijacked from the HTTP server, which no longer
		// sees them: close them first, so the modules reconnect later
		// and their waiting requests fail now.
		r.links.Close(ctx)
		timing.done("links")
	}
	if r.linkEvents != nil {
		// The events the modules sent before they went are stored
		// before relay.db closes.
		_ = r.linkEvents.Drain(ctx)
		timing.done("linkEvents")
	}
	if r.http != nil {
		errs = append(errs, r.http.Shutdown(ctx))
		timing.done("http")
	}
	if r.metricsStop != nil {
		r.metricsStop()
	}
	if r.grpc != nil {
		r.grpc.Stop(ctx)
		timing.done("grpc")
	}
	if r.registry != nil {
		// The calls other nodes forwarded here finish and answer too,
		// before the scripts and worlds they may need close.
		r.registry.StopAnswering(ctx)
		timing.done("forwarded")
	}
	if r.scripts != nil {
		errs = append(errs, r.scripts.Close())
	}
	if r.audit != nil {
		r.audit.Close()
	}
	if r.auditDB != nil {
		errs = append(errs, r.auditDB.Close())
	}
	if r.worlds != nil {
		errs = append(errs, r.worlds.Close())
		timing.done("worlds")
	}
	if r.shared != nil {
		// After the worlds, so that their last events are published;
		// this closes the cluster's key store too.
		errs = append(errs, r.shared.Close())
		timing.done("shared")
	} else if r.keys != nil {
		errs = append(errs, r.keys.Close())
	}
	if r.linkDB != nil {
		errs = append(errs, r.linkDB.Close())
	}
	if r.signinDB != nil {
		errs = append(errs, r.signinDB.Close())
	}
	if r.cluster != nil {
		r.cluster.Close()
		timing.done("cluster")
	}
	if r.log != nil {
		r.log.Info("relay stopped", timing.group("stop"))
	}
	return errors.Join(errs...)
}

// DemoPendingFile, in the data directory, marks a demo world whose files
// may not all be written: it is created before the world and removed once
// the files are in place, so a start after a crash in between (the world
// exists, its files are missing or cut short) writes them again.
const DemoPendingFile = ".demo-files-pending"

// ensureDemoWorld creates the demo world, with its files, when the data
// directory holds no world yet, and finishes writing its files when a
// crash interrupted the first start.
func ensureDemoWorld(ctx context.Context, host *world.Host, dataDir string, log *slog.Logger) error {
	infos, err := host.List(ctx)
	if err != nil {
		return fmt.Errorf("list worlds: %w", err)
	}
	if copies, err := os.ReadDir(filepath.Join(dataDir, "replicas")); err == nil && len(copies) > 0 && len(infos) == 0 {
		// A cluster's node whose worlds are copies it follows (one it
		// hosted moved there when another node took it over): the demo
		// world, if it is among them, comes back when the node takes it
		// back; a new one would be a second world of the same id.
		return nil
	}
	pending := filepath.Join(dataDir, DemoPendingFile)
	_, statErr := os.Stat(pending)
	interrupted := statErr == nil && slices.ContainsFunc(infos, func(i world.Info) bool { return i.ClientID == demo.ClientID })
	if len(infos) > 0 && !interrupted {
		_ = os.Remove(pending)
		return nil
	}
	if !interrupted {
		if err := writeFileSynced(pending, nil); err != nil {
			return fmt.Errorf("create demo world: %w", err)
		}
		seed, err := demo.Seed()
		if err != nil {
			return fmt.Errorf("read demo world: %w", err)
		}
		if _, err := host.Create(ctx, demo.ClientID, seed); err != nil {
			return fmt.Errorf("create demo world: %w", err)
		}
	}
	filesDir := filepath.Join(dataDir, "worlds", demo.ClientID, "files")
	if err := copyFS(filesDir, demo.Files()); err != nil {
		return fmt.Errorf("write demo files: %w", err)
	}
	if err := os.Remove(pending); err != nil {
		return fmt.Errorf("write demo files: %w", err)
	}
	if interrupted {
		log.Info("wrote the demo world's files again after an interrupted first start", "clientId", demo.ClientID)
	} else {
		log.Info("created the demo world", "clientId", demo.ClientID)
	}
	return nil
}

// copyFS writes every file of src under dir, replacing what is there, and
// flushes each to disk.
func copyFS(dir string, src fs.FS) error {
	return fs.WalkDir(src, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(src, path)
		if err != nil {
			return err
		}
		return writeFileSynced(target, data)
	})
}

// writeFileSynced writes a file (mode 0644) and flushes it and its
// directory entry to disk.
func writeFileSynced(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// listeners are the sockets a node serves on, bound before it opens or
// creates anything.
type listeners struct {
	api      net.Listener // Config.Listen
	grpcOnly net.Listener // Config.GRPCListen, or nil
	metrics  net.Listener // Config.MetricsListen, or nil
}

// bindListeners binds every address of cfg, or none: on an error, those
// already bound are closed again, and the error names the setting.
func bindListeners(cfg Config) (*listeners, error) {
	lns := &listeners{}
	var err error
	if lns.api, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen on %s (listen): %w", cfg.Listen, err)
	}
	if cfg.GRPCListen != "" {
		if lns.grpcOnly, err = net.Listen("tcp", cfg.GRPCListen); err != nil {
			lns.close()
			return nil, fmt.Errorf("listen on %s (grpc-listen): %w", cfg.GRPCListen, err)
		}
	}
	if cfg.MetricsListen != "" {
		if lns.metrics, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			lns.close()
			return nil, fmt.Errorf("listen for the metrics on %s (metrics-listen): %w", cfg.MetricsListen, err)
		}
	}
	return lns, nil
}

// close closes every listener that is bound.
func (l *listeners) close() {
	for _, ln := range []net.Listener{l.api, l.grpcOnly, l.metrics} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}
