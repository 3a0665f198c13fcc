package main

import (
	"context"
	"encoding/base64"
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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"relay/gateway"
	"relay/server"
	"relay/server/keys"
	"relay/world"
	"relay/world/demo"
	"relay/world/dice"
	"relay/world/embedded"
	"relay/world/events"
	"relay/world/files"
)

// serveConfig is the configuration of `relay serve`.
type serveConfig struct {
	listen        string
	dataDir       string
	demo          bool
	logFormat     string
	logLevel      string
	nodeID        int
	maxBodyBytes  int64
	scriptTimeout time.Duration
	// maxUploadBytes bounds an uploaded file (0: the server's default).
	maxUploadBytes int64
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
	// pprofListen, when set, serves Go's profiling handlers there.
	pprofListen string
	// diceSeed, when not 0, makes every roll repeat from run to run.
	diceSeed uint64
}

func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", envOr("RELAY_LISTEN", "127.0.0.1:8080"), "address for REST, SSE and gRPC (h2c) `host:port` (RELAY_LISTEN)")
	fs.StringVar(&c.dataDir, "data", envOr("RELAY_DATA", "./data"), "data `directory`: relay.db, admin.key and worlds/ (RELAY_DATA)")
	fs.BoolVar(&c.demo, "demo", envBool("RELAY_DEMO", true), "create the demo world (clientId demo) when the data directory has no world (RELAY_DEMO)")
	fs.StringVar(&c.logFormat, "log-format", envOr("RELAY_LOG_FORMAT", "auto"), "log `format`: auto (text on a terminal, else JSON), text or json (RELAY_LOG_FORMAT)")
	fs.StringVar(&c.logLevel, "log-level", envOr("RELAY_LOG_LEVEL", "info"), "log `level`: debug, info, warn or error (RELAY_LOG_LEVEL)")
	fs.IntVar(&c.nodeID, "node-id", envInt("RELAY_NODE_ID", -1), "`number` (0-999999) that keeps request ids unique across relays; random when negative (RELAY_NODE_ID)")
	fs.Int64Var(&c.maxBodyBytes, "max-body-bytes", int64(envInt("RELAY_MAX_BODY_BYTES", 1<<20)), "largest JSON request body in `bytes`; larger ones get 413 (RELAY_MAX_BODY_BYTES)")
	fs.Int64Var(&c.maxUploadBytes, "max-upload-bytes", int64(envInt("RELAY_MAX_UPLOAD_BYTES", server.DefaultMaxUploadBytes)), "largest uploaded file in `bytes`; larger ones get 413 (RELAY_MAX_UPLOAD_BYTES)")
	fs.DurationVar(&c.scriptTimeout, "script-timeout", envDuration("RELAY_SCRIPT_TIMEOUT", 5*time.Second), "time limit of an execute-js script (RELAY_SCRIPT_TIMEOUT)")
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
	fs.StringVar(&c.pprofListen, "pprof", envOr("RELAY_PPROF", ""), "serve Go's profiler (/debug/pprof/) on this separate `host:port`, for measuring; off when empty; never expose it (RELAY_PPROF)")
	fs.DurationVar(&c.requestTimeout, "request-timeout", envDuration("RELAY_REQUEST_TIMEOUT", 30*time.Second), "time limit of a REST call, which then gets 504; event streams and file transfers are not limited; 0 turns it off (RELAY_REQUEST_TIMEOUT)")
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
	log, logBuf, err := newLogger(cfg.logFormat, cfg.logLevel, stderr)
	if err != nil {
		return usageError{err.Error()}
	}
	defer logBuf.Close()
	if os.Getenv("GOGC") == "" {
		// Every REST read allocates its response (a large actor is tens of
		// kilobytes) while the live heap stays small, so the default
		// target collects very often; each collection also shrinks the
		// stacks of the connections' goroutines, which then grow again on
		// their next request. Measured under relay-bench, a higher target
		// removes most of both for a few more megabytes of memory. GOGC
		// still overrides it.
		debug.SetGCPercent(serveGCPercent)
	}
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

// relay is a running relay: its listener, servers and stores.
type relay struct {
	addr     string
	http     *http.Server
	grpc     *server.Server
	keys     *keys.Store
	worlds   *world.Host
	hub      *events.Hub
	served   chan error
	log      *slog.Logger
	adminKey string

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
	fail := func(err error) (*relay, error) {
		_ = r.close(context.Background())
		return nil, err
	}
	// The event hub numbers and stores each transaction's events in the
	// transaction (as the worlds' journal), then publishes them once
	// committed (as a host listener).
	r.hub = events.New(events.Options{RingSize: cfg.eventRingSize, QueueSize: cfg.eventQueueSize, Coalesce: cfg.eventCoalesce})
	if r.worlds, err = world.OpenHost(cfg.dataDir, world.Options{Journal: r.hub}); err != nil {
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

	ids := server.NewRequestIDs(cfg.nodeID, nil)
	var rolls dice.Source // nil: the server rolls with real randomness
	if cfg.diceSeed != 0 {
		rolls = dice.NewSeeded(cfg.diceSeed)
	}
	// The services reach the worlds through the registry of the embedded
	// worlds: the engines of the data directory with the rules, the event
	// hub and the file areas applied to them.
	worlds := embedded.NewRegistry(r.worlds, embedded.Options{
		// Each world's file area is <data>/worlds/<clientId>/files.
		DataDir: cfg.dataDir,
		Hub:     r.hub,
		Dice:    rolls,
	})
	if r.grpc, err = server.New(server.Config{
		Keys:           keyStore,
		Worlds:         worlds,
		RequestIDs:     ids,
		Log:            log,
		ScriptTimeout:  cfg.scriptTimeout,
		MaxUploadBytes: cfg.maxUploadBytes,
		RateLimit:      server.NewRateLimiter(cfg.rateLimit, cfg.rateLimitBurst, nil),
		AuthFailures:   server.NewRateLimiter(cfg.authFailureLimit, 0, nil),
		Events: server.EventsConfig{
			MaxStreamsPerKey:   cfg.maxStreamsPerKey,
			MaxStreamsPerWorld: cfg.maxStreamsPerWorld,
			QueueSize:          cfg.eventQueueSize,
		},
	}); err != nil {
		return fail(err)
	}
	// The gateway calls the services through the server's in-process
	// connection, unary calls and streams alike: REST calls pass the same
	// interceptors as gRPC calls, without a network hop.
	rest, err := gateway.New(ctx, r.grpc.Local, gateway.Options{NewRequestID: ids.New, MaxBodyBytes: cfg.maxBodyBytes, KeepaliveInterval: cfg.eventKeepalive, MaxUploadBytes: cfg.maxUploadBytes,
		MaxQueryBytes: cfg.maxQueryBytes, UnaryTimeout: cfg.requestTimeout, SpoolDir: spoolDir,
		Admit: func(ctx context.Context, method, apiKey, ticket, remoteAddr string) error {
			return r.grpc.Admit(ctx, method, server.Credentials{APIKey: apiKey, Ticket: ticket}, remoteAddr)
		}})
	if err != nil {
		return fail(err)
	}

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", cfg.listen, err))
	}
	r.addr = ln.Addr().String()
	r.http = &http.Server{
		Handler:           splitGRPC(r.grpc, rest),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// gRPC clients speak HTTP/2 without TLS (h2c); REST clients HTTP/1.1 or
	// h2c.
	r.http.Protocols = new(http.Protocols)
	r.http.Protocols.SetHTTP1(true)
	r.http.Protocols.SetUnencryptedHTTP2(true)
	go func() { r.served <- r.http.Serve(ln) }()
	r.grpc.SetServing(true)
	log.Info("relay ready", "addr", r.addr, "data", cfg.dataDir)
	return r, nil
}

// splitGRPC sends gRPC requests to the gRPC server and everything else to
// the REST gateway. A gRPC call is admitted from its headers first (see
// server.Server.Admit), so that a caller without a valid key is refused
// before its request message is read.
func splitGRPC(s *server.Server, rest http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			creds := server.Credentials{APIKey: r.Header.Get(server.APIKeyHeader), Ticket: r.Header.Get(server.StreamTicketHeader)}
			if err := s.Admit(r.Context(), r.URL.Path, creds, r.RemoteAddr); err != nil {
				writeGRPCRefusal(w, status.Convert(err))
				return
			}
			s.GRPC.ServeHTTP(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	})
}

// writeGRPCRefusal answers a gRPC call with only a status, as a gRPC server
// does for a call it refuses before reading it: HTTP 200 with the status in
// the headers (a trailers-only response). The status's details travel in
// `grpc-status-details-bin`, so clients see the retry delay of a 429.
func writeGRPCRefusal(w http.ResponseWriter, st *status.Status) {
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(int(st.Code())))
	h.Set("Grpc-Message", encodeGRPCMessage(st.Message()))
	if details, err := proto.Marshal(st.Proto()); err == nil && len(st.Proto().GetDetails()) > 0 {
		h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(details))
	}
	w.WriteHeader(http.StatusOK)
}

// encodeGRPCMessage percent-encodes a status message as the gRPC wire
// format asks: printable ASCII but '%' stays, everything else becomes %XX.
func encodeGRPCMessage(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
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
	if r.hub != nil {
		r.hub.Close() // ends the event streams, which would hold up a graceful stop
	}
	if r.http != nil {
		errs = append(errs, r.http.Shutdown(ctx))
	}
	if r.grpc != nil {
		r.grpc.Stop(ctx)
	}
	if r.worlds != nil {
		errs = append(errs, r.worlds.Close())
	}
	if r.keys != nil {
		errs = append(errs, r.keys.Close())
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

// serveGCPercent is the garbage collector's target when GOGC is not set.
const serveGCPercent = 400

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
