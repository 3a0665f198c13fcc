package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkEventFanout measures the event streams' fan-out: many concurrent
// SSE subscribers on the demo world (half on /actor/subscribe for Aria,
// half on /hooks/subscribe for updateActor, all GM-level) while a writer
// changes Aria at a fixed rate. Each change carries its send time, so the
// latency measured is from the write request to the event's arrival at the
// subscriber, through the whole relay. It reports the p50/p99/max delivery
// latency, the events lost (expected minus received), and the memory per
// idle subscriber: heap and stacks of the process (relay and the
// in-process clients together, so an upper bound for the relay) divided by
// the subscribers.
//
// It is not part of the default test run. Knobs (environment):
// RELAY_BENCH_SUBSCRIBERS (default 1000), RELAY_BENCH_RATE (changes per
// second, default 100), RELAY_BENCH_SECONDS (default 10), RELAY_BENCH_HTTP1
// (1: one TCP connection per subscriber, as browsers without HTTP/2;
// otherwise h2c, many streams per connection, which a single test process
// needs past about 9,000 subscribers because of its file limit).
//
//	RELAY_BENCH_SUBSCRIBERS=10000 go test ./cmd/relay/ -run '^$' -bench EventFanout -benchtime 1x
func BenchmarkEventFanout(b *testing.B) {
	subscribers := envInt("RELAY_BENCH_SUBSCRIBERS", 1000)
	rate := envInt("RELAY_BENCH_RATE", 100)
	seconds := envInt("RELAY_BENCH_SECONDS", 10)
	http1 := os.Getenv("RELAY_BENCH_HTTP1") == "1"

	cfg := serveConfig{listen: "127.0.0.1:0", dataDir: b.TempDir(), demo: true, nodeID: 1, maxBodyBytes: 1 << 20,
		scriptTimeout: time.Second, maxStreamsPerKey: subscribers + 10, maxStreamsPerWorld: subscribers + 10}
	r, err := startRelay(context.Background(), cfg, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.close(context.Background()) })
	base := "http://" + r.addr
	client := benchStreamClient(http1)

	for range b.N {
		memBefore := memInUse()
		var (
			mu        sync.Mutex
			latencies []time.Duration
			received  atomic.Int64
			connected sync.WaitGroup
			done      sync.WaitGroup
		)
		ctx, cancel := context.WithCancel(context.Background())
		connected.Add(subscribers)
		done.Add(subscribers)
		start := time.Now()
		for i := range subscribers {
			path := "/actor/subscribe?actorUuid=" + ariaUUID
			if i%2 == 1 {
				path = "/hooks/subscribe?hooks=updateActor"
			}
			go func() {
				defer done.Done()
				local := benchSubscriber(ctx, client, base+path, r.adminKey, &connected, &received)
				mu.Lock()
				latencies = append(latencies, local...)
				mu.Unlock()
			}()
		}
		connected.Wait()
		b.Logf("%d subscribers connected in %v (%s)", subscribers, time.Since(start).Round(time.Millisecond), map[bool]string{true: "HTTP/1.1", false: "h2c"}[http1])
		memIdle := memInUse()
		perSub := float64(memIdle-memBefore) / float64(subscribers)

		changes := rate * seconds
		writer := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		tick := time.NewTicker(time.Second / time.Duration(rate))
		writeStart := time.Now()
		for i := range changes {
			<-tick.C
			body := fmt.Sprintf(`{"uuid":%q,"data":{"flags.bench.t":"%d","system.attributes.hp.value":%d}}`, ariaUUID, time.Now().UnixNano(), i%50)
			req, _ := http.NewRequest("PUT", base+"/update", strings.NewReader(body))
			req.Header.Set("x-api-key", r.adminKey)
			resp, err := writer.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("update: %d", resp.StatusCode)
			}
		}
		tick.Stop()
		achieved := float64(changes) / time.Since(writeStart).Seconds()
		want := int64(changes) * int64(subscribers)
		deadline := time.Now().Add(30 * time.Second)
		for received.Load() < want && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		done.Wait()
		slices.Sort(latencies)
		pct := func(p float64) time.Duration {
			if len(latencies) == 0 {
				return 0
			}
			return latencies[min(len(latencies)-1, int(float64(len(latencies))*p))]
		}
		b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(pct(1).Microseconds())/1000, "max-ms")
		b.ReportMetric(float64(want-received.Load()), "lost-events")
		b.ReportMetric(perSub/1024, "KiB/idle-sub")
		b.ReportMetric(achieved, "changes/s")
		b.Logf("%d subscribers, %d changes at %d/s (achieved %.1f/s): %d of %d events delivered; latency p50 %v p99 %v max %v; %.1f KiB per idle subscriber (relay and clients)",
			subscribers, changes, rate, achieved, received.Load(), want, pct(0.5), pct(0.99), pct(1), perSub/1024)
	}
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
	var out []time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.HasPrefix(string(line), "data: ") {
			continue
		}
		s := string(line)
		if strings.Contains(s, `"clientId"`) {
			ready()
			continue
		}
		i := strings.Index(s, `"t":"`)
		if i < 0 {
			continue
		}
		s = s[i+5:]
		sent, err := strconv.ParseInt(s[:strings.IndexByte(s, '"')], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, time.Since(time.Unix(0, sent)))
		received.Add(1)
	}
	return out
}

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

// memInUse is the heap and stack memory in use after a collection.
func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}
