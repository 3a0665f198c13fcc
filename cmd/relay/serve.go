package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/connroute"
	"github.com/tabletop-relay/relay/console"
	"github.com/tabletop-relay/relay/gateway"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/netlimit"
	"github.com/tabletop-relay/relay/observe"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/dice"
	"github.com/tabletop-relay/relay/world/embedded"
	"github.com/tabletop-relay/relay/world/events"
	"github.com/tabletop-relay/relay/world/files"
	"github.com/tabletop-relay/relay/world/script"
)

// serveConfig is the configuration of `relay serve`.
type serveConfig struct {
	listen string
	// grpcListen, when set, is a second address that serves gRPC only.
	grpcListen    string
	dataDir       string
	demo          bool
	logFormat     string
	logLevel      string
	nodeID        int
	maxBodyBytes  int64 // a REST body or a gRPC message
	scriptTimeout time.Duration
	// scriptMemory and scriptWorkers configure the execute-js worker
	// processes (0: the script package's defaults).
	scriptMemory  int64
	scriptWorkers int
	// maxUploadBytes bounds an uploaded file (0: the server's default).
	maxUploadBytes int64
	// maxDocumentBytes and maxJSONDepth bound what the worlds store (0:
	// the world's defaults).
	maxDocumentBytes int
	maxJSONDepth     int
	// Event streams.
	eventKeepalive     time.Duration
	eventRingSize      int
	eventQueueSize     int
	eventCoalesce      time.Duration
	maxStreamsPerKey   int
	maxStreamsPerWorld int
	// Hostile input: per-key rate limit, query size, unary time-out.
	rateLimit      int
	rateLimitBurst int
	// authFailureLimit bounds the failed authentications of one client
	// address a minute.
	authFailureLimit int
	maxQueryBytes    int
	requestTimeout   time.Duration
	// Slow and idle clients (see package netlimit): header, body, idle
	// and write stall time-outs, the minimum body rate, and the caps on
	// open connections. Zero turns each off.
	readHeaderTimeout time.Duration
	bodyReadTimeout   time.Duration
	bodyMinRate       int
	idleTimeout       time.Duration
	writeStallTimeout time.Duration
	maxConns          int
	maxConnsPerIP     int
	// pprofListen, when set, serves Go's profiling handlers there.
	pprofListen string
	// diceSeed, when not 0, makes every roll repeat from run to run.
	diceSeed uint64
	// gogc is the garbage collector's target percentage (Go's GOGC).
	gogc int
	// Linked worlds (package link): the relay's public address for the
	// module, the socket's time-outs and bounds, and the pairing attempts
	// one address may make a minute.
	publicURL           string
	linkAuthTimeout     time.Duration
	linkReplyTimeout    time.Duration
	linkPingInterval    time.Duration
	linkMaxMessageBytes int64
	linkMaxPending      int
	pairRateLimit       int
	// In a browser: the origins whose pages may call the API (a comma-
	// separated list, see gateway.ParseCORSOrigins) and whether the web
	// console is served at /console.
	corsOrigins string
	console     bool
	// metricsListen, when set, serves the Prometheus metrics at /metrics
	// on this separate address.
	metricsListen string
	// cluster joins a cluster of relay nodes (cluster_flags.go); its zero
	// value is a relay alone, without NATS.
	cluster cluster.Config
}

func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", envOr("RELAY_LISTEN", "127.0.0.1:8080"), "address for REST, SSE and gRPC (h2c) `host:port`: each connection goes to gRPC's own transport or to the HTTP server by its first request (RELAY_LISTEN)")
	fs.StringVar(&c.grpcListen, "grpc-listen", envOr("RELAY_GRPC_LISTEN", ""), "also serve gRPC (h2c) alone on this `host:port`, for clients and proxies that want a port of its own; off when empty (RELAY_GRPC_LISTEN)")
	fs.StringVar(&c.dataDir, "data", envOr("RELAY_DATA", "./data"), "data `directory`: relay.db, admin.key and worlds/ (RELAY_DATA)")
	fs.BoolVar(&c.demo, "demo", envBool("RELAY_DEMO", true), "create the demo world (clientId demo) when the data directory has no world (RELAY_DEMO)")
	fs.StringVar(&c.logFormat, "log-format", envOr("RELAY_LOG_FORMAT", "auto"), "log `format`: auto (text on a terminal, else JSON), text or json (RELAY_LOG_FORMAT)")
	fs.StringVar(&c.logLevel, "log-level", envOr("RELAY_LOG_LEVEL", "info"), "log `level`: debug, info, warn or error (RELAY_LOG_LEVEL)")
	fs.IntVar(&c.nodeID, "node-id", envInt("RELAY_NODE_ID", -1), "`number` (0-999999) that keeps request ids unique across relays; random when negative (RELAY_NODE_ID)")
	fs.Int64Var(&c.maxBodyBytes, "max-body-bytes", int64(envInt("RELAY_MAX_BODY_BYTES", server.DefaultMaxMessageBytes)), "largest request in `bytes`, at least 4096: a REST body (uploads have their own limit) or a gRPC message (each chunk of an upload too); larger ones get 413, over gRPC RESOURCE_EXHAUSTED (RELAY_MAX_BODY_BYTES)")
	fs.IntVar(&c.maxDocumentBytes, "max-document-bytes", envInt("RELAY_MAX_DOCUMENT_BYTES", world.DefaultMaxDocumentBytes), "largest document a world stores, in `bytes` of JSON with its embedded documents; a write that would make one larger gets 413 (RELAY_MAX_DOCUMENT_BYTES)")
	fs.IntVar(&c.maxJSONDepth, "max-json-depth", envInt("RELAY_MAX_JSON_DEPTH", world.DefaultMaxDepth), "deepest nesting of objects and arrays, in `levels`, in a value written to a world (update and create data, token matches; dotted update keys count); deeper ones get 400 (RELAY_MAX_JSON_DEPTH)")
	fs.Int64Var(&c.maxUploadBytes, "max-upload-bytes", int64(envInt("RELAY_MAX_UPLOAD_BYTES", server.DefaultMaxUploadBytes)), "largest uploaded file in `bytes`; larger ones get 413 (RELAY_MAX_UPLOAD_BYTES)")
	fs.DurationVar(&c.scriptTimeout, "script-timeout", envDuration("RELAY_SCRIPT_TIMEOUT", 5*time.Second), "time limit of an execute-js script, which then gets 504; a script stuck inside a built-in has its worker process killed "+script.KillGrace.String()+" later (RELAY_SCRIPT_TIMEOUT)")
	fs.Int64Var(&c.scriptMemory, "script-memory", int64(envInt("RELAY_SCRIPT_MEMORY", script.DefaultWorkerMemoryBytes)), "memory an execute-js script may use, in `bytes`: its worker process cannot grow past its start-up size plus this, and the script gets 400 (RELAY_SCRIPT_MEMORY)")
	fs.IntVar(&c.scriptWorkers, "script-workers", envInt("RELAY_SCRIPT_WORKERS", script.DefaultWorkers), "how many execute-js `scripts` may run at once, each in a worker process of its own; more wait up to --script-timeout, then get 503 (RELAY_SCRIPT_WORKERS)")
	fs.DurationVar(&c.eventKeepalive, "event-keepalive", envDuration("RELAY_EVENT_KEEPALIVE", 15*time.Second), "longest silence on an event stream before a keepalive comment (RELAY_EVENT_KEEPALIVE)")
	fs.IntVar(&c.eventRingSize, "event-ring-size", envInt("RELAY_EVENT_RING_SIZE", events.DefaultRingSize), "`events` each world keeps for resuming streams (RELAY_EVENT_RING_SIZE)")
	fs.DurationVar(&c.eventCoalesce, "event-coalesce", envDuration("RELAY_EVENT_COALESCE", events.DefaultCoalesce), "how long events gather before they are fanned out, so each stream writes them together (RELAY_EVENT_COALESCE; 0: at once)")
	fs.IntVar(&c.eventQueueSize, "event-queue-size", envInt("RELAY_EVENT_QUEUE_SIZE", events.DefaultQueueSize), "`events` a stream may fall behind before it is closed with an overflow event (RELAY_EVENT_QUEUE_SIZE)")
	fs.IntVar(&c.maxStreamsPerKey, "max-streams-per-key", envInt("RELAY_MAX_STREAMS_PER_KEY", server.DefaultMaxStreamsPerKey), "open event streams allowed per API key; more get 429 (RELAY_MAX_STREAMS_PER_KEY)")
	fs.IntVar(&c.maxStreamsPerWorld, "max-streams-per-world", envInt("RELAY_MAX_STREAMS_PER_WORLD", server.DefaultMaxStreamsPerWorld), "open event streams allowed per world; more get 429 (RELAY_MAX_STREAMS_PER_WORLD)")
	fs.IntVar(&c.rateLimit, "rate-limit", envInt("RELAY_RATE_LIMIT", 0), "`requests` per minute per API key (a stream counts once, when opened); more get 429 with Retry-After; 0 turns the limit off (RELAY_RATE_LIMIT)")
	fs.IntVar(&c.rateLimitBurst, "rate-limit-burst", envInt("RELAY_RATE_LIMIT_BURST", 0), "`requests` a key may send at once before --rate-limit paces it; 0 means one minute's worth (RELAY_RATE_LIMIT_BURST)")
	fs.IntVar(&c.authFailureLimit, "auth-failure-limit", envInt("RELAY_AUTH_FAILURE_LIMIT", server.DefaultAuthFailuresPerMinute), "`requests` per minute from one client address that may fail authentication (no, bad or revoked key) with 401; more get 429 with Retry-After; 0 turns the limit off (RELAY_AUTH_FAILURE_LIMIT)")
	fs.IntVar(&c.maxQueryBytes, "max-query-bytes", envInt("RELAY_MAX_QUERY_BYTES", gateway.DefaultMaxQueryBytes), "longest query string in `bytes`; longer ones get 414 (RELAY_MAX_QUERY_BYTES)")
	fs.Uint64Var(&c.diceSeed, "dice-seed", uint64(envInt("RELAY_DICE_SEED", 0)), "seed every dice roll from this `number`, so that a run repeats its rolls (demos, tests); 0 rolls with the operating system's randomness (RELAY_DICE_SEED)")
	fs.IntVar(&c.gogc, "gogc", envInt("RELAY_GOGC", envInt("GOGC", defaultGOGC)), "the garbage collector's target `percent`: the heap may grow by this much of what it holds live before a collection (Go's GOGC, whose own default is 100); higher spends less CPU on collections for more memory; GOGC sets it too when RELAY_GOGC does not (RELAY_GOGC)")
	fs.StringVar(&c.metricsListen, "metrics-listen", envOr("RELAY_METRICS_LISTEN", ""), "serve Prometheus metrics at /metrics on this separate `host:port`, without authentication (requests, latencies, streams, events, worlds, commits, refusals, linked worlds); off when empty; keep it on a private network (RELAY_METRICS_LISTEN)")
	fs.StringVar(&c.pprofListen, "pprof", envOr("RELAY_PPROF", ""), "serve Go's profiler (/debug/pprof/) on this separate `host:port`, for measuring; off when empty; never expose it (RELAY_PPROF)")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", envDuration("RELAY_READ_HEADER_TIMEOUT", defaultReadHeaderTimeout), "time a client has to send a request's headers once it starts them (on a new connection, from the moment it opens; an h2c connection must send its preface and its first request's headers within it, and a gRPC-only connection its preface); 0 turns it off (RELAY_READ_HEADER_TIMEOUT)")
	fs.DurationVar(&c.bodyReadTimeout, "body-read-timeout", envDuration("RELAY_BODY_READ_TIMEOUT", netlimit.DefaultBodyReadTimeout), "time allowance of a request body: the body must keep arriving at --body-min-rate and may pause for at most this long; a body that falls behind is cut off and its connection closed; a gRPC message on gRPC's own transport must arrive whole within this plus the time --max-body-bytes takes at --body-min-rate, else its call ends with DEADLINE_EXCEEDED; 0 turns it off (RELAY_BODY_READ_TIMEOUT)")
	fs.IntVar(&c.bodyMinRate, "body-min-rate", envInt("RELAY_BODY_MIN_RATE", netlimit.DefaultBodyMinRate), "`bytes` per second a request body must average: each byte received extends the body's read deadline by 1/rate seconds, up to --body-read-timeout ahead; 0: the whole body must arrive within --body-read-timeout (RELAY_BODY_MIN_RATE)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", envDuration("RELAY_IDLE_TIMEOUT", defaultIdleTimeout), "how long an idle keep-alive connection stays open (HTTP/1.1 between requests, HTTP/2 with no open stream); 0 turns it off (RELAY_IDLE_TIMEOUT)")
	fs.DurationVar(&c.writeStallTimeout, "write-stall-timeout", envDuration("RELAY_WRITE_STALL_TIMEOUT", netlimit.DefaultWriteStallTimeout), "longest a write to a client may make no progress (a client that stops reading its answer or event stream) before its connection is closed; 0 turns it off (RELAY_WRITE_STALL_TIMEOUT)")
	fs.IntVar(&c.maxConns, "max-conns", envInt("RELAY_MAX_CONNS", netlimit.DefaultMaxConns()), "`connections` open at once, overall; more are refused at once with 503 and Retry-After; the default is three quarters of the process's open-file limit; 0 turns the cap off (RELAY_MAX_CONNS)")
	fs.IntVar(&c.maxConnsPerIP, "max-conns-per-ip", envInt("RELAY_MAX_CONNS_PER_IP", netlimit.DefaultMaxConnsPerIP), "`connections` open at once from one client address (an IPv4 address or an IPv6 /64); more are refused with 503 and Retry-After; behind a reverse proxy every client has the proxy's address: raise it or set 0 (off) there (RELAY_MAX_CONNS_PER_IP)")
	fs.StringVar(&c.publicURL, "public-url", envOr("RELAY_PUBLIC_URL", ""), "the relay's address as tabletops reach it, such as https://relay.example.org; a pairing tells the module to connect to its /relay (wss://relay.example.org/relay); empty: the address the pairing request came to (set it behind a TLS proxy) (RELAY_PUBLIC_URL)")
	fs.DurationVar(&c.linkAuthTimeout, "link-auth-timeout", envDuration("RELAY_LINK_AUTH_TIMEOUT", link.DefaultAuthTimeout), "time a tabletop has to send its auth message once its /relay socket is open; it is then closed with 4002 (RELAY_LINK_AUTH_TIMEOUT)")
	fs.DurationVar(&c.linkReplyTimeout, "link-reply-timeout", envDuration("RELAY_LINK_REPLY_TIMEOUT", link.DefaultReplyTimeout), "time a linked world has to answer a request, which then gets 504 (RELAY_LINK_REPLY_TIMEOUT)")
	fs.DurationVar(&c.linkPingInterval, "link-ping-interval", envDuration("RELAY_LINK_PING_INTERVAL", link.DefaultPingInterval), "how often the relay pings each linked world's socket; a ping without an answer within the interval closes the socket and fails its requests with 503 (RELAY_LINK_PING_INTERVAL)")
	fs.Int64Var(&c.linkMaxMessageBytes, "link-max-message-bytes", int64(envInt("RELAY_LINK_MAX_MESSAGE_BYTES", link.DefaultMaxMessageBytes)), "largest message a linked world may send, in `bytes` (a downloaded file arrives as one message, in base64); a larger one closes its socket with 1009 (RELAY_LINK_MAX_MESSAGE_BYTES)")
	fs.IntVar(&c.linkMaxPending, "link-max-pending", envInt("RELAY_LINK_MAX_PENDING", link.DefaultMaxPending), "`requests` in flight at once to one linked world; more get 503 at once (RELAY_LINK_MAX_PENDING)")
	fs.IntVar(&c.pairRateLimit, "pair-rate-limit", envInt("RELAY_PAIR_RATE_LIMIT", defaultPairRateLimit), "pairing `attempts` (POST /auth/pair, good or bad) per minute from one client address; more get 429 with Retry-After; 0 turns the limit off (RELAY_PAIR_RATE_LIMIT)")
	fs.StringVar(&c.corsOrigins, "cors-origins", envOr("RELAY_CORS_ORIGINS", ""), "comma-separated `origins` (scheme://host[:port], or * for all) whose web pages may call the API, event streams included, from a browser; none when empty, and same-origin pages (the console) need none (RELAY_CORS_ORIGINS)")
	fs.BoolVar(&c.console, "console", envBool("RELAY_CONSOLE", true), "serve the web console at /console: sign in with an API key, worlds, pairing codes, keys and live events (RELAY_CONSOLE)")
	clusterFlags(fs, &c.cluster)
	fs.DurationVar(&c.requestTimeout, "request-timeout", envDuration("RELAY_REQUEST_TIMEOUT", 30*time.Second), "time limit of a REST call, which then gets 504; event streams and file transfers are not limited; 0 turns it off (RELAY_REQUEST_TIMEOUT)")
}

// Defaults of the http.Server's own time-outs.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultIdleTimeout       = 60 * time.Second
)

// Lower bounds of the size limits: below them ordinary requests (an
// upload's first message with its path, a document with its stamps)
// could not fit.
const (
	minBodyBytes     = 4 << 10
	minDocumentBytes = 1 << 10
	minJSONDepth     = 8
)

// check refuses settings that make no sense: negative time-outs and caps,
// and limits too small for the relay to work with.
func (c *serveConfig) check() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"read-header-timeout", c.readHeaderTimeout}, {"body-read-timeout", c.bodyReadTimeout}, {"idle-timeout", c.idleTimeout}, {"write-stall-timeout", c.writeStallTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("--%s must not be negative (0 turns it off), not %v", d.flag, d.v)
		}
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"body-min-rate", c.bodyMinRate}, {"max-conns", c.maxConns}, {"max-conns-per-ip", c.maxConnsPerIP}} {
		if n.v < 0 {
			return fmt.Errorf("--%s must not be negative (0 turns it off), not %d", n.flag, n.v)
		}
	}
	switch {
	case c.gogc < 1:
		return fmt.Errorf("--gogc must be a positive percentage, not %d", c.gogc)
	case c.maxBodyBytes < minBodyBytes:
		return fmt.Errorf("--max-body-bytes must be at least %d", minBodyBytes)
	case c.maxDocumentBytes < minDocumentBytes:
		return fmt.Errorf("--max-document-bytes must be at least %d", minDocumentBytes)
	case c.maxJSONDepth < minJSONDepth:
		return fmt.Errorf("--max-json-depth must be at least %d", minJSONDepth)
	}
	if _, err := gateway.ParseCORSOrigins(c.corsOrigins); err != nil {
		return fmt.Errorf("--cors-origins: %w", err)
	}
	return c.cluster.Check()
}

func serveCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("relay serve", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cfg serveConfig
	cfg.flags(fset)
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay serve [flags]\n\nStarts the relay: REST, Server-Sent Events and gRPC (h2c) on one address.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fset.Arg(0))}
	}
	if err := cfg.check(); err != nil {
		return usageError{err.Error()}
	}
	log, logBuf, err := newLogger(cfg.logFormat, cfg.logLevel, stderr)
	if err != nil {
		return usageError{err.Error()}
	}
	defer logBuf.Close()
	// Every REST read allocates its answer (a large actor is tens of
	// kilobytes) over a small live heap, so Go's default target collects
	// very often, and each collection also shrinks the stacks of the
	// connections' goroutines, which grow again on their next request.
	// Measured under relay-bench, 400 takes about 15% of the CPU off each
	// read, update and rest for a larger heap (README, Configuration).
	debug.SetGCPercent(cfg.gogc)
	r, err := startRelay(ctx, cfg, log, stdout)
	if err != nil {
		return err
	}
	if cfg.pprofListen != "" {
		stop, err := serveProfiler(cfg.pprofListen, log)
		if err != nil {
			_ = r.close(context.Background())
			return err
		}
		defer stop()
	}
	<-ctx.Done()
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return r.close(shutdownCtx)
}

// relay is a running relay: its listeners, servers and stores.
type relay struct {
	addr string
	// grpcAddr is the address of the gRPC-only port, when there is one.
	grpcAddr string
	router   *connroute.Router
	http     *http.Server
	conns    *netlimit.Listener
	bodies   *netlimit.BodyGuard
	grpc     *server.Server
	keys     *keys.Store
	worlds   *world.Host
	hub      *events.Hub
	scripts  *script.Pool
	links    *link.Service
	linkDB   *link.SQLiteStore
	// node is the relay's membership of a cluster, registry its world
	// registry; nil for a relay alone.
	node          *cluster.Node
	registry      *cluster.Registry
	clusterWiring clusterWiring
	served        chan error
	log           *slog.Logger
	adminKey      string
	// metrics is nil unless --metrics-listen is set; metricsStop stops
	// its server.
	metrics     *observe.Metrics
	metricsAddr string
	metricsStop func()

	closeOnce sync.Once
	closeErr  error
}

// startRelay opens the stores, creates the demo world and admin key on
// first start, and starts serving. It returns once the relay accepts
// requests.
func startRelay(ctx context.Context, cfg serveConfig, log *slog.Logger, stdout io.Writer) (*relay, error) {
	if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	keyStore, err := keys.Open(filepath.Join(cfg.dataDir, "relay.db"), time.Now)
	if err != nil {
		return nil, fmt.Errorf("open key store: %w", err)
	}
	r := &relay{keys: keyStore, log: log, served: make(chan error, 1)}
	if cfg.metricsListen != "" {
		r.metrics = observe.NewMetrics()
	}
	fail := func(err error) (*relay, error) {
		_ = r.close(context.Background())
		return nil, err
	}
	// The event hub numbers and stores each transaction's events in the
	// transaction (as the worlds' journal), then publishes them once
	// committed (as a host listener).
	r.hub = events.New(events.Options{RingSize: cfg.eventRingSize, QueueSize: cfg.eventQueueSize, Coalesce: cfg.eventCoalesce})
	limits := world.Limits{MaxDocumentBytes: cfg.maxDocumentBytes, MaxDepth: cfg.maxJSONDepth}
	worldOpts := world.Options{Journal: r.hub, Limits: limits}
	if r.metrics != nil {
		worldOpts.ObserveCommit = r.metrics.ObserveCommit
	}
	if r.worlds, err = world.OpenHost(cfg.dataDir, worldOpts); err != nil {
		return fail(fmt.Errorf("open worlds: %w", err))
	}
	r.worlds.Watch(r.hub.Committed)
	// Uploads cut short by a crash leave temporary files behind; nothing
	// is writing yet, so every one of them is abandoned.
	if n, err := files.RemoveTemporaryAll(cfg.dataDir); err != nil {
		log.Warn("could not remove the temporary files of unfinished uploads", "error", err)
	} else if n > 0 {
		log.Info("removed the temporary files of unfinished uploads", "files", n)
	}
	// JSON uploads whose file comes before its name wait in the spool; any
	// left there was cut short by a stop.
	spoolDir := filepath.Join(cfg.dataDir, "spool")
	if err := os.RemoveAll(spoolDir); err != nil {
		return fail(fmt.Errorf("clear the upload spool: %w", err))
	}
	if err := os.MkdirAll(spoolDir, 0o700); err != nil {
		return fail(fmt.Errorf("create the upload spool: %w", err))
	}
	if cfg.cluster.Enabled() {
		ccfg := cfg.cluster
		ccfg.DataDir = cfg.dataDir
		if r.node, err = cluster.Start(ctx, ccfg, log); err != nil {
			return fail(err)
		}
	}
	if cfg.demo {
		if err := ensureDemoWorld(ctx, r.worlds, cfg.dataDir, log); err != nil {
			return fail(err)
		}
	}
	adminFile := filepath.Join(cfg.dataDir, "admin.key")
	plaintext, created, err := keyStore.Bootstrap(ctx, adminFile)
	if err != nil {
		return fail(fmt.Errorf("create admin key: %w", err))
	}
	if created {
		r.adminKey = plaintext
		fmt.Fprintf(stdout, "Created the admin API key (every scope); it is shown only this once and saved in %s:\n%s\n", adminFile, plaintext)
	}

	if r.scripts, err = script.NewPool(script.PoolOptions{Workers: cfg.scriptWorkers, MemoryBytes: cfg.scriptMemory}); err != nil {
		return fail(usageError{err.Error()})
	}

	ids := server.NewRequestIDs(cfg.nodeID, nil)
	var rolls dice.Source // nil: the server rolls with real randomness
	if cfg.diceSeed != 0 {
		rolls = dice.NewSeeded(cfg.diceSeed)
	}
	// The services reach the worlds through the registry of the embedded
	// worlds: the engines of the data directory with the rules, the event
	// hub, the file areas and the script pool applied to them.
	worlds := embedded.NewRegistry(r.worlds, embedded.Options{
		// Each world's file area is <data>/worlds/<clientId>/files.
		DataDir: cfg.dataDir,
		Hub:     r.hub,
		Dice:    rolls,
		Scripts: r.scripts,
	})
	// Failed authentications count against an address the same whether
	// they presented an API key or a tabletop's connection token.
	authFailures := server.NewRateLimiter(cfg.authFailureLimit, 0, nil)
	pairAttempts := server.NewRateLimiter(cfg.pairRateLimit, 0, nil)
	rateLimit := server.NewRateLimiter(cfg.rateLimit, cfg.rateLimitBurst, nil)
	if r.linkDB, err = link.OpenSQLite(filepath.Join(cfg.dataDir, "relay.db")); err != nil {
		return fail(fmt.Errorf("open linked worlds: %w", err))
	}
	// Linked worlds' events get their ids and subscribers here; the hub
	// hands every event message to it.
	linkEvents := link.NewEvents()
	var onConnect func(link.ConnInfo)
	var onDisconnect func(string)
	if r.node != nil {
		onConnect, onDisconnect = r.clusterWiring.linkHooks()
	}
	if r.links, err = link.New(link.Config{
		Store: r.linkDB,
		// A new linked world never takes the id of an embedded one.
		Taken: func(clientID string) bool {
			ids, err := r.worlds.IDs(context.Background())
			return err != nil || slices.Contains(ids, clientID)
		},
		PublicURL:    cfg.publicURL,
		AuthTimeout:  cfg.linkAuthTimeout,
		AuthFailures: authFailures,
		PairAttempts: pairAttempts,
		Hub: link.HubOptions{
			ReplyTimeout:    cfg.linkReplyTimeout,
			PingInterval:    cfg.linkPingInterval,
			MaxMessageBytes: cfg.linkMaxMessageBytes,
			MaxPending:      cfg.linkMaxPending,
			OnEvent:         linkEvents.Publish,
			OnConnect:       onConnect,
			OnDisconnect:    onDisconnect,
		},
		Log: log,
	}); err != nil {
		return fail(usageError{err.Error()})
	}
	linkEvents.SetHub(r.links.Hub())
	// Embedded worlds first, then the linked ones; in a cluster, the
	// registry of the whole cluster in front of them.
	var allWorlds server.Worlds = link.NewRegistry(worlds, r.links, linkEvents)
	if r.node != nil {
		if r.registry, err = r.clusterWiring.startRegistry(ctx, r.node, allWorlds, r.worlds); err != nil {
			return fail(err)
		}
		allWorlds = r.registry
	}
	if r.grpc, err = server.New(server.Config{
		Keys:          keyStore,
		Worlds:        allWorlds,
		Links:         worldLinks{r.links},
		RequestIDs:    ids,
		Log:           log,
		ScriptTimeout: cfg.scriptTimeout,
		// One request size limit for both transports: the gateway bounds
		// REST bodies with it, the gRPC server every message.
		MaxMessageBytes: int(cfg.maxBodyBytes),
		MaxUploadBytes:  cfg.maxUploadBytes,
		RateLimit:       rateLimit,
		AuthFailures:    authFailures,
		// The network gRPC transport's share of the slow and idle client
		// limits; the connection caps and the write stall guard apply to
		// its connections through the listener.
		IdleTimeout:      cfg.idleTimeout,
		HandshakeTimeout: cfg.readHeaderTimeout,
		RecvTimeout:      cfg.bodyReadTimeout,
		RecvMinRate:      cfg.bodyMinRate,
		Metrics:          r.metrics,
		Events: server.EventsConfig{
			MaxStreamsPerKey:   cfg.maxStreamsPerKey,
			MaxStreamsPerWorld: cfg.maxStreamsPerWorld,
			QueueSize:          cfg.eventQueueSize,
		},
	}); err != nil {
		return fail(err)
	}
	corsOrigins, err := gateway.ParseCORSOrigins(cfg.corsOrigins)
	if err != nil {
		return fail(fmt.Errorf("--cors-origins: %w", err))
	}
	// The gateway calls the services through the server's in-process
	// connection, unary calls and streams alike: REST calls pass the same
	// interceptors as gRPC calls, without a network hop.
	rest, err := gateway.New(ctx, r.grpc.Local, gateway.Options{CORSOrigins: corsOrigins, NewRequestID: ids.New, Build: buildInfo(), MaxBodyBytes: cfg.maxBodyBytes, KeepaliveInterval: cfg.eventKeepalive, MaxUploadBytes: cfg.maxUploadBytes,
		MaxQueryBytes: cfg.maxQueryBytes, UnaryTimeout: cfg.requestTimeout, SpoolDir: spoolDir,
		Admit: func(ctx context.Context, method, apiKey, ticket, remoteAddr string) error {
			return r.grpc.Admit(ctx, method, server.Credentials{APIKey: apiKey, Ticket: ticket}, remoteAddr)
		}})
	if err != nil {
		return fail(err)
	}

	// The web console's static files sit beside the API, outside its
	// admission: they hold nothing, and every call the console makes is an
	// API call like any other.
	web := rest
	if cfg.console {
		web = console.Handler(rest)
	}

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", cfg.listen, err))
	}
	r.addr = ln.Addr().String()
	var grpcOnly net.Listener
	if cfg.grpcListen != "" {
		if grpcOnly, err = net.Listen("tcp", cfg.grpcListen); err != nil {
			_ = ln.Close()
			return fail(fmt.Errorf("listen on %s: %w", cfg.grpcListen, err))
		}
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
		MaxConns:          cfg.maxConns,
		MaxConnsPerIP:     cfg.maxConnsPerIP,
		WriteStallTimeout: cfg.writeStallTimeout,
		NewRequestID:      ids.New,
		Log:               log,
	})
	// Each connection of the shared port goes to gRPC's own transport or
	// to the HTTP server by its first request (package connroute); those
	// of the gRPC-only port go to gRPC unseen.
	routeCfg := connroute.Config{HeaderTimeout: cfg.readHeaderTimeout, Log: log}
	if grpcOnly != nil {
		routeCfg.Direct = func(c net.Conn) bool { return connroute.SameAddr(c.LocalAddr(), grpcOnly.Addr()) }
	}
	r.router = connroute.New(r.conns, routeCfg)
	r.bodies = &netlimit.BodyGuard{Timeout: cfg.bodyReadTimeout, MinRate: cfg.bodyMinRate, Log: log}
	// The access middleware logs and counts every HTTP request (gRPC-native
	// calls pass it untouched: the interceptor chain logs and counts them).
	access := observe.AccessOptions{Log: log, Metrics: r.metrics, Routes: []string{"/healthz", "/docs", "/openapi.json", "/console"}, Label: linkRoute}
	r.http = &http.Server{
		Handler:           r.bodies.Wrap(observe.Access(routeLinks(r.links.Handler(), splitGRPC(r.grpc, web)), access)),
		ReadHeaderTimeout: cfg.readHeaderTimeout,
		IdleTimeout:       cfg.idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// REST clients speak HTTP/1.1 or HTTP/2 without TLS (h2c).
	r.http.Protocols = new(http.Protocols)
	r.http.Protocols.SetHTTP1(true)
	r.http.Protocols.SetUnencryptedHTTP2(true)
	go func() { r.served <- r.http.Serve(r.router.HTTP()) }()
	go func() { _ = r.grpc.Serve(r.router.GRPC()) }()
	if r.metrics != nil {
		r.registerMetrics(rateLimit, authFailures, pairAttempts)
		if r.metricsAddr, r.metricsStop, err = serveMetrics(cfg.metricsListen, r.metrics, log); err != nil {
			return fail(err)
		}
	}
	r.clusterWiring.server.Store(r.grpc)
	r.grpc.SetServing(true)
	log.Info("relay ready", "addr", r.addr, "grpcAddr", r.grpcAddr, "data", cfg.dataDir, "version", buildInfo().Version)
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
// `/api/self-unpair`, `/api/clients/{clientId}/active`) to the link
// service and everything else on. They are not routes of the API's
// contract: they authenticate by pairing code or connection token, never
// by API key, so the gateway's admission must not see them.
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

func (l worldLinks) CreatePairingCode(ctx context.Context, clientID, createdBy string) (server.PairingCode, error) {
	code, c, err := l.s.CreatePairingCode(ctx, clientID, createdBy)
	if err != nil {
		return server.PairingCode{}, err
	}
	return server.PairingCode{Code: code, ClientID: c.ClientID, ExpiresAt: c.ExpiresAt}, nil
}

func (l worldLinks) Unpair(ctx context.Context, clientID string) (server.Unpaired, error) {
	n, closed, err := l.s.Unpair(ctx, clientID)
	return server.Unpaired{RevokedTokens: n, Disconnected: closed}, err
}

// close stops serving and closes the stores; later calls return the first
// call's result.
func (r *relay) close(ctx context.Context) error {
	r.closeOnce.Do(func() { r.closeErr = r.shutdown(ctx) })
	return r.closeErr
}

func (r *relay) shutdown(ctx context.Context) error {
	var errs []error
	if r.grpc != nil {
		r.grpc.SetServing(false)
	}
	if r.registry != nil {
		// The other nodes answer 503 for this node's worlds at once.
		r.registry.Close(ctx)
	}
	if r.hub != nil {
		r.hub.Close() // ends the event streams, which would hold up a graceful stop
	}
	if r.router != nil {
		_ = r.router.Close() // no new connections, on either port
	}
	if r.links != nil {
		// The sockets were hijacked from the HTTP server, which no longer
		// sees them: close them first, so the modules reconnect later
		// and their waiting requests fail now.
		r.links.Close(ctx)
	}
	if r.http != nil {
		errs = append(errs, r.http.Shutdown(ctx))
	}
	if r.metricsStop != nil {
		r.metricsStop()
	}
	if r.grpc != nil {
		r.grpc.Stop(ctx)
	}
	if r.scripts != nil {
		errs = append(errs, r.scripts.Close())
	}
	if r.worlds != nil {
		errs = append(errs, r.worlds.Close())
	}
	if r.keys != nil {
		errs = append(errs, r.keys.Close())
	}
	if r.linkDB != nil {
		errs = append(errs, r.linkDB.Close())
	}
	if r.node != nil {
		r.node.Close()
	}
	return errors.Join(errs...)
}

// demoPendingFile, in the data directory, marks a demo world whose files
// may not all be written: it is created before the world and removed once
// the files are in place, so a start after a crash in between (the world
// exists, its files are missing or cut short) writes them again.
const demoPendingFile = ".demo-files-pending"

// ensureDemoWorld creates the demo world, with its files, when the data
// directory holds no world yet, and finishes writing its files when a
// crash interrupted the first start.
func ensureDemoWorld(ctx context.Context, host *world.Host, dataDir string, log *slog.Logger) error {
	infos, err := host.List(ctx)
	if err != nil {
		return fmt.Errorf("list worlds: %w", err)
	}
	pending := filepath.Join(dataDir, demoPendingFile)
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

// newLogger builds the slog logger: text on a terminal, JSON otherwise,
// written through a logBuffer. The caller must Close the buffer once the
// logger is no longer used.
func newLogger(format, level string, w io.Writer) (*slog.Logger, *logBuffer, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	text := false
	switch format {
	case "auto":
		f, ok := w.(*os.File)
		text = ok && term.IsTerminal(int(f.Fd()))
	case "text":
		text = true
	case "json":
	default:
		return nil, nil, fmt.Errorf("--log-format must be auto, text or json, not %q", format)
	}
	buf := newLogBuffer(w, logFlushInterval)
	var h slog.Handler = slog.NewJSONHandler(buf, opts)
	if text {
		h = slog.NewTextHandler(buf, opts)
	}
	return slog.New(flushingHandler{Handler: h, buf: buf}), buf, nil
}

// defaultPairRateLimit is how many pairing attempts one address may make a
// minute: a game master who mistypes a code a few times never meets it,
// while guessing one of 887 million codes at this pace is hopeless.
const defaultPairRateLimit = 10

// defaultGOGC is the garbage collector's target when neither --gogc,
// RELAY_GOGC nor GOGC sets one.
const defaultGOGC = 400

// logFlushInterval is how long Info lines may wait in the log buffer.
const logFlushInterval = 50 * time.Millisecond

// envBool reads a boolean environment variable, or def.
func envBool(name string, def bool) bool {
	if v, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// envInt reads an integer environment variable, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// envDuration reads a duration environment variable, or def.
func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
