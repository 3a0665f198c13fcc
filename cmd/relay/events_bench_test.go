package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/events"
)

// BenchmarkEventFanout measures the event streams' fan-out: many concurrent
// SSE subscribers on the demo world (half on /actor/subscribe for Aria,
// half on /hooks/subscribe for updateActor, all GM-level) while a writer
// changes Aria at a fixed rate. Each change carries its send time, so the
// latency measured is from the write request to the event's arrival at the
// subscriber, through the whole relay. It reports the p50/p99/max delivery
// latency, the events lost (expected minus received), the changes per
// second the writer achieved, the CPU this process used while writing and
// delivering ("cores": the relay's alone when the subscribers run in a
// child process), and the memory per idle subscriber: heap and stacks of
// the process after a collection, divided by the subscribers (the relay's
// alone with a child process; relay and clients together otherwise). With
// a child process it also reports the child's CPU ("client-cores") and the
// CPU per delivered event of each side ("relay-ns/event",
// "client-ns/event"), which stay comparable when other work shares the
// machine; the child logs more latency percentiles and how many events each
// read brought, and the benchmark logs the update requests' own latency.
//
// It is not part of the default test run. Knobs (environment):
// RELAY_BENCH_SUBSCRIBERS (default 1000), RELAY_BENCH_RATE (changes per
// second, default 100), RELAY_BENCH_SECONDS (default 10), RELAY_BENCH_HTTP1
// (1: one TCP connection per subscriber, as browsers without HTTP/2;
// otherwise h2c, many streams per connection, which a single test process
// needs past about 9,000 subscribers because of its file limit),
// RELAY_BENCH_COALESCE (the relay's --event-coalesce window, default
// 10ms), RELAY_BENCH_CLIENTS (by default the subscribers run in a child
// process, so that the relay's CPU use ("cores") and memory are measured
// alone; "inprocess" runs them in the relay's process), RELAY_BENCH_CLIENT
// (the child's HTTP/1.1 client: by default raw sockets read by two epoll
// loops; "goroutines": one goroutine and connection per
// subscriber, reading raw HTTP/1.1; "nethttp": net/http's client, always
// used over h2c).
//
//	RELAY_BENCH_SUBSCRIBERS=10000 go test ./cmd/relay/ -run '^$' -bench EventFanout -benchtime 1x
func BenchmarkEventFanout(b *testing.B) {
	subscribers := envInt("RELAY_BENCH_SUBSCRIBERS", 1000)
	rate := envInt("RELAY_BENCH_RATE", 100)
	seconds := envInt("RELAY_BENCH_SECONDS", 10)
	http1 := os.Getenv("RELAY_BENCH_HTTP1") == "1"
	inProcess := os.Getenv("RELAY_BENCH_CLIENTS") == "inprocess"
	coalesce := benchDuration("RELAY_BENCH_COALESCE", events.DefaultCoalesce)

	cfg := node.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Demo: true, NodeID: 1, MaxBodyBytes: 1 << 20,
		ScriptTimeout: time.Second, MaxStreamsPerKey: subscribers + 10, MaxStreamsPerWorld: subscribers + 10,
		EventCoalesce: coalesce}
	r, err := node.Start(context.Background(), cfg, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close(context.Background()) })
	base := "http://" + r.Addr()
	client := benchStreamClient(http1)

	for range b.N {
		memBefore := memInUse()
		stackBefore := stackInUse()
		start := time.Now()
		var subs fanoutSubscribers
		if inProcess {
			subs = startInProcessSubscribers(client, base, r.AdminKey(), subscribers)
		} else {
			subs = startSubscriberProcess(b, base, r.AdminKey(), subscribers, http1)
		}
		b.Logf("%d subscribers connected in %v (%s, clients %s)", subscribers, time.Since(start).Round(time.Millisecond),
			map[bool]string{true: "HTTP/1.1", false: "h2c"}[http1], map[bool]string{true: "in the relay's process", false: "in a child process"}[inProcess])
		memIdle := memInUse()
		perSub := float64(memIdle-memBefore) / float64(subscribers)
		b.Logf("idle: %.1f KiB per subscriber, of which %.1f KiB goroutine stacks", perSub/1024, float64(stackInUse()-stackBefore)/float64(subscribers)/1024)

		changes := rate * seconds
		// The writer keeps to its schedule whatever the relay's answer time
		// (up to 16 writes in flight), so that a slow answer does not lower
		// the rate of changes; achieved reports the rate kept.
		writer := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		tick := time.NewTicker(time.Second / time.Duration(rate))
		var cpuStart syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpuStart)
		childStart := subs.cpu()
		writeStart := time.Now()
		inFlight := make(chan struct{}, 16)
		var writes sync.WaitGroup
		var writeErr atomic.Value
		var writeMu sync.Mutex
		var writeTimes []time.Duration
		for i := range changes {
			<-tick.C
			inFlight <- struct{}{}
			writes.Add(1)
			go func() {
				defer func() { <-inFlight; writes.Done() }()
				body := fmt.Sprintf(`{"uuid":%q,"data":{"flags.bench.t":"%d","system.attributes.hp.value":%d}}`, relaytest.AriaUUID, time.Now().UnixNano(), i%50)
				req, _ := http.NewRequest("PUT", base+"/update", strings.NewReader(body))
				req.Header.Set("x-api-key", r.AdminKey())
				sent := time.Now()
				resp, err := writer.Do(req)
				writeMu.Lock()
				writeTimes = append(writeTimes, time.Since(sent))
				writeMu.Unlock()
				if err != nil {
					writeErr.Store(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					writeErr.Store(fmt.Errorf("update: %d", resp.StatusCode))
				}
			}()
		}
		tick.Stop()
		writes.Wait()
		if err, _ := writeErr.Load().(error); err != nil {
			b.Fatal(err)
		}
		achieved := float64(changes) / time.Since(writeStart).Seconds()
		wt := summarize(writeTimes)
		b.Logf("update requests: p50 %v p99 %v max %v", wt.p50, wt.p99, wt.max)
		want := int64(changes) * int64(subscribers)
		deadline := time.Now().Add(30 * time.Second)
		for subs.received() < want && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		elapsed := time.Since(writeStart)
		// The child reports its CPU every 20 ms: wait for a report made
		// after the end.
		time.Sleep(50 * time.Millisecond)
		childCPU := subs.cpu() - childStart
		var cpuEnd syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpuEnd)
		cpu := time.Duration(cpuEnd.Utime.Nano() + cpuEnd.Stime.Nano() - cpuStart.Utime.Nano() - cpuStart.Stime.Nano())
		res := subs.stop()
		b.ReportMetric(float64(res.p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(res.p99.Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(res.max.Microseconds())/1000, "max-ms")
		b.ReportMetric(float64(want-res.count), "lost-events")
		b.ReportMetric(perSub/1024, "KiB/idle-sub")
		b.ReportMetric(achieved, "changes/s")
		b.ReportMetric(cpu.Seconds()/elapsed.Seconds(), "cores")
		delivered := float64(max(res.count, 1))
		b.ReportMetric(float64(cpu.Nanoseconds())/delivered, "relay-ns/event")
		if !inProcess {
			b.ReportMetric(childCPU.Seconds()/elapsed.Seconds(), "client-cores")
			b.ReportMetric(float64(childCPU.Nanoseconds())/delivered, "client-ns/event")
		}
		who := "relay and clients"
		if !inProcess {
			who = "relay only"
		}
		b.Logf("%d subscribers, %d changes at %d/s (achieved %.1f/s): %d of %d events delivered; latency p50 %v p99 %v max %v; %.1f KiB per idle subscriber (%s); this process used %.2f cores (%s); coalescing window %v",
			subscribers, changes, rate, achieved, res.count, want, res.p50, res.p99, res.max, perSub/1024, who, cpu.Seconds()/elapsed.Seconds(), who, coalesce)
	}
}

// fanoutResult is what the subscribers saw: how many events, and their
// delivery latency.
type fanoutResult struct {
	count         int64
	p50, p99, max time.Duration
}

// fanoutSubscribers are the benchmark's subscribers, once connected.
type fanoutSubscribers interface {
	// received is the number of bench events received so far.
	received() int64
	// cpu is the CPU time the subscribers' process used so far, when they
	// run in a process of their own; 0 otherwise.
	cpu() time.Duration
	// stop closes the streams and returns what they saw.
	stop() fanoutResult
}

// inProcessSubscribers read their streams in the relay's own process.
type inProcessSubscribers struct {
	cancel    context.CancelFunc
	done      sync.WaitGroup
	mu        sync.Mutex
	latencies []time.Duration
	count     atomic.Int64
}

func startInProcessSubscribers(client *http.Client, base, key string, n int) *inProcessSubscribers {
	s := &inProcessSubscribers{}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	var connected sync.WaitGroup
	connected.Add(n)
	s.done.Add(n)
	for i := range n {
		go func() {
			defer s.done.Done()
			local := benchSubscriber(ctx, client, base+benchPath(i), key, &connected, &s.count)
			s.mu.Lock()
			s.latencies = append(s.latencies, local...)
			s.mu.Unlock()
		}()
	}
	connected.Wait()
	return s
}

func (s *inProcessSubscribers) received() int64 { return s.count.Load() }

func (s *inProcessSubscribers) cpu() time.Duration { return 0 }

func (s *inProcessSubscribers) stop() fanoutResult {
	s.cancel()
	s.done.Wait()
	return summarize(s.latencies)
}

// benchPath is subscriber i's stream: half follow Aria on the actor
// channel, half updateActor hooks.
func benchPath(i int) string {
	if i%2 == 1 {
		return "/hooks/subscribe?hooks=updateActor"
	}
	return "/actor/subscribe?actorUuid=" + relaytest.AriaUUID
}

func summarize(latencies []time.Duration) fanoutResult {
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(float64(len(latencies))*p))]
	}
	return fanoutResult{count: int64(len(latencies)), p50: pct(0.5), p99: pct(0.99), max: pct(1)}
}

// processSubscribers read their streams in a child process (this test
// binary again, running TestFanoutSubscriberProcess), so that the relay's
// CPU and memory are measured alone. The child reports on its standard
// output: "connected", then "received <n>" lines, then, once its standard
// input closes, "result <count> <p50> <p99> <max>" (nanoseconds).
type processSubscribers struct {
	b     *testing.B
	cmd   *exec.Cmd
	stdin io.WriteCloser
	count atomic.Int64
	// cpuUsed is the child's CPU time so far (nanoseconds), as last
	// reported.
	cpuUsed atomic.Int64
	final   chan fanoutResult
}

func startSubscriberProcess(b *testing.B, base, key string, n int, http1 bool) *processSubscribers {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFanoutSubscriberProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "RELAY_FANOUT_CHILD=1", "RELAY_FANOUT_BASE="+base, "RELAY_FANOUT_KEY="+key,
		"RELAY_FANOUT_SUBSCRIBERS="+strconv.Itoa(n), "RELAY_BENCH_HTTP1="+map[bool]string{true: "1", false: "0"}[http1])
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s := &processSubscribers{b: b, cmd: cmd, stdin: stdin, final: make(chan fanoutResult, 1)}
	connected := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "connected":
				close(connected)
			case len(f) == 3 && f[0] == "received":
				n, _ := strconv.ParseInt(f[1], 10, 64)
				cpu, _ := strconv.ParseInt(f[2], 10, 64)
				s.cpuUsed.Store(cpu)
				s.count.Store(n)
			case len(f) == 5 && f[0] == "result":
				var v [4]int64
				for i := range v {
					v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
				}
				s.final <- fanoutResult{count: v[0], p50: time.Duration(v[1]), p99: time.Duration(v[2]), max: time.Duration(v[3])}
			}
		}
	}()
	select {
	case <-connected:
	case <-time.After(5 * time.Minute):
		b.Fatal("the subscriber process did not connect")
	}
	return s
}

func (s *processSubscribers) received() int64 { return s.count.Load() }

func (s *processSubscribers) cpu() time.Duration { return time.Duration(s.cpuUsed.Load()) }

func (s *processSubscribers) stop() fanoutResult {
	s.stdin.Close()
	var res fanoutResult
	select {
	case res = <-s.final:
	case <-time.After(time.Minute):
		s.b.Error("the subscriber process gave no result")
		_ = s.cmd.Process.Kill()
	}
	_ = s.cmd.Wait()
	return res
}

// TestFanoutSubscriberProcess is the child process of BenchmarkEventFanout;
// it does nothing in a normal test run.
func TestFanoutSubscriberProcess(t *testing.T) {
	if os.Getenv("RELAY_FANOUT_CHILD") != "1" {
		t.Skip("the subscriber process of BenchmarkEventFanout")
	}
	n := envInt("RELAY_FANOUT_SUBSCRIBERS", 1000)
	base, key := os.Getenv("RELAY_FANOUT_BASE"), os.Getenv("RELAY_FANOUT_KEY")
	var subs fanoutSubscribers
	http1 := os.Getenv("RELAY_BENCH_HTTP1") == "1"
	switch client := os.Getenv("RELAY_BENCH_CLIENT"); {
	case http1 && client == "goroutines":
		lean, err := startLeanSubscribers(strings.TrimPrefix(base, "http://"), key, n)
		if err != nil {
			t.Fatal(err)
		}
		subs = lean
	case http1 && client != "nethttp":
		polled, err := startPollSubscribers(strings.TrimPrefix(base, "http://"), key, n)
		if err != nil {
			t.Fatal(err)
		}
		subs = polled
	default:
		subs = startInProcessSubscribers(benchStreamClient(os.Getenv("RELAY_BENCH_HTTP1") == "1"), base, key, n)
	}
	fmt.Println("connected")
	stopped := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stopped)
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-stopped:
			running = false
		case <-tick.C:
		}
		fmt.Println("received", subs.received(), int64(processCPU()))
	}
	if lean, ok := subs.(*leanSubscribers); ok {
		// How many events each of the relay's writes carried, roughly.
		fmt.Fprintf(os.Stderr, "subscribers: %d reads brought %d bench events (%.2f per read)\n", lean.reads.Load(), lean.received(), float64(lean.received())/float64(max(lean.reads.Load(), 1)))
	}
	res := subs.stop()
	fmt.Println("result", res.count, int64(res.p50), int64(res.p99), int64(res.max))
}

// benchSubscriber reads one stream until ctx ends and returns the latency
// of each event it received.
func benchSubscriber(ctx context.Context, client *http.Client, url, key string, connected *sync.WaitGroup, received *atomic.Int64) []time.Duration {
	var once sync.Once
	ready := func() { once.Do(connected.Done) }
	defer ready()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("x-api-key", key)
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	// Frames are counted without parsing their JSON: a data line holding
	// `"t":"<nanoseconds>"` is a bench change, whose send time gives the
	// latency. Lines are read in place from one buffer per subscriber.
	var out []time.Duration
	br := bufio.NewReaderSize(resp.Body, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == bufio.ErrBufferFull {
				continue // a long line (none in this bench): skip its rest
			}
			return out
		}
		if !bytes.HasPrefix(line, dataPrefix) {
			continue
		}
		if bytes.Contains(line, clientIDField) {
			ready()
			continue
		}
		i := bytes.Index(line, sentField)
		if i < 0 {
			continue
		}
		var sent int64
		for _, c := range line[i+len(sentField):] {
			if c < '0' || c > '9' {
				break
			}
			sent = sent*10 + int64(c-'0')
		}
		out = append(out, time.Since(time.Unix(0, sent)))
		received.Add(1)
	}
}

var (
	dataPrefix    = []byte("data: ")
	clientIDField = []byte(`"clientId"`)
	sentField     = []byte(`"t":"`)
)

// benchStreamClient is an HTTP client for many concurrent streams.
func benchStreamClient(http1 bool) *http.Client {
	if http1 {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, MaxConnsPerHost: 0, DisableCompression: true}}
	}
	t := &http.Transport{DisableCompression: true, DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, tls.RecordHeaderError{Msg: "plain-text streams only"}
	}}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}
}

// stackInUse is the goroutine stack memory in use.
func stackInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}

// memInUse is the heap and stack memory in use after a collection.
func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// leanSubscribers read HTTP/1.1 event streams with as little CPU as a
// client can: one TCP connection and one goroutine per subscriber, the
// request written by hand, and the response read into one buffer in which
// the chunked framing is undone and data lines are found by a byte scan.
// The benchmark's child process uses them, so that the subscribers' CPU
// competes as little as possible with the relay's on a small machine.
type leanSubscribers struct {
	conns []net.Conn
	done  sync.WaitGroup
	mu    sync.Mutex
	// latencies are the delivery latencies, in microseconds.
	latencies []int32
	count     atomic.Int64
	// reads counts the reads that brought bench events: the relay's
	// writes, roughly.
	reads atomic.Int64
}

// startLeanSubscribers connects n subscribers to the relay at addr and
// returns once each has received its `connected` event.
func startLeanSubscribers(addr, key string, n int) (*leanSubscribers, error) {
	s := &leanSubscribers{conns: make([]net.Conn, n)}
	var connected sync.WaitGroup
	connected.Add(n)
	var failed atomic.Value
	// Connect in a few waves, so that the listen backlog never overflows.
	sem := make(chan struct{}, 256)
	for i := range n {
		sem <- struct{}{}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("subscriber %d: %w", i, err)
		}
		s.conns[i] = conn
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			ready := func() { <-sem; connected.Done() }
			lat, err := leanSubscriber(conn, addr, benchPath(i), key, ready, &s.count, &s.reads)
			if err != nil {
				failed.Store(fmt.Errorf("subscriber %d: %w", i, err))
			}
			s.mu.Lock()
			s.latencies = append(s.latencies, lat...)
			s.mu.Unlock()
		}()
	}
	connected.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *leanSubscribers) received() int64 { return s.count.Load() }

func (s *leanSubscribers) cpu() time.Duration { return processCPU() }

func (s *leanSubscribers) stop() fanoutResult {
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.done.Wait()
	durations := make([]time.Duration, len(s.latencies))
	for i, us := range s.latencies {
		durations[i] = time.Duration(us) * time.Microsecond
	}
	res := summarize(durations)
	if n := len(durations); n > 0 {
		// summarize sorted them.
		at := func(p float64) time.Duration { return durations[min(n-1, int(float64(n)*p))] }
		fmt.Fprintf(os.Stderr, "subscribers: latency p10 %v p50 %v p90 %v p95 %v p99 %v p99.9 %v\n", at(0.1), at(0.5), at(0.9), at(0.95), at(0.99), at(0.999))
	}
	return res
}

// leanSubscriber reads one stream on conn until it closes and returns the
// latency of each bench event, in microseconds. It calls ready once the
// `connected` event came, or once the stream failed.
func leanSubscriber(conn net.Conn, host, path, key string, ready func(), received, reads *atomic.Int64) (lat []int32, err error) {
	var once sync.Once
	defer once.Do(ready)
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + key + "\r\nAccept: text/event-stream\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	// The response head.
	var head []byte
	var body []byte
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		head = append(head, buf[:n]...)
		if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
			body = head[i+4:]
			head = head[:i]
			break
		}
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		line, _, _ := bytes.Cut(head, []byte("\r\n"))
		return nil, fmt.Errorf("status %q", line)
	}
	sc := sseScanner{chunked: bytes.Contains(bytes.ToLower(head), []byte("transfer-encoding: chunked"))}
	onData := func(line []byte) {
		if bytes.Contains(line, clientIDField) {
			once.Do(ready)
			return
		}
		if sent, ok := benchSendTime(line); ok {
			lat = append(lat, int32(time.Since(time.Unix(0, sent))/time.Microsecond))
		}
	}
	sc.feed(body, onData)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			before := len(lat)
			if err := sc.feed(buf[:n], onData); err != nil {
				return lat, err
			}
			if got := len(lat) - before; got > 0 {
				received.Add(int64(got))
				reads.Add(1)
			}
		}
		if err != nil {
			return lat, nil // closed: the end of the run
		}
	}
}

// benchSendTime finds a bench change's send time (`"t":"<nanoseconds>"`) in
// a data line.
func benchSendTime(line []byte) (int64, bool) {
	i := bytes.Index(line, sentField)
	if i < 0 {
		return 0, false
	}
	var sent int64
	for _, c := range line[i+len(sentField):] {
		if c < '0' || c > '9' {
			break
		}
		sent = sent*10 + int64(c-'0')
	}
	return sent, true
}

// sseScanner finds the data lines of an SSE body that arrives in pieces of
// any size, undoing the chunked transfer coding when the body has it.
type sseScanner struct {
	chunked bool
	// left is what remains of the current chunk's data; when 0, a chunk
	// size line (after the previous chunk's CRLF) comes next.
	left int
	// size accumulates the chunk size line being read; inSize is set
	// while one is read, skipCRLF counts the CRLF bytes after a chunk's
	// data still to skip.
	size     int
	inSize   bool
	inExt    bool
	skipCRLF int
	// partial is a line that continues in the next piece.
	partial []byte
}

// feed scans the next piece of the body and calls onData with each
// complete `data:` line (without its prefix or line end).
func (sc *sseScanner) feed(p []byte, onData func([]byte)) error {
	if !sc.chunked {
		sc.lines(p, onData)
		return nil
	}
	for len(p) > 0 {
		switch {
		case sc.skipCRLF > 0:
			p = p[1:]
			sc.skipCRLF--
		case sc.left > 0:
			n := min(sc.left, len(p))
			sc.lines(p[:n], onData)
			p = p[n:]
			sc.left -= n
			if sc.left == 0 {
				sc.skipCRLF = 2
			}
		default:
			// A chunk size line: hex digits, an optional extension, CRLF.
			c := p[0]
			p = p[1:]
			if !sc.inSize {
				sc.inSize, sc.inExt, sc.size = true, false, 0
			}
			switch {
			case c == '\n':
				sc.inSize = false
				if sc.size == 0 {
					return io.EOF // the last chunk
				}
				sc.left = sc.size
			case c == '\r' || sc.inExt:
			case c == ';':
				sc.inExt = true
			case c >= '0' && c <= '9':
				sc.size = sc.size<<4 | int(c-'0')
			case c >= 'a' && c <= 'f':
				sc.size = sc.size<<4 | int(c-'a'+10)
			case c >= 'A' && c <= 'F':
				sc.size = sc.size<<4 | int(c-'A'+10)
			default:
				return fmt.Errorf("bad chunk size byte %q", c)
			}
		}
	}
	return nil
}

// lines scans body bytes for complete lines.
func (sc *sseScanner) lines(p []byte, onData func([]byte)) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			sc.partial = append(sc.partial, p...)
			return
		}
		line := p[:i]
		if len(sc.partial) > 0 {
			sc.partial = append(sc.partial, line...)
			line = sc.partial
		}
		if rest, ok := bytes.CutPrefix(line, dataPrefix); ok {
			onData(rest)
		}
		sc.partial = sc.partial[:0]
		p = p[i+1:]
	}
}

// TestBenchSSEScanner checks the lean subscribers' body scanner: cut
// anywhere, with or without the chunked coding, the body gives the same
// data lines.
func TestBenchSSEScanner(t *testing.T) {
	t.Parallel()
	frames := "retry: 3000\n\nevent: connected\ndata: {\"clientId\":\"x\"}\n\nid: 1\nevent: actor-update\ndata: {\"t\":\"123\"}\n\n: keepalive\n\nid: 2\ndata: {\"t\":\"456\"}\n\n"
	var chunked strings.Builder
	for _, part := range []string{frames[:10], frames[10:61], frames[61:]} {
		fmt.Fprintf(&chunked, "%x;ext=1\r\n%s\r\n", len(part), part)
	}
	chunked.WriteString("0\r\n\r\n")
	want := []string{`{"clientId":"x"}`, `{"t":"123"}`, `{"t":"456"}`}
	for _, body := range []struct {
		text    string
		chunked bool
	}{{frames, false}, {chunked.String(), true}} {
		for cut := 1; cut < len(body.text); cut++ {
			sc := sseScanner{chunked: body.chunked}
			var got []string
			onData := func(line []byte) { got = append(got, string(line)) }
			for _, piece := range []string{body.text[:cut], body.text[cut:]} {
				if err := sc.feed([]byte(piece), onData); err != nil && err != io.EOF {
					t.Fatalf("cut at %d: %v", cut, err)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("chunked %v, cut at %d: data lines %q, want %q", body.chunked, cut, got, want)
			}
		}
	}
	if sent, ok := benchSendTime([]byte(`{"flags":{"bench":{"t":"1700000000123456789"}}}`)); !ok || sent != 1700000000123456789 {
		t.Fatalf("send time %d %v", sent, ok)
	}
}

// pollSubscribers are leanSubscribers without goroutines: the sockets are
// raw non-blocking file descriptors read by two event loops on epoll, one
// per core, so that a delivery costs the subscribers' process one read
// system call and a share of an epoll_wait, not a wakeup of the Go
// scheduler as well. It is the benchmark's default HTTP/1.1 client; per
// read it costs about what leanSubscribers cost (about 10 µs on the
// two-core test machine: the kernel's share dominates), with larger reads
// under load.
type pollSubscribers struct {
	conns     []*pollConn
	epfds     [2]int
	stopping  atomic.Bool
	loops     sync.WaitGroup
	count     atomic.Int64
	reads     atomic.Int64
	connected atomic.Int64
}

// pollConn is one subscriber's connection and what it saw.
type pollConn struct {
	fd      int
	head    []byte // the response head until it is complete
	inBody  bool
	sc      sseScanner
	lat     []int32 // latencies in microseconds
	failed  error
	isReady bool
}

func startPollSubscribers(addr, key string, n int) (*pollSubscribers, error) {
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	sa := &syscall.SockaddrInet4{Port: tcp.Port}
	copy(sa.Addr[:], tcp.IP.To4())
	s := &pollSubscribers{conns: make([]*pollConn, n)}
	for i := range s.epfds {
		if s.epfds[i], err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
			return nil, err
		}
	}
	for i := range len(s.epfds) {
		s.loops.Add(1)
		go s.loop(s.epfds[i])
	}
	for i := range n {
		// Keep the relay's accept queue short: at most 512 requests
		// unanswered.
		for int64(i)-s.connected.Load() > 512 {
			time.Sleep(time.Millisecond)
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("subscriber %d: %w", i, err)
		}
		if err := syscall.Connect(fd, sa); err != nil {
			return nil, fmt.Errorf("subscriber %d: %w", i, err)
		}
		req := "GET " + benchPath(i) + " HTTP/1.1\r\nHost: " + addr + "\r\nX-Api-Key: " + key + "\r\nAccept: text/event-stream\r\n\r\n"
		if _, err := syscall.Write(fd, []byte(req)); err != nil {
			return nil, fmt.Errorf("subscriber %d: %w", i, err)
		}
		if err := syscall.SetNonblock(fd, true); err != nil {
			return nil, err
		}
		s.conns[i] = &pollConn{fd: fd}
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(i)}
		if err := syscall.EpollCtl(s.epfds[i%len(s.epfds)], syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return nil, err
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for s.connected.Load() < int64(n) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d subscribers connected", s.connected.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, c := range s.conns {
		if c.failed != nil {
			return nil, fmt.Errorf("subscriber %d: %w", i, c.failed)
		}
	}
	return s, nil
}

// loop reads the connections of one epoll set until stop.
func (s *pollSubscribers) loop(epfd int) {
	defer s.loops.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	for !s.stopping.Load() {
		n, err := syscall.EpollWait(epfd, events, 50)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			s.conns[ev.Fd].read(s, buf)
		}
	}
}

// read reads what the connection has: one read system call (the epoll set
// is level-triggered, so what is left is reported again).
func (c *pollConn) read(s *pollSubscribers, buf []byte) {
	if c.fd < 0 {
		return
	}
	n, err := syscall.Read(c.fd, buf)
	if err == syscall.EAGAIN {
		return
	}
	if n <= 0 {
		c.close(s, err)
		return
	}
	p := buf[:n]
	if !c.inBody {
		c.head = append(c.head, p...)
		i := bytes.Index(c.head, []byte("\r\n\r\n"))
		if i < 0 {
			return
		}
		if !bytes.HasPrefix(c.head, []byte("HTTP/1.1 200")) {
			line, _, _ := bytes.Cut(c.head, []byte("\r\n"))
			c.close(s, fmt.Errorf("status %q", line))
			return
		}
		c.sc.chunked = bytes.Contains(bytes.ToLower(c.head[:i]), []byte("transfer-encoding: chunked"))
		p = append([]byte(nil), c.head[i+4:]...)
		c.head, c.inBody = nil, true
	}
	before := len(c.lat)
	err = c.sc.feed(p, func(line []byte) {
		if bytes.Contains(line, clientIDField) {
			c.ready(s)
			return
		}
		if sent, ok := benchSendTime(line); ok {
			c.lat = append(c.lat, int32(time.Since(time.Unix(0, sent))/time.Microsecond))
		}
	})
	if got := len(c.lat) - before; got > 0 {
		s.count.Add(int64(got))
		s.reads.Add(1)
	}
	if err != nil {
		c.close(s, nil)
	}
}

func (c *pollConn) ready(s *pollSubscribers) {
	if !c.isReady {
		c.isReady = true
		s.connected.Add(1)
	}
}

// close ends the connection; err, when set, is kept as its failure.
func (c *pollConn) close(s *pollSubscribers, err error) {
	if err != nil && c.failed == nil && !s.stopping.Load() {
		c.failed = err
	}
	_ = syscall.Close(c.fd)
	c.fd = -1
	c.ready(s)
}

func (s *pollSubscribers) received() int64 { return s.count.Load() }

func (s *pollSubscribers) cpu() time.Duration { return processCPU() }

func (s *pollSubscribers) stop() fanoutResult {
	s.stopping.Store(true)
	s.loops.Wait()
	var durations []time.Duration
	for _, c := range s.conns {
		if c.fd >= 0 {
			_ = syscall.Close(c.fd)
		}
		for _, us := range c.lat {
			durations = append(durations, time.Duration(us)*time.Microsecond)
		}
	}
	for _, fd := range s.epfds {
		_ = syscall.Close(fd)
	}
	res := summarize(durations)
	if n := len(durations); n > 0 {
		at := func(p float64) time.Duration { return durations[min(n-1, int(float64(n)*p))] }
		fmt.Fprintf(os.Stderr, "subscribers: %d reads brought %d bench events (%.2f per read)\n", s.reads.Load(), s.count.Load(), float64(s.count.Load())/float64(max(s.reads.Load(), 1)))
		fmt.Fprintf(os.Stderr, "subscribers: latency p10 %v p50 %v p90 %v p95 %v p99 %v p99.9 %v\n", at(0.1), at(0.5), at(0.9), at(0.95), at(0.99), at(0.999))
	}
	return res
}

// benchDuration reads a benchmark's duration setting from the
// environment, or def when it is unset or malformed.
func benchDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
