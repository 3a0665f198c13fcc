package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"golang.org/x/term"

	"github.com/tabletop-relay/relay/gateway"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/world/script"
)

// serveConfig is the configuration of `relay serve`: the relay node's,
// and what only the process as a whole has (its logger, garbage collector
// and profiler).
type serveConfig struct {
	node.Config
	logFormat string
	logLevel  string
	// pprofListen, when set, serves Go's profiling handlers there.
	pprofListen string
	// gogc is the garbage collector's target percentage (Go's GOGC).
	gogc int
}

// flags registers the flags of `relay serve` with node.DefaultConfig's
// values; applySettings then fills in those the command line left unset
// from their RELAY_* variables and the configuration file.
func (c *serveConfig) flags(fs *flag.FlagSet) {
	d := node.DefaultConfig()
	fs.StringVar(&c.Listen, "listen", d.Listen, "address for REST, SSE and gRPC (h2c) `host:port`: each connection goes to gRPC's own transport or to the HTTP server by its first request (RELAY_LISTEN)")
	fs.StringVar(&c.GRPCListen, "grpc-listen", d.GRPCListen, "also serve gRPC (h2c) alone on this `host:port`, for clients and proxies that want a port of its own; off when empty (RELAY_GRPC_LISTEN)")
	fs.StringVar(&c.DataDir, "data", d.DataDir, "data `directory`: relay.db, admin.key and worlds/ (RELAY_DATA)")
	fs.BoolVar(&c.Demo, "demo", d.Demo, "create the demo world (clientId demo) when the data directory has no world (RELAY_DEMO)")
	fs.StringVar(&c.logFormat, "log-format", "auto", "log `format`: auto (text on a terminal, else JSON), text or json (RELAY_LOG_FORMAT)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `level`: debug, info, warn or error (RELAY_LOG_LEVEL)")
	fs.IntVar(&c.NodeID, "node-id", d.NodeID, "`number` (0-999999) that keeps request ids unique across relays; random when negative (RELAY_NODE_ID)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", d.MaxBodyBytes, "largest request in `bytes`, at least 4096: a REST body (uploads have their own limit) or a gRPC message (each chunk of an upload too); larger ones get 413, over gRPC RESOURCE_EXHAUSTED (RELAY_MAX_BODY_BYTES)")
	fs.IntVar(&c.MaxDocumentBytes, "max-document-bytes", d.MaxDocumentBytes, "largest document a world stores, in `bytes` of JSON with its embedded documents; a write that would make one larger gets 413 (RELAY_MAX_DOCUMENT_BYTES)")
	fs.IntVar(&c.MaxJSONDepth, "max-json-depth", d.MaxJSONDepth, "deepest nesting of objects and arrays, in `levels`, in a value written to a world (update and create data, token matches; dotted update keys count); deeper ones get 400 (RELAY_MAX_JSON_DEPTH)")
	fs.DurationVar(&c.CommitDelay, "commit-delay", d.CommitDelay, "longest a write waits for concurrent writes to join its group commit (one SQLite transaction and fsync for all of them), which costs less CPU per write the more it carries; only when writes are concurrent, a lone writer never waits; 0 writes at once (RELAY_COMMIT_DELAY)")
	fs.Int64Var(&c.MaxUploadBytes, "max-upload-bytes", d.MaxUploadBytes, "largest uploaded file in `bytes`; larger ones get 413 (RELAY_MAX_UPLOAD_BYTES)")
	fs.DurationVar(&c.ScriptTimeout, "script-timeout", d.ScriptTimeout, "time limit of an execute-js script, which then gets 504; a script stuck inside a built-in has its worker process killed "+script.KillGrace.String()+" later (RELAY_SCRIPT_TIMEOUT)")
	fs.Int64Var(&c.ScriptMemory, "script-memory", d.ScriptMemory, "memory an execute-js script may use, in `bytes`: its worker process cannot grow past its start-up size plus this, and the script gets 400 (RELAY_SCRIPT_MEMORY)")
	fs.IntVar(&c.ScriptWorkers, "script-workers", d.ScriptWorkers, "how many execute-js `scripts` may run at once, each in a worker process of its own; more wait up to --script-timeout, then get 503 (RELAY_SCRIPT_WORKERS)")
	fs.DurationVar(&c.EventKeepalive, "event-keepalive", d.EventKeepalive, "longest silence on an event stream before a keepalive comment (RELAY_EVENT_KEEPALIVE)")
	fs.IntVar(&c.EventRingSize, "event-ring-size", d.EventRingSize, "`events` each world keeps for resuming streams (RELAY_EVENT_RING_SIZE)")
	fs.Int64Var(&c.EventRingBytes, "event-ring-bytes", d.EventRingBytes, "`bytes` of events each world keeps for resuming streams, in memory, on disk and, in a cluster, in the events stream, besides --event-ring-size; the oldest leave first, and a stream may fall this far behind before it is closed with an overflow event (RELAY_EVENT_RING_BYTES)")
	fs.Int64Var(&c.WorldMemoryBytes, "world-memory-bytes", d.WorldMemoryBytes, "`bytes` the relay keeps for one world: its kept events (--event-ring-bytes) and an embedded world's documents, whose database may hold the rest; writes past it get 403 (RELAY_WORLD_MEMORY_BYTES; 0: no bound)")
	fs.DurationVar(&c.EventCoalesce, "event-coalesce", d.EventCoalesce, "how long events gather before they are fanned out, so each stream writes them together (RELAY_EVENT_COALESCE; 0: at once)")
	fs.IntVar(&c.EventQueueSize, "event-queue-size", d.EventQueueSize, "`events` a stream may fall behind before it is closed with an overflow event (RELAY_EVENT_QUEUE_SIZE)")
	fs.IntVar(&c.MaxStreamsPerKey, "max-streams-per-key", d.MaxStreamsPerKey, "open event streams allowed per API key; more get 429 (RELAY_MAX_STREAMS_PER_KEY)")
	fs.IntVar(&c.AccountMaxKeys, "account-max-keys", d.AccountMaxKeys, "unrevoked `keys` an account may hold unless its quota says otherwise; the operator's account is not limited (RELAY_ACCOUNT_MAX_KEYS; 0: no limit)")
	fs.IntVar(&c.AccountMaxWorlds, "account-max-worlds", d.AccountMaxWorlds, "`worlds` (embedded and linked) an account may own unless its quota says otherwise; the operator's account is not limited (RELAY_ACCOUNT_MAX_WORLDS; 0: no limit)")
	fs.IntVar(&c.AccountMaxStreams, "account-max-streams", d.AccountMaxStreams, "open event `streams` an account's keys may hold on one node unless its quota says otherwise; more get 403 (RELAY_ACCOUNT_MAX_STREAMS; 0: no limit)")
	fs.IntVar(&c.AccountRequestsPerMinute, "account-requests-per-minute", d.AccountRequestsPerMinute, "`requests` per minute an account's keys may make together on one node unless its quota says otherwise; more get 429 with Retry-After (RELAY_ACCOUNT_REQUESTS_PER_MINUTE; 0: no limit)")
	fs.Int64Var(&c.AccountMaxUploadBytes, "account-max-upload-bytes", d.AccountMaxUploadBytes, "largest file in `bytes` an account's keys may upload unless its quota says otherwise; larger get 403 (RELAY_ACCOUNT_MAX_UPLOAD_BYTES; 0: only --max-upload-bytes)")
	fs.Int64Var(&c.AccountMaxStoredBytes, "account-max-stored-bytes", d.AccountMaxStoredBytes, "`bytes` an account's embedded worlds may hold on disk together unless its quota says otherwise; past it, new worlds and uploads get 403 (RELAY_ACCOUNT_MAX_STORED_BYTES; 0: no limit)")
	fs.DurationVar(&c.AuditRetention, "audit-retention", d.AuditRetention, "how long the audit log keeps its records of account, key, pairing, request and sign-in actions; older ones are pruned in the background (RELAY_AUDIT_RETENTION)")
	fs.IntVar(&c.AuditMaxRecords, "audit-max-records", d.AuditMaxRecords, "most `records` the audit log keeps, besides --audit-retention; the oldest leave first (RELAY_AUDIT_MAX_RECORDS)")
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", d.IdempotencyTTL, "how long a write's Idempotency-Key is remembered: a retry with the key within this time gets the first answer and is not applied again (RELAY_IDEMPOTENCY_TTL)")
	fs.IntVar(&c.IdempotencyKeys, "idempotency-keys", d.IdempotencyKeys, "most idempotency `keys` remembered per world, besides --idempotency-ttl; the oldest leave first (RELAY_IDEMPOTENCY_KEYS)")
	fs.IntVar(&c.IdempotencyAnswerBytes, "idempotency-answer-bytes", d.IdempotencyAnswerBytes, "largest answer in `bytes` kept for an idempotency key; a retry of a write with a larger answer gets 409 saying it was applied (RELAY_IDEMPOTENCY_ANSWER_BYTES)")
	fs.IntVar(&c.MaxKeysPerCreator, "max-keys-per-creator", d.MaxKeysPerCreator, "unrevoked `keys` one API key may have created, whatever its account (the operator's too); more get 403 until some are revoked (RELAY_MAX_KEYS_PER_CREATOR; 0: no limit)")
	fs.IntVar(&c.MaxStreamsPerWorld, "max-streams-per-world", d.MaxStreamsPerWorld, "open event streams allowed per world; more get 429 (RELAY_MAX_STREAMS_PER_WORLD)")
	fs.IntVar(&c.RateLimit, "rate-limit", d.RateLimit, "`requests` per minute per API key (a stream counts once, when opened); more get 429 with Retry-After; 0 turns the limit off (RELAY_RATE_LIMIT)")
	fs.IntVar(&c.RateLimitBurst, "rate-limit-burst", d.RateLimitBurst, "`requests` a key may send at once before --rate-limit paces it; 0 means one minute's worth (RELAY_RATE_LIMIT_BURST)")
	fs.IntVar(&c.AuthFailureLimit, "auth-failure-limit", d.AuthFailureLimit, "`requests` per minute from one client address that may fail authentication (no, bad or revoked key) with 401; more get 429 with Retry-After; 0 turns the limit off (RELAY_AUTH_FAILURE_LIMIT)")
	fs.IntVar(&c.MaxQueryBytes, "max-query-bytes", d.MaxQueryBytes, "longest query string in `bytes`; longer ones get 414 (RELAY_MAX_QUERY_BYTES)")
	fs.Uint64Var(&c.DiceSeed, "dice-seed", d.DiceSeed, "seed every dice roll from this `number`, so that a run repeats its rolls (demos, tests); 0 rolls with the operating system's randomness (RELAY_DICE_SEED)")
	fs.IntVar(&c.gogc, "gogc", envInt("GOGC", defaultGOGC), "the garbage collector's target `percent`: the heap may grow by this much of what it holds live before a collection (Go's GOGC, whose own default is 100); higher spends less CPU on collections for more memory; GOGC sets it too when RELAY_GOGC does not (RELAY_GOGC)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", d.MetricsListen, "serve Prometheus metrics at /metrics on this separate `host:port`, without authentication (requests, latencies, streams, events, worlds, commits, refusals, linked worlds); off when empty; keep it on a private network (RELAY_METRICS_LISTEN)")
	fs.StringVar(&c.pprofListen, "pprof", "", "serve Go's profiler (/debug/pprof/) on this separate `host:port`, for measuring; off when empty; never expose it (RELAY_PPROF)")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout, "time a client has to send a request's headers once it starts them (on a new connection, from the moment it opens; an h2c connection must send its preface and its first request's headers within it, and a gRPC-only connection its preface); 0 turns it off (RELAY_READ_HEADER_TIMEOUT)")
	fs.DurationVar(&c.BodyReadTimeout, "body-read-timeout", d.BodyReadTimeout, "time allowance of a request body: the body must keep arriving at --body-min-rate and may pause for at most this long; a body that falls behind is cut off and its connection closed; a gRPC message on gRPC's own transport must arrive whole within this plus the time --max-body-bytes takes at --body-min-rate, else its call ends with DEADLINE_EXCEEDED; 0 turns it off (RELAY_BODY_READ_TIMEOUT)")
	fs.IntVar(&c.BodyMinRate, "body-min-rate", d.BodyMinRate, "`bytes` per second a request body must average: each byte received extends the body's read deadline by 1/rate seconds, up to --body-read-timeout ahead; 0: the whole body must arrive within --body-read-timeout (RELAY_BODY_MIN_RATE)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", d.IdleTimeout, "how long an idle keep-alive connection stays open (HTTP/1.1 between requests, HTTP/2 with no open stream); 0 turns it off (RELAY_IDLE_TIMEOUT)")
	fs.DurationVar(&c.WriteStallTimeout, "write-stall-timeout", d.WriteStallTimeout, "longest a write to a client may make no progress (a client that stops reading its answer or event stream) before its connection is closed; 0 turns it off (RELAY_WRITE_STALL_TIMEOUT)")
	fs.IntVar(&c.MaxConns, "max-conns", d.MaxConns, "`connections` open at once, overall; more are refused at once with 503 and Retry-After; the default is three quarters of the process's open-file limit; 0 turns the cap off (RELAY_MAX_CONNS)")
	fs.IntVar(&c.MaxConnsPerIP, "max-conns-per-ip", d.MaxConnsPerIP, "`connections` open at once from one client address (an IPv4 address or an IPv6 /64); more are refused with 503 and Retry-After; behind a reverse proxy every client has the proxy's address: raise it or set 0 (off) there (RELAY_MAX_CONNS_PER_IP)")
	fs.StringVar(&c.PublicURL, "public-url", d.PublicURL, "the relay's address as tabletops reach it, such as https://relay.example.org; a pairing tells the module to connect to its /relay (wss://relay.example.org/relay); empty: the address the pairing request came to (set it behind a TLS proxy) (RELAY_PUBLIC_URL)")
	fs.DurationVar(&c.LinkAuthTimeout, "link-auth-timeout", d.LinkAuthTimeout, "time a tabletop has to send its auth message once its /relay socket is open; it is then closed with 4002 (RELAY_LINK_AUTH_TIMEOUT)")
	fs.DurationVar(&c.LinkReplyTimeout, "link-reply-timeout", d.LinkReplyTimeout, "time a linked world has to answer a request, which then gets 504 (RELAY_LINK_REPLY_TIMEOUT)")
	fs.DurationVar(&c.LinkPingInterval, "link-ping-interval", d.LinkPingInterval, "how often the relay pings each linked world's socket; a ping without an answer within the interval closes the socket and fails its requests with 503 (RELAY_LINK_PING_INTERVAL)")
	fs.Int64Var(&c.LinkMaxMessageBytes, "link-max-message-bytes", d.LinkMaxMessageBytes, "largest message a linked world may send, in `bytes` (a downloaded file arrives as one message, in base64); a larger one closes its socket with 1009 (RELAY_LINK_MAX_MESSAGE_BYTES)")
	fs.Int64Var(&c.LinkMaxEventBytes, "link-max-event-bytes", d.LinkMaxEventBytes, "largest event message a linked world may send, in `bytes`; larger ones, and those nested deeper than --max-json-depth allows (plus a few levels around their documents), are dropped, counted (relay_linked_events_oversized_total) and logged once per world (RELAY_LINK_MAX_EVENT_BYTES)")
	fs.Int64Var(&c.LinkMaxReplyBytes, "link-max-reply-bytes", d.LinkMaxReplyBytes, "largest reply a linked world may send to a request other than a file download, in `bytes`; or one nested deeper than --max-json-depth allows (plus a few levels around its documents) fails its request with 503, and the world stays connected (RELAY_LINK_MAX_REPLY_BYTES)")
	fs.IntVar(&c.LinkMaxPending, "link-max-pending", d.LinkMaxPending, "`requests` in flight at once to one linked world; more get 503 at once (RELAY_LINK_MAX_PENDING)")
	fs.IntVar(&c.PairRateLimit, "pair-rate-limit", d.PairRateLimit, "pairing `attempts` (POST /auth/pair, good or bad) per minute from one client address; more get 429 with Retry-After; 0 turns the limit off (RELAY_PAIR_RATE_LIMIT)")
	fs.IntVar(&c.PairFailureLimit, "pair-failure-limit", d.PairFailureLimit, "failed pairing `attempts` (unknown, used or expired codes) per minute on the whole relay, from every address together; past it every pairing attempt gets 429 with Retry-After; 0 turns the ceiling off (RELAY_PAIR_FAILURE_LIMIT)")
	fs.IntVar(&c.RequestRateLimit, "request-rate-limit", d.RequestRateLimit, "key requests and pair requests (POST /auth/key-request, /auth/pair-request) one client address may open per minute; more get 429 with Retry-After; 0 turns the limit off (RELAY_REQUEST_RATE_LIMIT)")
	fs.IntVar(&c.RequestPollLimit, "request-poll-limit", d.RequestPollLimit, "status polls of key requests and pair requests (and web-flow exchanges) one client address may make per minute; more get 429 with Retry-After; 0 turns the limit off (RELAY_REQUEST_POLL_LIMIT)")
	fs.StringVar(&c.CORSOrigins, "cors-origins", d.CORSOrigins, "comma-separated `origins` (scheme://host[:port], or * for all) whose web pages may call the API, event streams included, from a browser; none when empty, and same-origin pages (the console) need none (RELAY_CORS_ORIGINS)")
	fs.BoolVar(&c.Console, "console", d.Console, "serve the web console at /console: sign in with an API key, worlds, pairing codes, keys and live events (RELAY_CONSOLE)")
	fs.StringVar(&c.Signup, "signup", d.Signup, "who may make an account with POST /signup: closed (nobody; the operator makes accounts), invite (with a single-use invite the operator made) or open (anybody) (RELAY_SIGNUP)")
	fs.DurationVar(&c.SessionIdleTimeout, "session-idle-timeout", d.SessionIdleTimeout, "a console session signed in with a password ends when unused for this long (RELAY_SESSION_IDLE_TIMEOUT)")
	fs.IntVar(&c.SignInRateLimit, "signin-rate-limit", d.SignInRateLimit, "console sign-ins with a password (POST /console/session) one client address may try per minute; more get 429 with Retry-After; 0 turns the limit off (RELAY_SIGNIN_RATE_LIMIT)")
	fs.IntVar(&c.SignupRateLimit, "signup-rate-limit", d.SignupRateLimit, "sign-ups (POST /signup) one client address may make per minute; more get 429 with Retry-After; 0 turns the limit off (RELAY_SIGNUP_RATE_LIMIT)")
	clusterFlags(fs, &c.Cluster)
	fs.DurationVar(&c.RequestTimeout, "request-timeout", d.RequestTimeout, "time limit of a REST call, which then gets 504; event streams and file transfers are not limited; 0 turns it off (RELAY_REQUEST_TIMEOUT)")
}

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
	}{{"read-header-timeout", c.ReadHeaderTimeout}, {"body-read-timeout", c.BodyReadTimeout}, {"idle-timeout", c.IdleTimeout}, {"write-stall-timeout", c.WriteStallTimeout}, {"commit-delay", c.CommitDelay}} {
		if d.v < 0 {
			return fmt.Errorf("--%s must not be negative (0 turns it off), not %v", d.flag, d.v)
		}
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"body-min-rate", c.BodyMinRate}, {"max-conns", c.MaxConns}, {"max-conns-per-ip", c.MaxConnsPerIP}, {"account-max-keys", c.AccountMaxKeys}, {"max-keys-per-creator", c.MaxKeysPerCreator}} {
		if n.v < 0 {
			return fmt.Errorf("--%s must not be negative (0 turns it off), not %d", n.flag, n.v)
		}
	}
	switch {
	case c.gogc < 1:
		return fmt.Errorf("--gogc must be a positive percentage, not %d", c.gogc)
	case c.MaxBodyBytes < minBodyBytes:
		return fmt.Errorf("--max-body-bytes must be at least %d", minBodyBytes)
	case c.MaxDocumentBytes < minDocumentBytes:
		return fmt.Errorf("--max-document-bytes must be at least %d", minDocumentBytes)
	case c.MaxJSONDepth < minJSONDepth:
		return fmt.Errorf("--max-json-depth must be at least %d", minJSONDepth)
	}
	if _, err := gateway.ParseCORSOrigins(c.CORSOrigins); err != nil {
		return fmt.Errorf("--cors-origins: %w", err)
	}
	return c.Cluster.Check()
}

// serveCommand runs `relay serve`: it reads the flags, starts a relay node
// and serves until ctx is done.
func serveCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadServeConfig(args, stderr)
	if err != nil {
		return err
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
	// read, update and rest for a larger heap (docs/development/performance.md).
	debug.SetGCPercent(cfg.gogc)
	cfg.Build = buildInfo()
	// The profiler's port is bound before the node creates anything, as
	// the node binds its own first: a busy port leaves nothing behind.
	if cfg.pprofListen != "" {
		stop, err := serveProfiler(cfg.pprofListen, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	r, err := node.Start(ctx, cfg.Config, log, stdout)
	var cerr *node.ConfigError
	if errors.As(err, &cerr) {
		return usageError{err.Error()}
	}
	if err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return r.Close(shutdownCtx)
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
	return slog.New(flushingHandler{Handler: h, buf: buf, jsonLines: !text}), buf, nil
}

// defaultGOGC is the garbage collector's target when neither --gogc,
// RELAY_GOGC nor GOGC sets one.
const defaultGOGC = 400

// logFlushInterval is how long Info lines may wait in the log buffer.
const logFlushInterval = 50 * time.Millisecond

// envInt reads an integer environment variable, or def when it is unset
// or not an integer. Only Go's own GOGC is read this way, as the runtime
// reads it; every RELAY_* variable is strict (see applySettings).
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
