package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/script"
)

// The execute-js sandbox end to end: hostile scripts are stopped at the
// time limit or the memory budget whatever they do, while the relay keeps
// answering everyone else. Scaled down by default; RELAY_SCRIPT_FULL=1
// runs them at the relay's default limits and full size.

func scriptFull() bool { return os.Getenv("RELAY_SCRIPT_FULL") == "1" }

// Slack and allowances of the attack tests: how much later than its limit
// a stopped script may answer on a busy machine (a worker to start, the
// race detector, other processes on every core), how slowly a concurrent
// read may answer, and what a worker holds resident before its script
// runs (the binary's pages and the runtime), generously.
const (
	scriptAttackSlack = 10 * time.Second
	promptAnswer      = time.Second
	workerBaseRSS     = 64 << 20
	// limitAttackTimeout is the time limit of the attacks that a limit
	// other than time must end.
	limitAttackTimeout = 60 * time.Second
)

// scriptAttack is a hostile script and how it must end: with the status,
// and with an error containing the text ("time" and "memory" stand for
// the limits' messages).
type scriptAttack struct {
	name, src string
	status    int
	stop      string
}

func scriptAttacks() []scriptAttack {
	n := "4e5"
	if scriptFull() {
		n = "2e6"
	}
	return []scriptAttack{
		{"huge repeat", `const parts = []; for (let i = 0; ; i++) parts.push("x".repeat(1 << 24) + i)`, 400, "memory"},
		{"sort of a huge array", `const a = []; for (let i = 0; i < ` + n + `; i++) a.push((i * 7919) % 1000003); a.sort(); return a[0]`, 504, "time"},
		{"JSON.stringify of a huge array", `const s = "x".repeat(1 << 20); return JSON.stringify(new Array(1024).fill(s)).length`, 400, "memory"},
		{"big join", `const s = "y".repeat(1 << 20); return new Array(1024).fill(s).join("").length`, 400, "memory"},
		{"Array(1e9).fill", `return new Array(1e9).fill(0).length`, 400, "more than 16777216 elements"},
		{"tight loop", `for (;;) {}`, 504, "time"},
		{"deep recursion", `function f(n) { return f(n + 1) + 1 } return f(0)`, 400, "Maximum call stack size exceeded"},
		{"deep recursion through built-ins", `function f() { return [1].map(f) } f()`, 400, "Maximum call stack size exceeded"},
		{"allocation in a loop", `const a = []; for (;;) a.push({i: a.length, s: "z".repeat(100) + a.length})`, 400, "memory"},
		{"regexp backtracking", `for (;;) /^(a+)+(?!x)$/.test("a".repeat(30) + "!")`, 504, "time"},
	}
}

// getPoller reads a document over and over until stopped, and reports the
// slowest answer and any failure.
type getPoller struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	slowest time.Duration
	reads   int
	failure string
}

func (tr *testRelay) pollGet() *getPoller {
	p := &getPoller{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 10 * time.Second}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			req, _ := http.NewRequest(http.MethodGet, tr.Base+"/get?uuid="+relaytest.AriaUUID, nil)
			req.Header.Set("x-api-key", tr.AdminKey)
			start := time.Now()
			resp, err := client.Do(req)
			took := time.Since(start)
			var body []byte
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			p.mu.Lock()
			p.reads++
			p.slowest = max(p.slowest, took)
			switch {
			case err != nil:
				p.failure = err.Error()
			case resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Aria Vale"):
				p.failure = strconv.Itoa(resp.StatusCode) + " " + string(body)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// finish stops the poller and returns its slowest answer, the number of
// reads and the last failure ("" for none).
func (p *getPoller) finish() (time.Duration, int, string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slowest, p.reads, p.failure
}

// TestScriptAttacksStopped is not parallel: it measures the relay's own
// memory while the attacks run.
func TestScriptAttacksStopped(t *testing.T) {
	timeout, budget := time.Second, int64(64<<20)
	if scriptFull() {
		timeout, budget = 5*time.Second, script.DefaultWorkerMemoryBytes
	}
	tr := startTestRelay(t, func(c *node.Config) {
		c.ScriptTimeout = timeout
		c.ScriptMemory = budget
	})
	// The attacks that must end at their memory ceiling run on a relay
	// with more time, so that they reach it first even on a loaded
	// machine (a second was seen to run out before it).
	memoryTimeout := max(timeout, 5*time.Second)
	if crashRaceBuild {
		memoryTimeout = timeout // no ceiling: they end at the time limit
	}
	memoryRelay := startTestRelay(t, func(c *node.Config) {
		c.ScriptTimeout = memoryTimeout
		c.ScriptMemory = budget
	})
	// The attacks that a limit of their own must end (the stack, an
	// array's length) run with far more time than they need, so that the
	// time limit never ends them first: with the race detector on a
	// loaded machine, deep recursion was seen to take more than a second.
	limitRelay := startTestRelay(t, func(c *node.Config) {
		c.ScriptTimeout = limitAttackTimeout
		c.ScriptMemory = budget
	})
	messages := map[string]string{
		"memory": "Script exceeded the memory limit of " + strconv.FormatInt(budget>>20, 10) + " MiB",
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, a := range scriptAttacks() {
		tr, timeout := tr, timeout
		switch a.stop {
		case "memory":
			tr, timeout = memoryRelay, memoryTimeout
		case "time":
		default:
			tr, timeout = limitRelay, limitAttackTimeout
		}
		messages["time"] = "Script exceeded the time limit of " + timeout.String()
		poller := tr.pollGet()
		start := time.Now()
		resp := tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": a.src})
		elapsed := time.Since(start)
		slowest, reads, failure := poller.finish()
		t.Logf("%s: %d %s after %v; /get: %d reads, slowest %v; worker peak RSS so far %d MiB",
			a.name, resp.Status, resp.Body, elapsed.Round(time.Millisecond), reads, slowest.Round(time.Millisecond), tr.Scripts().Stats().PeakRSSBytes>>20)

		want := a.stop
		if m, ok := messages[want]; ok {
			want = m
		}
		status := a.status
		if crashRaceBuild && a.stop == "memory" && resp.Status == http.StatusGatewayTimeout {
			// Without its ceiling (race detector), a one-call allocation
			// runs into the time limit instead.
			status, want = http.StatusGatewayTimeout, messages["time"]
		}
		if resp.Status != status || !strings.Contains(resp.ErrorText(t), want) {
			t.Errorf("%s: %d %s, want %d %q", a.name, resp.Status, resp.Body, status, want)
		}
		if limit := timeout + script.KillGrace + scriptAttackSlack; elapsed > limit {
			t.Errorf("%s: answered after %v, more than %v", a.name, elapsed, limit)
		}
		if failure != "" || slowest > promptAnswer {
			t.Errorf("%s: meanwhile /get answered in %v at worst (failure: %q)", a.name, slowest, failure)
		}
		if rss := tr.Scripts().Stats().PeakRSSBytes; !crashRaceBuild && rss > budget+workerBaseRSS {
			t.Errorf("%s: a worker reached %d MiB resident, more than the budget of %d MiB plus %d MiB", a.name, rss>>20, budget>>20, workerBaseRSS>>20)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.Sys) - int64(before.Sys); grown > 64<<20 {
		t.Errorf("the relay's own memory grew by %d MiB during the attacks", grown>>20)
	}

	// The relay still runs scripts, over REST and gRPC.
	resp := tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `return (await game.get("` + relaytest.AriaUUID + `")).name`})
	if resp.Status != http.StatusOK || resp.Data(t)["result"] != "Aria Vale" {
		t.Fatalf("a script after the attacks: %d %s", resp.Status, resp.Body)
	}
}

// The gRPC door of execute-js keeps the same limits and statuses.
func TestScriptLimitsOverGRPC(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) {
		c.ScriptTimeout = time.Second
		c.ScriptMemory = 64 << 20
	})
	// The memory attack and the recursion get time to reach their own
	// limits first even with the race detector on a loaded machine.
	limitRelay := startTestRelay(t, func(c *node.Config) {
		c.ScriptTimeout = limitAttackTimeout
		c.ScriptMemory = 64 << 20
	})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	client := relayv1.NewScriptServiceClient(tr.Conn)
	attacks := map[string]string{}
	for _, a := range scriptAttacks() {
		attacks[a.name] = a.src
	}
	for _, tc := range []struct {
		src  string
		code codes.Code
		msg  string
	}{
		{attacks["sort of a huge array"], codes.DeadlineExceeded, "Script exceeded the time limit of 1s"},
		{attacks["JSON.stringify of a huge array"], codes.InvalidArgument, "Script exceeded the memory limit of 64 MiB"},
		{attacks["deep recursion through built-ins"], codes.InvalidArgument, "Error executing script: Maximum call stack size exceeded"},
	} {
		if crashRaceBuild && tc.code == codes.InvalidArgument && strings.Contains(tc.msg, "memory") {
			continue // no ceiling under the race detector
		}
		client, limit := client, time.Second
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
		// The recursion, like the memory attack, runs with the longer
		// time limit: on a loaded machine it must reach its stack limit
		// before the clock stops it.
		if strings.Contains(tc.msg, "memory") || strings.Contains(tc.msg, "call stack") {
			client, limit = relayv1.NewScriptServiceClient(limitRelay.Conn), limitAttackTimeout
			ctx = metadata.AppendToOutgoingContext(context.Background(), "x-api-key", limitRelay.AdminKey)
		}
		start := time.Now()
		_, err := client.ExecuteJs(ctx, &relayv1.ExecuteJsRequest{Script: tc.src})
		st := status.Convert(err)
		if tc.code == codes.DeadlineExceeded && st.Code() == codes.InvalidArgument && st.Message() == "Script exceeded the memory limit of 64 MiB" {
			// A loaded machine slows the sort down enough for its copies
			// to reach the ceiling first: either limit stopping it is
			// what matters, and the time below is checked all the same.
			st = status.New(tc.code, tc.msg)
		}
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%s: %v, want %v %q", tc.src, err, tc.code, tc.msg)
		}
		if elapsed := time.Since(start); elapsed > limit+script.KillGrace+scriptAttackSlack {
			t.Errorf("%s: answered after %v", tc.src, elapsed)
		}
	}
	res, err := client.ExecuteJs(ctx, &relayv1.ExecuteJsRequest{Script: `console.log("hi"); return [1, "two"]`})
	if err != nil {
		t.Fatal(err)
	}
	var result any
	if err := json.Unmarshal(valueJSON(t, res.GetResult()), &result); err != nil || len(res.GetLogs()) != 1 || res.GetLogs()[0] != "hi" {
		t.Fatalf("result %s (%v), logs %q", res.GetResult(), err, res.GetLogs())
	}
}

// --script-workers bounds the scripts running at once: one more waits up
// to the time limit, then gets 503, and other requests are served
// meanwhile.
func TestScriptWorkersBounded(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) {
		c.ScriptTimeout = time.Second
		c.ScriptWorkers = 1
	})
	busy := make(chan relaytest.Response, 1)
	go func() {
		busy <- tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `for (;;) {}`})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for tr.Scripts().Stats().Running == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	poller := tr.pollGet()
	resp := tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `return 1`})
	if resp.Status != http.StatusServiceUnavailable || !strings.Contains(resp.ErrorText(t), "Too many scripts are running (at most 1 at once)") {
		t.Errorf("second script: %d %s", resp.Status, resp.Body)
	}
	if r := <-busy; r.Status != http.StatusGatewayTimeout {
		t.Errorf("busy script: %d %s", r.Status, r.Body)
	}
	if slowest, _, failure := poller.finish(); failure != "" || slowest > promptAnswer {
		t.Errorf("meanwhile /get answered in %v at worst (failure: %q)", slowest, failure)
	}
	if r := tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `return 2`}); r.Status != http.StatusOK {
		t.Errorf("a script once the worker is free: %d %s", r.Status, r.Body)
	}
}

// The new flags have environment variables, defaults and help text, and a
// budget too small to run anything is refused at start.
func TestScriptFlags(t *testing.T) {
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.flags(fs)
	if cfg.ScriptMemory != script.DefaultWorkerMemoryBytes || cfg.ScriptWorkers != script.DefaultWorkers {
		t.Errorf("defaults: memory %d, workers %d", cfg.ScriptMemory, cfg.ScriptWorkers)
	}
	for _, name := range []string{"script-memory", "script-workers", "script-timeout"} {
		f := fs.Lookup(name)
		env := "RELAY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if f == nil || !strings.Contains(f.Usage, env) {
			t.Errorf("--%s: missing, or its help does not name %s", name, env)
		}
	}

	t.Setenv("RELAY_SCRIPT_MEMORY", "134217728")
	t.Setenv("RELAY_SCRIPT_WORKERS", "2")
	cfg, err := loadServeConfig(nil, io.Discard)
	if err != nil || cfg.ScriptMemory != 128<<20 || cfg.ScriptWorkers != 2 {
		t.Errorf("from the environment: memory %d, workers %d (%v)", cfg.ScriptMemory, cfg.ScriptWorkers, err)
	}

	_, errOut, err := cli(t, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--script-memory", "1000")
	if err == nil || !strings.Contains(err.Error(), "script memory limit must be at least") {
		t.Errorf("a tiny budget: %v %s", err, errOut)
	}
}
