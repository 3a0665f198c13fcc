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

	"relay/world/events"
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
// alone with a child process; relay and clients together otherwise).
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
// alone; "inprocess" runs them in the relay's process).
//
//	RELAY_BENCH_SUBSCRIBERS=10000 go test ./cmd/relay/ -run '^$' -bench EventFanout -benchtime 1x
func BenchmarkEventFanout(b *testing.B) {
	subscribers := envInt("RELAY_BENCH_SUBSCRIBERS", 1000)
	rate := envInt("RELAY_BENCH_RATE", 100)
	seconds := envInt("RELAY_BENCH_SECONDS", 10)
	http1 := os.Getenv("RELAY_BENCH_HTTP1") == "1"
	inProcess := os.Getenv("RELAY_BENCH_CLIENTS") == "inprocess"
	coalesce := envDuration("RELAY_BENCH_COALESCE", events.DefaultCoalesce)

	cfg := serveConfig{listen: "127.0.0.1:0", dataDir: b.TempDir(), demo: true, nodeID: 1, maxBodyBytes: 1 << 20,
		scriptTimeout: time.Second, maxStreamsPerKey: subscribers + 10, maxStreamsPerWorld: subscribers + 10,
		eventCoalesce: coalesce}
	r, err := startRelay(context.Background(), cfg, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.close(context.Background()) })
	base := "http://" + r.addr
	client := benchStreamClient(http1)

	for range b.N {
		memBefore := memInUse()
		stackBefore := stackInUse()
		start := time.Now()
		var subs fanoutSubscribers
		if inProcess {
			subs = startInProcessSubscribers(client, base, r.adminKey, subscribers)
		} else {
			subs = startSubscriberProcess(b, base, r.adminKey, subscribers, http1)
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
		writeStart := time.Now()
		inFlight := make(chan struct{}, 16)
		var writes sync.WaitGroup
		var writeErr atomic.Value
		for i := range changes {
			<-tick.C
			inFlight <- struct{}{}
			writes.Add(1)
			go func() {
				defer func() { <-inFlight; writes.Done() }()
				body := fmt.Sprintf(`{"uuid":%q,"data":{"flags.bench.t":"%d","system.attributes.hp.value":%d}}`, ariaUUID, time.Now().UnixNano(), i%50)
				req, _ := http.NewRequest("PUT", base+"/update", strings.NewReader(body))
				req.Header.Set("x-api-key", r.adminKey)
				resp, err := writer.Do(req)
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
		want := int64(changes) * int64(subscribers)
		deadline := time.Now().Add(30 * time.Second)
		for subs.received() < want && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		elapsed := time.Since(writeStart)
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
	return "/actor/subscribe?actorUuid=" + ariaUUID
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
	final chan fanoutResult
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
			case len(f) == 2 && f[0] == "received":
				n, _ := strconv.ParseInt(f[1], 10, 64)
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
	subs := startInProcessSubscribers(benchStreamClient(os.Getenv("RELAY_BENCH_HTTP1") == "1"), os.Getenv("RELAY_FANOUT_BASE"), os.Getenv("RELAY_FANOUT_KEY"), n)
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
		fmt.Println("received", subs.received())
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
