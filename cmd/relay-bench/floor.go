package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The fan-out floor: what this machine can do at all when one process
// writes a small message to each of many loopback TCP connections and
// another process reads them, with no HTTP, JSON or relay in between. An
// SSE subscriber over HTTP/1.1 is one such connection, so the floor bounds
// what any relay can reach on the same machine.
//
//	relay-bench fanout-floor [-streams 10000] [-rate 100] [-duration 5s] [-size 300]
//
// Each pass writes one message (holding its send time) to every
// connection, using both cores; the reader process times the first
// message of each read. Passes run at -rate per second or as fast as they
// can. The report gives the passes achieved, the CPU per write and per
// read, and the delivery latency percentiles.

// floorReaderArg is the hidden first argument that makes relay-bench the
// floor's reader process.
const floorReaderArg = "fanout-floor-reader"

type floorConfig struct {
	streams  int
	rate     int
	duration time.Duration
	size     int
}

func parseFloorConfig(args []string, stderr io.Writer) (floorConfig, error) {
	fs := flag.NewFlagSet("relay-bench fanout-floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg floorConfig
	fs.IntVar(&cfg.streams, "streams", 10000, "loopback TCP `connections` to fan out to")
	fs.IntVar(&cfg.rate, "rate", 100, "`passes` per second (each writes one message to every connection)")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "how long passes are started")
	fs.IntVar(&cfg.size, "size", 300, "`bytes` per message (at least 8)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: relay-bench fanout-floor [flags]\n\nMeasures this machine's floor for fanning small messages out to many loopback\nTCP connections read by another process, without HTTP or the relay.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case cfg.streams < 1:
		return cfg, errors.New("-streams must be at least 1")
	case cfg.rate < 1:
		return cfg, errors.New("-rate must be at least 1")
	case cfg.duration <= 0:
		return cfg, errors.New("-duration must be positive")
	case cfg.size < 8:
		return cfg, errors.New("-size must be at least 8")
	}
	return cfg, nil
}

// runFloor is the writer side: it starts the reader process, accepts its
// connections and runs the passes.
func runFloor(ctx context.Context, cfg floorConfig, stdout, progress io.Writer) error {
	_, err := measureFloor(ctx, cfg, stdout, progress)
	return err
}

// floorResult is what the floor's reader measured.
type floorResult struct {
	p50, p99, max time.Duration
}

// floorResultPrefix starts the reader's machine-readable result line.
const floorResultPrefix = "#latency-ns "

// measureFloor runs the floor, writes its report to stdout and returns the
// reader's latencies.
func measureFloor(ctx context.Context, cfg floorConfig, stdout, progress io.Writer) (floorResult, error) {
	var res floorResult
	// The reader's error output is copied by another goroutine into the
	// same writer as this function's progress lines.
	progress = &lockedWriter{w: progress}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer ln.Close()
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	reader := exec.CommandContext(ctx, self, floorReaderArg, ln.Addr().String(), strconv.Itoa(cfg.streams))
	reader.Stderr = progress
	out, err := reader.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := reader.Start(); err != nil {
		return res, err
	}
	defer func() { _ = reader.Wait() }()
	fmt.Fprintf(progress, "connecting %d streams ...\n", cfg.streams)
	conns := make([]net.Conn, 0, cfg.streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for len(conns) < cfg.streams {
		c, err := ln.Accept()
		if err != nil {
			return res, err
		}
		conns = append(conns, c)
	}

	fmt.Fprintf(progress, "fanning out at up to %d passes/s for %v ...\n", cfg.rate, cfg.duration)
	msg := make([]byte, cfg.size)
	before := rusage()
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(cfg.rate))
	defer tick.Stop()
	passes := 0
	for time.Since(start) < cfg.duration && ctx.Err() == nil {
		<-tick.C
		binary.LittleEndian.PutUint64(msg, uint64(time.Now().UnixNano()))
		var wg sync.WaitGroup
		const writers = 2 // one per core
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(conns); i += writers {
					_, _ = conns[i].Write(msg)
				}
			}()
		}
		wg.Wait()
		passes++
	}
	elapsed := time.Since(start)
	cpu := rusage() - before
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	result, err := io.ReadAll(out)
	if err != nil {
		return res, err
	}
	// The reader's last line is for this process only.
	if i := bytes.Index(result, []byte(floorResultPrefix)); i >= 0 {
		var p50, p99, maxNs int64
		if _, err := fmt.Sscanf(string(result[i+len(floorResultPrefix):]), "%d %d %d", &p50, &p99, &maxNs); err == nil {
			res = floorResult{p50: time.Duration(p50), p99: time.Duration(p99), max: time.Duration(maxNs)}
		}
		result = result[:i]
	}
	writes := passes * cfg.streams
	fmt.Fprintf(stdout, "fan-out floor: %d streams, %d-byte messages, target %d passes/s\n", cfg.streams, cfg.size, cfg.rate)
	fmt.Fprintf(stdout, "writer: %d passes in %v (%.1f passes/s), %.2f cores, %.2f µs of CPU per write\n",
		passes, elapsed.Round(time.Millisecond), float64(passes)/elapsed.Seconds(), cpu.Seconds()/elapsed.Seconds(), float64(cpu.Nanoseconds())/1e3/float64(writes))
	fmt.Fprintf(stdout, "reader: %s", result)
	if res.p99 == 0 {
		return res, errors.New("the floor's reader reported no latencies")
	}
	return res, nil
}

// runFloorReader is the reader process: it opens the connections, reads
// until the writer closes them and prints one line of results.
func runFloorReader(args []string, stdout io.Writer) error {
	if len(args) != 2 {
		return errors.New("usage: relay-bench " + floorReaderArg + " ADDR STREAMS")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	before := rusage()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		reads     int
		wg        sync.WaitGroup
	)
	for range n {
		c, err := net.Dial("tcp", args[0])
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			r := bufio.NewReaderSize(c, 64<<10)
			buf := make([]byte, 64<<10)
			var local []time.Duration
			count := 0
			for {
				k, err := r.Read(buf)
				if err != nil {
					break
				}
				count++
				if k >= 8 {
					sent := int64(binary.LittleEndian.Uint64(buf))
					local = append(local, time.Since(time.Unix(0, sent)))
				}
			}
			mu.Lock()
			latencies = append(latencies, local...)
			reads += count
			mu.Unlock()
		}()
	}
	wg.Wait()
	cpu := rusage() - before
	if len(latencies) == 0 {
		return errors.New("no message was read")
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		return latencies[int(float64(len(latencies)-1)*p)].Round(100 * time.Microsecond)
	}
	fmt.Fprintf(stdout, "%d reads, %.2f µs of CPU per read; latency of each read's first message p50 %v, p99 %v, max %v\n",
		reads, float64(cpu.Nanoseconds())/1e3/float64(reads), pct(0.5), pct(0.99), pct(1))
	at := func(p float64) int64 { return int64(latencies[int(float64(len(latencies)-1)*p)]) }
	fmt.Fprintf(stdout, "%s%d %d %d\n", floorResultPrefix, at(0.5), at(0.99), at(1))
	return nil
}

// rusage is this process's CPU time so far.
func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
