package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// runBench starts or targets the relay, creates the keys, runs the
// warm-up and the measured phase (and the baseline's, with --baseline),
// and returns the report. Progress goes to progress.
func runBench(ctx context.Context, cfg config, progress io.Writer) (*report, error) {
	t, err := startTarget(ctx, cfg, progress)
	if err != nil {
		return nil, err
	}
	if t.stop != nil {
		defer t.stop()
	}
	base := "http://" + t.addr
	setup := &http.Client{Timeout: 30 * time.Second}
	keys, err := createKeys(ctx, setup, base, t.adminKey)
	defer func() {
		if err := revokeKeys(setup, base, t.adminKey, keys); err != nil {
			fmt.Fprintln(progress, "revoking the run's keys:", err)
		}
	}()
	if err != nil {
		return nil, err
	}

	var callers []caller
	if cfg.grpc {
		// The concurrent calls share --grpc-conns HTTP/2 connections
		// (one by default, as a gRPC client normally does), each a client
		// connection of its own.
		conns := make([]*grpc.ClientConn, cfg.grpcConns)
		for i := range conns {
			conn, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				// grpc-go's default pool hands a 33 KB answer a 1 MiB
				// buffer and clears it; finer classes spare the client
				// most of that (the relay does the same for its own).
				experimental.WithBufferPool(receivePool),
				grpc.WithDefaultCallOptions(grpc.ForceCodecV2(clientCodec{encoding.GetCodecV2(grpcproto.Name)})))
			if err != nil {
				return nil, err
			}
			defer conn.Close()
			conns[i] = conn
		}
		for i := range cfg.concurrency {
			callers = append(callers, newGRPCCaller(conns[i%len(conns)], keys))
		}
	} else {
		for range cfg.concurrency {
			c := newRESTCaller(base, keys)
			defer c.close()
			callers = append(callers, c)
		}
	}

	var subs *subscribers
	if cfg.subscribers > 0 {
		fmt.Fprintf(progress, "opening %d SSE subscribers ...\n", cfg.subscribers)
		if subs, err = openSubscribers(ctx, base, keys.all, cfg.subscribers); err != nil {
			return nil, err
		}
		defer subs.close()
	}

	rep := &report{
		Target: t.addr, Protocol: "REST (HTTP/1.1 keep-alive)", Concurrency: cfg.concurrency,
		DurationSeconds: cfg.duration.Seconds(), WarmupSeconds: cfg.warmup.Seconds(), Mix: mixString(cfg.mix),
		Subscribers: cfg.subscribers, RelayPID: t.pid,
	}
	if cfg.grpc {
		rep.Protocol = "gRPC (h2c, one connection)"
		if cfg.grpcConns > 1 {
			rep.Protocol = fmt.Sprintf("gRPC (h2c, %d connections)", cfg.grpcConns)
		}
	}
	if cfg.rate > 0 {
		rep.RatePerSecond = cfg.rate
	}
	if cfg.settle {
		if _, _, err := waitForQuiet(ctx, "the relay", defaultSettle(cfg.settleMax), progress); err != nil {
			return nil, err
		}
	}
	if cfg.warmup > 0 {
		fmt.Fprintf(progress, "warming up for %v ...\n", cfg.warmup)
		runPhase(ctx, cfg, callers, cfg.mix, cfg.warmup)
	}
	rep.LoadAverageBefore = loadAverageNow(progress, "before the measurement")
	var before procStats
	if t.pid != 0 {
		if before, err = readProcStats(t.pid); err != nil {
			return nil, fmt.Errorf("relay process %d: %w", t.pid, err)
		}
	}
	var eventsBefore int64
	if subs != nil {
		eventsBefore = subs.events.Load()
	}
	if cfg.rate > 0 {
		fmt.Fprintf(progress, "measuring %s open-loop at %g requests/s over %d connections for %v ...\n", rep.Mix, cfg.rate, cfg.concurrency, cfg.duration)
	} else {
		fmt.Fprintf(progress, "measuring %s at concurrency %d for %v ...\n", rep.Mix, cfg.concurrency, cfg.duration)
	}
	var profiled func() error
	if t.pprof != "" {
		profiled = profileCPU(t.pprof, cfg.duration, cfg.cpuProfile)
	}
	watch := startCPUWatch(t.pid)
	genBefore := selfCPU()
	phase := runPhase(ctx, cfg, callers, cfg.mix, cfg.duration)
	genCPU := selfCPU() - genBefore
	rep.OtherCPUCores = watch.otherCores(phase.elapsed)
	warnQuietness(progress, "the relay's measurement", rep.LoadAverageBefore, rep.OtherCPUCores)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if profiled != nil {
		if err := profiled(); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "wrote the relay's CPU profile to %s\n", cfg.cpuProfile)
	}
	rep.ElapsedSeconds = phase.elapsed.Seconds()
	if t.pid != 0 {
		after, err := readProcStats(t.pid)
		if err != nil {
			return nil, fmt.Errorf("relay process %d: %w", t.pid, err)
		}
		rep.RelayCPUSeconds = (after.cpu - before.cpu).Seconds()
		rep.RelayPeakRSSBytes = after.peakRSS
	}
	if subs != nil {
		rep.SubscriberEvents = subs.events.Load() - eventsBefore
		if err := subs.err(); err != nil {
			rep.SubscriberError = err.Error()
		}
	}
	rep.addPhase(cfg.mix, phase)
	if rep.RelayCPUSeconds > 0 && rep.Total.Requests > 0 {
		rep.RelayCPUMicrosPerRequest = rep.RelayCPUSeconds * 1e6 / float64(rep.Total.Requests)
	}
	if rep.Total.Requests > 0 {
		rep.GeneratorCPUMicrosPerRequest = float64(genCPU.Microseconds()) / float64(rep.Total.Requests)
	}

	if cfg.baseline {
		if err := runBaseline(ctx, cfg, base, keys, t.pid, rep, progress); err != nil {
			return nil, err
		}
	}
	if cfg.fsyncFloor {
		if err := runFsyncFloor(ctx, cfg, rep, progress); err != nil {
			return nil, err
		}
	}
	rep.LoadAverageAfter = loadAverageNow(progress, "after the measurement")
	return rep, nil
}

// runPhase drives the callers for d: open-loop at --rate when it is set,
// else closed-loop.
func runPhase(ctx context.Context, cfg config, callers []caller, mix []weighted, d time.Duration) phaseResult {
	if cfg.rate > 0 {
		return driveOpen(ctx, callers, mix, d, cfg.rate)
	}
	return drive(ctx, callers, mix, d)
}

// loadAverageNow reads the one-minute load average and tells progress.
// It returns -1 when the system does not tell.
func loadAverageNow(progress io.Writer, when string) float64 {
	load, err := readLoadAverage()
	if err != nil {
		fmt.Fprintf(progress, "one-minute load average %s: unknown (%v)\n", when, err)
		return -1
	}
	fmt.Fprintf(progress, "one-minute load average %s: %.2f\n", when, load)
	return load
}

// warnQuietness tells progress how much CPU other processes used during a
// measured phase, and warns when the phase's figures are no evidence (see
// quietnessWarning).
func warnQuietness(progress io.Writer, phase string, loadBefore, otherCores float64) {
	fmt.Fprintf(progress, "other processes' CPU during %s: %s\n", phase, coresText(otherCores))
	if w := quietnessWarning(loadBefore, otherCores); w != "" {
		fmt.Fprintf(progress, "WARNING: %s: %s\n", phase, w)
	}
}

// receivePool is the gRPC clients' pool of receive buffers: powers of two
// from 256 bytes to 1 MiB.
var receivePool = func() mem.BufferPool {
	pool, err := mem.NewBinaryTieredBufferPool(8, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	if err != nil {
		panic(err)
	}
	return pool
}()

// runBaseline serves the relay's GET /get bytes from a bare handler and
// drives it as the relay's get was driven.
func runBaseline(ctx context.Context, cfg config, base string, keys benchKeys, relayPID int, rep *report, progress io.Writer) error {
	body, contentType, err := fetchGet(ctx, base, keys)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	srv, err := startBaseline(body, contentType)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	defer srv.close()
	var callers []caller
	for range cfg.concurrency {
		c := newRESTCaller("http://"+srv.addr, keys)
		defer c.close()
		callers = append(callers, c)
	}
	mix := []weighted{{"get", 1}}
	if cfg.settle {
		// The relay's phase just raised the load average by itself.
		if _, _, err := waitForQuiet(ctx, "the baseline", defaultSettle(cfg.settleMax), progress); err != nil {
			return err
		}
	}
	if cfg.warmup > 0 {
		fmt.Fprintf(progress, "warming up the baseline for %v ...\n", cfg.warmup)
		runPhase(ctx, cfg, callers, mix, cfg.warmup)
	}
	loadBefore := loadAverageNow(progress, "before the baseline's measurement")
	fmt.Fprintf(progress, "measuring the baseline (%d bytes per answer) for %v ...\n", len(body), cfg.duration)
	// The relay idles meanwhile; its CPU still counts as its own.
	watch := startCPUWatch(relayPID)
	phase := runPhase(ctx, cfg, callers, mix, cfg.duration)
	if err := ctx.Err(); err != nil {
		return err
	}
	rep.addBaseline(phase, len(body))
	rep.BaselineLoadAverageBefore = &loadBefore
	other := watch.otherCores(phase.elapsed)
	rep.BaselineOtherCPUCores = &other
	warnQuietness(progress, "the baseline's measurement", loadBefore, other)
	return nil
}
