package node

import (
	"github.com/tabletop-relay/relay/cluster"

	"fmt"
	"runtime/debug"
	"time"

	"github.com/tabletop-relay/relay/audit"
	"github.com/tabletop-relay/relay/gateway"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/netlimit"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/signin"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
	"github.com/tabletop-relay/relay/world/script"
)

// Config is the configuration of a relay node. `relay serve` fills it
// from its flags and environment variables (each field names its flag);
// tests and other programs fill it directly, starting from DefaultConfig.
// A zero field means what the package that applies it documents for zero:
// the package's own default, or the limit turned off.
type Config struct {
	// Listen is the address for REST, SSE and gRPC (--listen); port 0
	// picks a free port, which Node.Addr reports.
	Listen string
	// GRPCListen, when set, is a second address that serves gRPC only
	// (--grpc-listen).
	GRPCListen string
	// DataDir holds relay.db, admin.key and worlds/ (--data).
	DataDir string
	// Demo creates the demo world when the data directory has no world
	// (--demo).
	Demo bool
	// NodeID keeps request ids unique across relays; random when negative
	// (--node-id).
	NodeID int
	// MaxBodyBytes bounds a REST body or a gRPC message (--max-body-bytes).
	MaxBodyBytes int64
	// ScriptTimeout is the time limit of an execute-js script
	// (--script-timeout).
	ScriptTimeout time.Duration
	// ScriptMemory and ScriptWorkers configure the execute-js worker
	// processes (0: the script package's defaults; --script-memory,
	// --script-workers).
	ScriptMemory  int64
	ScriptWorkers int
	// MaxUploadBytes bounds an uploaded file (0: the server's default;
	// --max-upload-bytes).
	MaxUploadBytes int64
	// MaxDocumentBytes and MaxJSONDepth bound what the worlds store (0:
	// the world's defaults; --max-document-bytes, --max-json-depth).
	MaxDocumentBytes int
	MaxJSONDepth     int
	// CommitDelay is how long a write may wait for concurrent writes to
	// share its group commit (one SQLite transaction and fsync); 0 writes
	// each group at once (--commit-delay).
	CommitDelay time.Duration
	// Event streams: the keepalive interval, the events each world keeps
	// for resuming, the events a stream may fall behind, how long events
	// gather before fan-out, and the caps on open streams
	// (--event-keepalive, --event-ring-size, --event-queue-size,
	// --event-coalesce, --max-streams-per-key, --max-streams-per-world).
	EventKeepalive time.Duration
	EventRingSize  int
	// EventRingBytes bounds the memory, and the journal on disk, of the
	// events each world keeps for resuming, embedded or linked
	// (--event-ring-bytes).
	EventRingBytes int64
	// WorldMemoryBytes is the bound of what the relay keeps for one world
	// (--world-memory-bytes; 0: none): its kept events (up to
	// EventRingBytes) and, for an embedded world, its documents, whose
	// database may hold the rest; a write that would make a world's
	// database hold more is refused.
	WorldMemoryBytes   int64
	EventQueueSize     int
	EventCoalesce      time.Duration
	MaxStreamsPerKey   int
	MaxStreamsPerWorld int
	// AccountMaxKeys is how many unrevoked keys an account other than the
	// operator's may hold when its own quota does not say
	// (--account-max-keys); 0 sets no limit.
	AccountMaxKeys int
	// The other quotas of an account other than the operator's when its
	// own do not say (0 sets no limit): the worlds it may own
	// (--account-max-worlds), the event streams its keys may hold open on
	// one node (--account-max-streams), the calls its keys may make a
	// minute on one node (--account-requests-per-minute), the largest
	// file it may upload (--account-max-upload-bytes) and the bytes its
	// embedded worlds may hold on disk (--account-max-stored-bytes).
	AccountMaxWorlds         int
	AccountMaxStreams        int
	AccountRequestsPerMinute int
	AccountMaxUploadBytes    int64
	AccountMaxStoredBytes    int64
	// AuditRetention is how long audit records are kept
	// (--audit-retention), AuditMaxRecords how many at most
	// (--audit-max-records).
	AuditRetention  time.Duration
	AuditMaxRecords int
	// What the relay keeps of the writes sent with an idempotency key:
	// for how long (--idempotency-ttl), how many keys per world at most
	// (--idempotency-keys) and the largest answer it keeps
	// (--idempotency-answer-bytes).
	IdempotencyTTL         time.Duration
	IdempotencyKeys        int
	IdempotencyAnswerBytes int
	// MaxKeysPerCreator is how many unrevoked keys one key may have
	// created (--max-keys-per-creator); 0 sets no limit.
	MaxKeysPerCreator int
	// Hostile input: the per-key rate limit and its burst (--rate-limit,
	// --rate-limit-burst; 0 turns the limit off).
	RateLimit      int
	RateLimitBurst int
	// AuthFailureLimit bounds the failed authentications of one client
	// address a minute (--auth-failure-limit; 0 turns it off).
	AuthFailureLimit int
	// MaxQueryBytes bounds a query string (--max-query-bytes).
	MaxQueryBytes int
	// RequestTimeout bounds a REST call (--request-timeout; 0 turns it
	// off).
	RequestTimeout time.Duration
	// Slow and idle clients (see package netlimit): header, body, idle
	// and write stall time-outs, the minimum body rate, and the caps on
	// open connections. Zero turns each off.
	ReadHeaderTimeout time.Duration
	BodyReadTimeout   time.Duration
	BodyMinRate       int
	IdleTimeout       time.Duration
	WriteStallTimeout time.Duration
	MaxConns          int
	MaxConnsPerIP     int
	// DiceSeed, when not 0, makes every roll repeat from run to run
	// (--dice-seed).
	DiceSeed uint64
	// Linked worlds (package link): the relay's public address for the
	// module, the socket's time-outs and bounds, and the pairing attempts
	// one address may make a minute (--public-url, --link-*,
	// --pair-rate-limit).
	PublicURL           string
	LinkAuthTimeout     time.Duration
	LinkReplyTimeout    time.Duration
	LinkPingInterval    time.Duration
	LinkMaxMessageBytes int64
	LinkMaxPending      int
	// LinkMaxEventBytes bounds an event message of a linked world: larger
	// ones are dropped (--link-max-event-bytes). LinkMaxReplyBytes bounds
	// a linked world's reply to a request other than a file download:
	// larger ones fail their request (--link-max-reply-bytes).
	LinkMaxEventBytes int64
	LinkMaxReplyBytes int64
	PairRateLimit     int
	// PairFailureLimit is the relay-wide ceiling on failed pairing
	// attempts a minute, whatever their addresses (--pair-failure-limit);
	// 0 turns it off.
	PairFailureLimit int
	// Key requests and pair requests: how many one address may open a
	// minute, and how many polls of their status (and exchanges) it may
	// make (--request-rate-limit, --request-poll-limit).
	RequestRateLimit int
	RequestPollLimit int
	// In a browser: the origins whose pages may call the API (a comma-
	// separated list, see gateway.ParseCORSOrigins; --cors-origins) and
	// whether the web console is served at /console (--console).
	CORSOrigins string
	Console     bool
	// Signup is who may make an account with `POST /signup`: "closed"
	// (nobody, the default), "invite" (with an invite of the operator's)
	// or "open" (anybody) (--signup). SessionIdleTimeout ends a console
	// session unused for that long (--session-idle-timeout);
	// SignInRateLimit and SignupRateLimit bound the sign-ins and sign-ups
	// of one client address a minute (--signin-rate-limit,
	// --signup-rate-limit).
	Signup             string
	SessionIdleTimeout time.Duration
	SignInRateLimit    int
	SignupRateLimit    int
	// MetricsListen, when set, serves the Prometheus metrics at /metrics
	// on this separate address (--metrics-listen); Node.MetricsAddr
	// reports the address bound.
	MetricsListen string
	// Cluster joins a cluster of relay nodes (package cluster); its zero
	// value is a relay alone, without NATS. Its DataDir is DataDir.
	Cluster cluster.Config
	// Build is what /healthz reports and the start-up log line names.
	Build gateway.BuildInfo
	// Shared, when set, makes the node one of a cluster's nodes, with the
	// cluster's keys, tickets, pairing, rate limits and events (see
	// SharedState), over a NATS connection of the caller's. A node that
	// joins a cluster with Cluster needs none: it shares its state over
	// the cluster's connection. No flag of its own.
	Shared *SharedState
}

// Defaults of the HTTP servers' own time-outs.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
)

// DefaultPairRateLimit is how many pairing attempts one address may make a
// minute: a game master who mistypes a code a few times never meets it,
// while guessing one of 887 million codes at this pace is hopeless.
const DefaultPairRateLimit = 10

// DefaultPairFailureLimit is how many failed pairing attempts the whole
// relay takes a minute, from all addresses together: at this pace a code,
// alive for 10 minutes, is guessed with a chance of about one in a
// million, however many addresses the guesses come from, while game
// masters who mistype a code are far below it.
const DefaultPairFailureLimit = 100

// DefaultRequestRateLimit is how many key requests and pair requests one
// address may open a minute; DefaultRequestPollLimit how many times it may
// poll their status a minute (the module polls every few seconds, and a
// few may wait at once behind one address).
const (
	DefaultRequestRateLimit = 10
	DefaultRequestPollLimit = 120
)

// DefaultSignInRateLimit is how many console sign-ins one address may
// try a minute; DefaultSignupRateLimit how many sign-ups it may make.
const (
	DefaultSignInRateLimit = 10
	DefaultSignupRateLimit = 3
)

// DefaultConfig returns the configuration `relay serve` runs with when no
// flag or environment variable says otherwise.
func DefaultConfig() Config {
	return Config{
		Listen:                   "127.0.0.1:8080",
		DataDir:                  "./data",
		Demo:                     true,
		NodeID:                   -1,
		MaxBodyBytes:             server.DefaultMaxMessageBytes,
		ScriptTimeout:            5 * time.Second,
		ScriptMemory:             script.DefaultWorkerMemoryBytes,
		ScriptWorkers:            script.DefaultWorkers,
		MaxUploadBytes:           server.DefaultMaxUploadBytes,
		MaxDocumentBytes:         world.DefaultMaxDocumentBytes,
		MaxJSONDepth:             world.DefaultMaxDepth,
		CommitDelay:              world.DefaultCommitDelay,
		EventKeepalive:           15 * time.Second,
		EventRingSize:            events.DefaultRingSize,
		EventRingBytes:           events.DefaultRingBytes,
		WorldMemoryBytes:         DefaultWorldMemoryBytes,
		EventQueueSize:           events.DefaultQueueSize,
		EventCoalesce:            events.DefaultCoalesce,
		MaxStreamsPerKey:         server.DefaultMaxStreamsPerKey,
		MaxStreamsPerWorld:       server.DefaultMaxStreamsPerWorld,
		AccountMaxKeys:           server.DefaultAccountMaxKeys,
		MaxKeysPerCreator:        server.DefaultMaxKeysPerCreator,
		AccountMaxWorlds:         server.DefaultAccountMaxWorlds,
		AccountMaxStreams:        server.DefaultAccountMaxStreams,
		AccountRequestsPerMinute: server.DefaultAccountRequestsPerMinute,
		AccountMaxStoredBytes:    server.DefaultAccountMaxStoredBytes,
		AuthFailureLimit:         server.DefaultAuthFailuresPerMinute,
		MaxQueryBytes:            gateway.DefaultMaxQueryBytes,
		RequestTimeout:           30 * time.Second,
		ReadHeaderTimeout:        DefaultReadHeaderTimeout,
		BodyReadTimeout:          netlimit.DefaultBodyReadTimeout,
		BodyMinRate:              netlimit.DefaultBodyMinRate,
		IdleTimeout:              DefaultIdleTimeout,
		WriteStallTimeout:        netlimit.DefaultWriteStallTimeout,
		MaxConns:                 netlimit.DefaultMaxConns(),
		MaxConnsPerIP:            netlimit.DefaultMaxConnsPerIP,
		LinkAuthTimeout:          link.DefaultAuthTimeout,
		LinkReplyTimeout:         link.DefaultReplyTimeout,
		LinkPingInterval:         link.DefaultPingInterval,
		LinkMaxMessageBytes:      link.DefaultMaxMessageBytes,
		LinkMaxPending:           link.DefaultMaxPending,
		LinkMaxEventBytes:        link.DefaultMaxEventBytes,
		LinkMaxReplyBytes:        link.DefaultMaxReplyBytes,
		PairRateLimit:            DefaultPairRateLimit,
		PairFailureLimit:         DefaultPairFailureLimit,
		RequestRateLimit:         DefaultRequestRateLimit,
		RequestPollLimit:         DefaultRequestPollLimit,
		Console:                  true,
		Signup:                   signin.SignupClosed,
		SessionIdleTimeout:       signin.DefaultIdleTimeout,
		SignInRateLimit:          DefaultSignInRateLimit,
		SignupRateLimit:          DefaultSignupRateLimit,
		AuditRetention:           audit.DefaultRetention,
		AuditMaxRecords:          audit.DefaultMaxRecords,
		IdempotencyTTL:           server.DefaultIdempotencyTTL,
		IdempotencyKeys:          server.DefaultIdempotencyKeys,
		IdempotencyAnswerBytes:   server.DefaultIdempotencyAnswerBytes,
		Build:                    ReadBuildInfo(),
	}
}

// ConfigError is a setting Start cannot work with (the command line
// reports it as a usage error).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// ReadBuildInfo is the version, commit and date the Go toolchain recorded
// in the running binary: the module version of `go install
// github.com/tabletop-relay/relay/cmd/relay@v1.2.0`, and the commit and its
// time that `go build` records in a git checkout ("devel" and empty when
// unknown).
//
// Go records the commit only in a clone (not in a git worktree, whose .git
// is a file) and not when GOFLAGS holds -buildvcs=false; `make build` sets
// the values with the linker instead.
func ReadBuildInfo() gateway.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return gateway.BuildInfo{Version: "devel"}
	}
	return BuildInfoOf(bi)
}

// BuildInfoOf is the version, commit and commit time recorded in bi (see
// ReadBuildInfo); a commit built with uncommitted changes ends in -dirty.
func BuildInfoOf(bi *debug.BuildInfo) gateway.BuildInfo {
	info := gateway.BuildInfo{Version: "devel"}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Version = v
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			// The commit's time: the build of an unchanged checkout is
			// the build of that commit.
			info.Date = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && info.Commit != "" {
		info.Commit += "-dirty"
	}
	return info
}

// DefaultWorldMemoryBytes is the relay's default bound of what it keeps
// for one world: 256 MiB, of which the kept events take up to
// --event-ring-bytes (64 MiB by default) and the documents the rest.
const DefaultWorldMemoryBytes = 256 << 20

// worldDocumentBytes is what a world's database may hold under cfg's
// per-world bound, or 0 when there is no bound. A bound that leaves the
// documents no room beside the kept events is a *ConfigError.
func worldDocumentBytes(cfg Config) (int64, error) {
	if cfg.WorldMemoryBytes <= 0 {
		return 0, nil
	}
	ring := cfg.EventRingBytes
	if ring <= 0 {
		ring = events.DefaultRingBytes
	}
	if ring >= cfg.WorldMemoryBytes {
		return 0, &ConfigError{fmt.Errorf("world-memory-bytes (%d) must be larger than event-ring-bytes (%d): the kept events are part of it", cfg.WorldMemoryBytes, ring)}
	}
	return cfg.WorldMemoryBytes - ring, nil
}

// checkIdempotency refuses bounds of idempotent writes below zero (zero
// takes the default).
func checkIdempotency(cfg Config) error {
	switch {
	case cfg.IdempotencyTTL < 0:
		return &ConfigError{fmt.Errorf("idempotency-ttl must be 0 or more: %s", cfg.IdempotencyTTL)}
	case cfg.IdempotencyKeys < 0:
		return &ConfigError{fmt.Errorf("idempotency-keys must be 0 or more: %d", cfg.IdempotencyKeys)}
	case cfg.IdempotencyAnswerBytes < 0:
		return &ConfigError{fmt.Errorf("idempotency-answer-bytes must be 0 or more: %d", cfg.IdempotencyAnswerBytes)}
	}
	return nil
}
