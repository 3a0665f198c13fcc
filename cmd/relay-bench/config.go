package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// defaultMix is the operation mix when neither --mix nor --only is given.
const defaultMix = "get=70,search=10,update=10,skill=5,rest=5"

// config is the benchmark's configuration, from the command line.
type config struct {
	// Target: a relay this program starts, or a running one.
	addr         string
	adminKeyFile string
	pid          int
	relayBin     string
	relayLog     string

	// Load.
	concurrency int
	duration    time.Duration
	warmup      time.Duration
	mix         []weighted
	subscribers int
	grpc        bool
	// grpcConns is how many HTTP/2 connections the gRPC callers share.
	grpcConns int
	baseline  bool
	// rate, when positive, runs the phases open-loop at that many
	// requests per second (see driveOpen); 0 runs them closed-loop.
	rate float64
	// cluster starts the relay as a cluster of one node.
	cluster bool
	// fsyncFloor also measures one writer's fdatasync rate, fsyncDuration
	// long, with fsyncBytes per write, in fsyncDir.
	fsyncFloor    bool
	fsyncDuration time.Duration
	fsyncBytes    int
	fsyncDir      string

	// settle waits, before each measured phase, until the one-minute
	// load average is under 1, for at most settleMax.
	settle    bool
	settleMax time.Duration

	jsonPath string
	// cpuProfile, when set, receives the started relay's CPU profile of
	// the measured phase.
	cpuProfile string
}

// weighted is one operation of the mix and its relative weight.
type weighted struct {
	op     string
	weight int
}

// parseConfig reads the command line. -h prints the usage and returns
// flag.ErrHelp.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("relay-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.addr, "addr", "", "`host:port` of a running relay to target; empty: build ./cmd/relay and start one on a temporary data directory with the demo world")
	fs.StringVar(&cfg.adminKeyFile, "admin-key-file", "", "`file` holding an admin key of the relay given by --addr (one with every scope, such as <data>/admin.key)")
	fs.IntVar(&cfg.pid, "pid", 0, "process `id` of the relay given by --addr, to report its CPU time and peak memory (Linux /proc); 0: not reported")
	fs.StringVar(&cfg.relayBin, "relay-bin", "", "relay `binary` to start instead of building ./cmd/relay with `go build`")
	fs.StringVar(&cfg.relayLog, "relay-log", "", "`file` for the started relay's log; empty: a file in the run's temporary directory, removed at the end")
	fs.IntVar(&cfg.concurrency, "concurrency", 64, "concurrent `clients`, each on its own keep-alive HTTP/1.1 connection (with --grpc: concurrent calls, spread over --grpc-conns HTTP/2 connections)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long the measured load runs")
	fs.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "how long the same load runs, unmeasured, before the measurement")
	mix := fs.String("mix", defaultMix, "operations and their weights, `op=weight,...`; operations: "+strings.Join(opNames, ", ")+
		" (get: GET /get of an actor as Alice; search: GET /search?query=a; update: PUT /update of hit points; skill: POST /dnd5e/skill-check without a chat message; skillchat: the same with one; rest: POST /dnd5e/short-rest)")
	only := fs.String("only", "", "run this one `operation` alone (overrides --mix)")
	fs.IntVar(&cfg.subscribers, "subscribers", 0, "open SSE `streams` on /actor/subscribe during the run, counting the events they receive")
	fs.BoolVar(&cfg.grpc, "grpc", false, "send the operations through gRPC (h2c on the relay's port) instead of REST")
	fs.IntVar(&cfg.grpcConns, "grpc-conns", 1, "with --grpc, the HTTP/2 `connections` the concurrent calls are spread over, round robin (high-throughput gRPC clients use a few)")
	fs.BoolVar(&cfg.cluster, "cluster", false, "start the relay as a node of a cluster of one (--cluster-listen: embedded NATS with JetStream, world leases), to compare with clustering off; not with --addr")
	fs.BoolVar(&cfg.baseline, "baseline", false, "also drive a bare net/http handler (in this process) returning the relay's GET /get bytes, the same way, and report the relay's get throughput as a fraction of it")
	fs.Float64Var(&cfg.rate, "rate", 0, "open loop: start `N` requests per second on a fixed schedule, whether or not earlier ones finished, over the --concurrency connections, and count each latency from its scheduled start (with --baseline, the bare handler at the same rate); 0: closed loop, each client sends its next request when the last one is answered")
	fs.BoolVar(&cfg.fsyncFloor, "fsync-floor", false, "also measure one writer's fdatasync rate on the disk of the relay's data (each write waits for its own fdatasync) and report update throughput as a multiple of it")
	fs.DurationVar(&cfg.fsyncDuration, "fsync-duration", 3*time.Second, "how long --fsync-floor measures")
	fs.IntVar(&cfg.fsyncBytes, "fsync-bytes", 4096, "`bytes` per write of --fsync-floor (one page of a SQLite WAL frame)")
	fs.StringVar(&cfg.fsyncDir, "fsync-dir", "", "`directory` --fsync-floor writes in; empty: the system's temporary directory, where a started relay keeps its data")
	fs.StringVar(&cfg.cpuProfile, "cpu-profile", "", "write the started relay's CPU profile of the measured phase to this `file` (go tool pprof FILE); not with --addr")
	fs.BoolVar(&cfg.settle, "settle", false, "before each measured phase (the relay's, and the baseline's), wait until the one-minute load average is under 1, printing its progress, so that the minute before the measurement was quiet")
	fs.DurationVar(&cfg.settleMax, "settle-max", 10*time.Minute, "the longest --settle waits before each phase; the run then goes on, and warns")
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the report as JSON to this `file` (- for stdout)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: relay-bench [flags]\n\nDrives load against a relay (started here, or --addr) and reports per operation:\nrequests/s, p50/p90/p99/max latency, errors, and the relay's CPU seconds and peak RSS.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	spec := *mix
	if *only != "" {
		spec = *only + "=1"
	}
	var err error
	if cfg.mix, err = parseMix(spec); err != nil {
		return cfg, err
	}
	switch {
	case cfg.concurrency < 1:
		return cfg, errors.New("--concurrency must be at least 1")
	case cfg.duration <= 0:
		return cfg, errors.New("--duration must be positive")
	case cfg.warmup < 0:
		return cfg, errors.New("--warmup must not be negative")
	case cfg.rate < 0 || cfg.rate > 1e6:
		return cfg, errors.New("--rate must be between 0 (closed loop) and 1000000 requests per second")
	case cfg.settleMax <= 0:
		return cfg, errors.New("--settle-max must be positive")
	case cfg.grpcConns < 1:
		return cfg, errors.New("--grpc-conns must be at least 1")
	case cfg.fsyncFloor && (cfg.fsyncDuration <= 0 || cfg.fsyncBytes < 1 || cfg.fsyncBytes > fsyncRegion/2):
		return cfg, fmt.Errorf("--fsync-duration must be positive and --fsync-bytes between 1 and %d", fsyncRegion/2)
	case cfg.subscribers < 0:
		return cfg, errors.New("--subscribers must not be negative")
	case cfg.addr != "" && cfg.cpuProfile != "":
		return cfg, errors.New("--cpu-profile profiles a relay started here; it cannot be used with --addr (serve that relay with --pprof instead)")
	case cfg.addr != "" && cfg.cluster:
		return cfg, errors.New("--cluster starts a relay here; it cannot be used with --addr (start that relay with --cluster-listen instead)")
	case cfg.addr != "" && cfg.adminKeyFile == "":
		return cfg, errors.New("--addr needs --admin-key-file")
	case cfg.addr == "" && (cfg.adminKeyFile != "" || cfg.pid != 0):
		return cfg, errors.New("--admin-key-file and --pid go with --addr")
	}
	return cfg, nil
}

// parseMix reads "op=weight,..." into the mix.
func parseMix(spec string) ([]weighted, error) {
	var mix []weighted
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, found := strings.Cut(part, "=")
		weight := 1
		if found {
			n, err := strconv.Atoi(w)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("mix %q: weight of %s must be a whole number, not %q", spec, name, w)
			}
			weight = n
		}
		if !slices.Contains(opNames, name) {
			return nil, fmt.Errorf("mix %q: unknown operation %q (known: %s)", spec, name, strings.Join(opNames, ", "))
		}
		if slices.ContainsFunc(mix, func(m weighted) bool { return m.op == name }) {
			return nil, fmt.Errorf("mix %q: %s appears twice", spec, name)
		}
		if weight > 0 {
			mix = append(mix, weighted{name, weight})
		}
	}
	if len(mix) == 0 {
		return nil, fmt.Errorf("mix %q: no operation with a positive weight", spec)
	}
	return mix, nil
}
