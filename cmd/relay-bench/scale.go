package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The scale run: many open event streams on one relay, most of them idle,
// a few following an actor that changes at a fixed rate.
//
//	relay-bench scale [--streams 100000] [--followers 1000] [--rate 100] [--duration 10s] [--sources 8]
//
// It starts a relay, then a client process (this program again) that opens
// --streams SSE streams over HTTP/1.1, each on its own connection, spread
// over --sources loopback source addresses (127.0.0.1, 127.0.0.2, ...) so
// that no address runs out of ephemeral ports: --followers of them follow
// Aria Vale (/actor/subscribe?actorUuid=...), the others Brom Ironfist, who
// does not change. Idle streams hold no goroutine in the client either:
// each is a connection read once, up to its `connected` event. Then this
// process changes Aria --rate times per second for --duration; each change
// carries its send time, and the followers time each event's arrival. The
// report gives the events delivered against those expected, the delivery
// latency percentiles, the relay's resident memory with every stream open
// (and per stream), its CPU during the changes, and, measured in the same
// run, the fan-out floor (see floor.go) for --followers connections at the
// same rate, against which the p99 is set.
//
// Every stream costs a descriptor in the relay and one in the client
// process: both need an open-file limit above --streams. The run raises
// its own limit (inherited by both children) when it may (as root, up to
// /proc/sys/fs/nr_open), and otherwise says what `ulimit -n` it needs.

// scaleClientsArg is the hidden first argument that makes relay-bench the
// scale run's client process.
const scaleClientsArg = "scale-clients"

// sentField precedes a change's send time in an event's data.
var sentField = []byte(`"t":"`)

type scaleConfig struct {
	streams   int
	followers int
	rate      int
	duration  time.Duration
	sources   int
	size      int
	relayBin  string
	relayLog  string
}

func parseScaleConfig(args []string, stderr io.Writer) (scaleConfig, error) {
	fs := flag.NewFlagSet("relay-bench scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg scaleConfig
	fs.IntVar(&cfg.streams, "streams", 100000, "open SSE `streams` in all, each on its own HTTP/1.1 connection")
	fs.IntVar(&cfg.followers, "followers", 1000, "`streams` among them that follow the changing actor")
	fs.IntVar(&cfg.rate, "rate", 100, "actor `changes` per second")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long the changes go on")
	fs.IntVar(&cfg.sources, "sources", 8, "loopback source `addresses` the client connections are spread over (127.0.0.1 and up)")
	fs.IntVar(&cfg.size, "floor-size", 300, "`bytes` per message of the fan-out floor (about one change's event)")
	fs.StringVar(&cfg.relayBin, "relay-bin", "", "relay `binary` to start instead of building ./cmd/relay with `go build`")
	fs.StringVar(&cfg.relayLog, "relay-log", "", "`file` for the started relay's log; empty: a temporary file, removed at the end")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: relay-bench scale [flags]\n\nOpens many SSE streams on one relay, a few of them following an actor that\nchanges at a fixed rate, and reports delivery, latency against the fan-out\nfloor, and the relay's memory and CPU. Needs an open-file limit above\n--streams (raised here when allowed).\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.streams < 1:
		return cfg, errors.New("--streams must be at least 1")
	case cfg.followers < 1 || cfg.followers > cfg.streams:
		return cfg, errors.New("--followers must be between 1 and --streams")
	case cfg.rate < 1 || cfg.rate > 10000:
		return cfg, errors.New("--rate must be between 1 and 10000")
	case cfg.duration <= 0:
		return cfg, errors.New("--duration must be positive")
	case cfg.sources < 1 || cfg.sources > 250:
		return cfg, errors.New("--sources must be between 1 and 250")
	case cfg.size < 8:
		return cfg, errors.New("--floor-size must be at least 8")
	}
	return cfg, nil
}

// fileMargin is the descriptors a process needs beyond its streams.
const fileMargin = 1024

// ensureFileLimit makes this process's open-file limit (which the relay
// and the client process inherit) at least need, raising it when allowed.
func ensureFileLimit(need uint64, progress io.Writer) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= need {
		return nil
	}
	want := syscall.Rlimit{Cur: need, Max: max(lim.Max, need)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		nrOpen, _ := os.ReadFile("/proc/sys/fs/nr_open")
		return fmt.Errorf("the run needs %d open files in the relay and in the client process, and the limit is %d (hard %d) and cannot be raised here (%v): run it with `ulimit -n %d` (as root, or after raising the hard limit in /etc/security/limits.conf; the kernel allows at most %s)",
			need, lim.Cur, lim.Max, err, need, strings.TrimSpace(string(nrOpen)))
	}
	fmt.Fprintf(progress, "open-file limit raised from %d (hard %d) to %d\n", lim.Cur, lim.Max, need)
	return nil
}

// checkPorts fails when the source addresses cannot hold the streams'
// connections within the system's ephemeral port range.
func checkPorts(streams, sources int) error {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return nil // not Linux: let connect tell
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return nil
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return nil
	}
	// A tenth of the range is left to everything else.
	perSource := (hi - lo + 1) * 9 / 10
	if streams > perSource*sources {
		return fmt.Errorf("%d streams over %d source addresses need more than the %d ephemeral ports each has (net.ipv4.ip_local_port_range %d-%d): use --sources %d",
			streams, sources, perSource, lo, hi, (streams+perSource-1)/perSource)
	}
	return nil
}

func runScale(ctx context.Context, cfg scaleConfig, stdout, progress io.Writer) error {
	progress = &lockedWriter{w: progress}
	if err := checkPorts(cfg.streams, cfg.sources); err != nil {
		return err
	}
	if err := ensureFileLimit(uint64(cfg.streams+fileMargin), progress); err != nil {
		return err
	}
	loadBefore, _ := readLoadAverage()
	t, err := startTarget(ctx, config{relayBin: cfg.relayBin, relayLog: cfg.relayLog, subscribers: cfg.streams,
		// The connection cap defaults to three quarters of the open-file
		// limit, which is sized for the streams here.
		relayArgs: []string{"--max-conns", "0"}}, progress)
	if err != nil {
		return err
	}
	defer t.stop()
	base := "http://" + t.addr
	startStats, err := readProcStats(t.pid)
	if err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	clients := exec.CommandContext(ctx, self, scaleClientsArg, t.addr, t.adminKey,
		strconv.Itoa(cfg.streams), strconv.Itoa(cfg.followers), strconv.Itoa(cfg.sources))
	clients.Stderr = progress
	stdin, err := clients.StdinPipe()
	if err != nil {
		return err
	}
	out, err := clients.StdoutPipe()
	if err != nil {
		return err
	}
	opening := time.Now()
	if err := clients.Start(); err != nil {
		return err
	}
	defer func() {
		_ = stdin.Close()
		_ = clients.Wait()
	}()
	lines := bufio.NewScanner(out)
	fmt.Fprintf(progress, "opening %d streams (%d following the actor) over %d source addresses ...\n", cfg.streams, cfg.followers, cfg.sources)
	if err := expectLine(lines, "ready"); err != nil {
		return fmt.Errorf("client process: %w", err)
	}
	opened := time.Since(opening)
	// The relay's memory with every stream open and idle.
	time.Sleep(time.Second)
	idle, err := readProcStats(t.pid)
	if err != nil {
		return err
	}

	// One goroutine reads the client process's lines from now on: its
	// progress ("received N") and, once told to stop, its result.
	var received atomic.Int64
	result := make(chan string, 1)
	go func() {
		defer close(result)
		for lines.Scan() {
			line := lines.Text()
			if v, ok := strings.CutPrefix(line, "received "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				received.Store(n)
			} else if v, ok := strings.CutPrefix(line, "#result "); ok {
				result <- v
				return
			}
		}
	}()
	changes := cfg.rate * int(cfg.duration/time.Second)
	if changes < 1 {
		changes = 1
	}
	fmt.Fprintf(progress, "changing the actor %d times at %d/s ...\n", changes, cfg.rate)
	writeStart := time.Now()
	if err := changeActor(ctx, base, t.adminKey, changes, cfg.rate); err != nil {
		return err
	}
	achieved := float64(changes) / time.Since(writeStart).Seconds()
	want := int64(changes) * int64(cfg.followers)
	for deadline := time.Now().Add(30 * time.Second); received.Load() < want && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(writeStart)
	end, err := readProcStats(t.pid)
	if err != nil {
		return err
	}
	// The clients report their latencies once told to stop.
	_ = stdin.Close()
	var res struct {
		events             int64
		p50, p90, p99, max time.Duration
	}
	v, ok := <-result
	if !ok {
		return errors.New("the client process ended without its result")
	}
	var p50, p90, p99, maxNs int64
	if _, err := fmt.Sscanf(v, "%d %d %d %d %d", &res.events, &p50, &p90, &p99, &maxNs); err != nil {
		return fmt.Errorf("client process result %q: %w", v, err)
	}
	res.p50, res.p90, res.p99, res.max = time.Duration(p50), time.Duration(p90), time.Duration(p99), time.Duration(maxNs)
	t.stop()

	fmt.Fprintf(progress, "measuring the fan-out floor for %d streams ...\n", cfg.followers)
	var floorOut bytes.Buffer
	floor, err := measureFloor(ctx, floorConfig{streams: cfg.followers, rate: cfg.rate, duration: cfg.duration, size: cfg.size}, &floorOut, progress)
	if err != nil {
		return fmt.Errorf("fan-out floor: %w", err)
	}
	loadAfter, _ := readLoadAverage()

	relayCPU := end.cpu - idle.cpu
	fmt.Fprintf(stdout, "scale: %d SSE streams over HTTP/1.1 on one relay (%d following an actor changed %d times at %d/s, achieved %.1f/s), opened in %v\n",
		cfg.streams, cfg.followers, changes, cfg.rate, achieved, opened.Round(time.Millisecond))
	fmt.Fprintf(stdout, "delivered: %d of %d events (%d lost)\n", res.events, want, want-res.events)
	fmt.Fprintf(stdout, "latency: p50 %v, p90 %v, p99 %v, max %v\n", res.p50.Round(100*time.Microsecond), res.p90.Round(100*time.Microsecond), res.p99.Round(100*time.Microsecond), res.max.Round(100*time.Microsecond))
	fmt.Fprintf(stdout, "fan-out floor, %d streams in the same run: p50 %v, p99 %v; the relay's p99 is %.2f times the floor's\n",
		cfg.followers, floor.p50.Round(100*time.Microsecond), floor.p99.Round(100*time.Microsecond), float64(res.p99)/float64(max(floor.p99, 1)))
	fmt.Fprintf(stdout, "relay memory: %.1f MiB resident with every stream open (%.1f KiB per stream over the %.1f MiB before any), peak %.1f MiB\n",
		float64(idle.rss)/(1<<20), float64(idle.rss-startStats.rss)/float64(cfg.streams)/1024, float64(startStats.rss)/(1<<20), float64(end.peakRSS)/(1<<20))
	fmt.Fprintf(stdout, "relay CPU while the actor changed: %.2f cores, %.1f µs per delivered event; %.1f s of relay CPU to open the streams\n",
		relayCPU.Seconds()/elapsed.Seconds(), float64(relayCPU.Microseconds())/float64(max(res.events, 1)), (idle.cpu - startStats.cpu).Seconds())
	fmt.Fprintf(stdout, "floor detail: %s", floorOut.String())
	fmt.Fprintf(stdout, "load average: %.2f before, %.2f after\n", loadBefore, loadAfter)
	if max(loadBefore, loadAfter) > busyLoad {
		fmt.Fprintf(stdout, "warning: the machine was busy (load average above %.0f): these figures are not evidence of speed\n", busyLoad)
	}
	if res.events < want {
		return fmt.Errorf("%d of %d events were not delivered", want-res.events, want)
	}
	return nil
}

// expectLine reads lines until one equals want.
func expectLine(lines *bufio.Scanner, want string) error {
	for lines.Scan() {
		if lines.Text() == want {
			return nil
		}
		if msg, ok := strings.CutPrefix(lines.Text(), "error "); ok {
			return errors.New(msg)
		}
	}
	if err := lines.Err(); err != nil {
		return err
	}
	return errors.New("ended before it was ready")
}

// changeActor changes Aria n times at rate per second, each change
// carrying its send time, up to 16 at once.
func changeActor(ctx context.Context, base, key string, n, rate int) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	inFlight := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		inFlight <- struct{}{}
		wg.Go(func() {
			defer func() { <-inFlight }()
			body := fmt.Sprintf(`{"uuid":%q,"data":{"flags.bench.t":"%d","system.attributes.hp.value":%d}}`, ariaUUID, time.Now().UnixNano(), i%50)
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/update", strings.NewReader(body))
			if err != nil {
				failed.Store(err)
				return
			}
			req.Header.Set("x-api-key", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				failed.Store(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed.Store(fmt.Errorf("PUT /update: %s", resp.Status))
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	return nil
}

// runScaleClients is the client process: it opens the streams, says
// "ready", reports "received N" as the followers' events come, and once
// its standard input closes prints the followers' latencies.
func runScaleClients(args []string, stdout io.Writer) error {
	if len(args) != 5 {
		return errors.New("usage: relay-bench " + scaleClientsArg + " ADDR KEY STREAMS FOLLOWERS SOURCES")
	}
	addr, key := args[0], args[1]
	streams, err1 := strconv.Atoi(args[2])
	followers, err2 := strconv.Atoi(args[3])
	sources, err3 := strconv.Atoi(args[4])
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	out := &lockedWriter{w: stdout}
	follow := []byte("GET /actor/subscribe?actorUuid=" + ariaUUID + " HTTP/1.1\r\nHost: relay\r\nX-Api-Key: " + key + "\r\nAccept: text/event-stream\r\n\r\n")
	idle := []byte("GET /actor/subscribe?actorUuid=" + bromUUID + " HTTP/1.1\r\nHost: relay\r\nX-Api-Key: " + key + "\r\nAccept: text/event-stream\r\n\r\n")

	var (
		next     atomic.Int64
		opened   atomic.Int64
		received atomic.Int64
		mu       sync.Mutex
		conns    = make([]net.Conn, 0, streams)
		lat      [][]time.Duration
		firstErr error
		wg       sync.WaitGroup
		readers  sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	const workers = 64
	for range workers {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for {
				i := int(next.Add(1)) - 1
				if i >= streams {
					return
				}
				mu.Lock()
				stop := firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
				src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%sources))}
				c, err := (&net.Dialer{LocalAddr: src, Timeout: 30 * time.Second}).Dial("tcp", addr)
				if err != nil {
					fail(fmt.Errorf("stream %d from %v: %w", i, src.IP, err))
					return
				}
				req := idle
				if i < followers {
					req = follow
				}
				rest, err := openedStream(c, req, buf)
				if err != nil {
					c.Close()
					fail(fmt.Errorf("stream %d: %w", i, err))
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				if i < followers {
					readers.Go(func() {
						l := readFollower(c, rest, &received)
						mu.Lock()
						lat = append(lat, l)
						mu.Unlock()
					})
				}
				if n := opened.Add(1); n%10000 == 0 {
					fmt.Fprintf(os.Stderr, "%d streams open\n", n)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		fmt.Fprintf(out, "error %v\n", firstErr)
		for _, c := range conns {
			c.Close()
		}
		return firstErr
	}
	fmt.Fprintln(out, "ready")
	// Progress for the parent, until it closes this process's input.
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(out, "received %d\n", received.Load())
			}
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
	close(done)
	for _, c := range conns {
		c.Close()
	}
	readers.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		fmt.Fprintf(out, "#result 0 0 0 0 0\n")
		return nil
	}
	slices.Sort(all)
	pct := func(p float64) int64 { return int64(all[int(float64(len(all)-1)*p)]) }
	fmt.Fprintf(out, "#result %d %d %d %d %d\n", len(all), pct(0.5), pct(0.9), pct(0.99), pct(1))
	return nil
}

// openedStream sends a stream's request on c and reads its answer up to
// the `connected` event; it returns what was read after that.
func openedStream(c net.Conn, req, buf []byte) ([]byte, error) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	var got []byte
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("reading the answer: %w (%q)", err, got)
		}
		got = append(got, buf[:n]...)
		if len(got) >= 12 && !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
			return nil, fmt.Errorf("answer %q", got)
		}
		if i := bytes.Index(got, []byte("event: connected\n")); i >= 0 {
			if j := bytes.Index(got[i:], []byte("\n\n")); j >= 0 {
				return append([]byte(nil), got[i+j+2:]...), nil
			}
		}
	}
}

// readFollower reads a following stream until it ends, timing each
// change's event from its send time.
func readFollower(c net.Conn, start []byte, received *atomic.Int64) []time.Duration {
	var lat []time.Duration
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(start), c), 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return lat
		}
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		i := bytes.Index(line, sentField)
		if i < 0 {
			continue
		}
		var sent int64
		for _, ch := range line[i+len(sentField):] {
			if ch < '0' || ch > '9' {
				break
			}
			sent = sent*10 + int64(ch-'0')
		}
		lat = append(lat, time.Since(time.Unix(0, sent)))
		received.Add(1)
	}
}
