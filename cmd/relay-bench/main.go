// Command relay-bench is a load generator for the relay. It starts a relay
// in a child process (or targets a running one), creates its own API keys,
// drives a weighted mix of REST or gRPC calls at a chosen concurrency for a
// chosen time, and reports each operation's throughput, latency
// percentiles and errors together with the relay's CPU time and peak
// memory. With --baseline it also drives a bare net/http handler serving
// the same bytes as the relay's GET /get, so the relay's read throughput
// can be stated as a fraction of what the machine serves at all.
//
// Usage:
//
//	relay-bench [flags]
//	relay-bench fanout-floor [flags]   (see floor.go)
//	relay-bench uploads [flags]        (see uploads.go)
//	relay-bench scale [flags]          (see scale.go)
//
// Examples:
//
//	relay-bench --only get --baseline
//	relay-bench --mix get=70,search=10,update=10,skill=5,rest=5 --subscribers 100
//	relay-bench --grpc --duration 30s
//	relay-bench --addr 127.0.0.1:8080 --admin-key-file data/admin.key --pid 1234
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay-bench:", err)
		os.Exit(1)
	}
}

// run parses the flags, runs the benchmark and prints its report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "fanout-floor":
			cfg, err := parseFloorConfig(args[1:], stderr)
			if err != nil {
				return err
			}
			return runFloor(ctx, cfg, stdout, stderr)
		case "uploads":
			cfg, err := parseUploadsConfig(args[1:], stderr)
			if err != nil {
				return err
			}
			return runUploads(ctx, cfg, stdout, stderr)
		case "scale":
			cfg, err := parseScaleConfig(args[1:], stderr)
			if err != nil {
				return err
			}
			return runScale(ctx, cfg, stdout, stderr)
		case floorReaderArg:
			return runFloorReader(args[1:], stdout)
		case scaleClientsArg:
			return runScaleClients(args[1:], stdout)
		}
	}
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	rep, err := runBench(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	rep.writeTable(stdout)
	if cfg.jsonPath != "" {
		return rep.writeJSON(cfg.jsonPath, stdout)
	}
	return nil
}
