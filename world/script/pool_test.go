package script_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/script"
)

// The tests of Pool: scripts run in worker processes (this test binary
// started again, see TestMain) and behave as they do in process, and the
// limits hold for scripts that sit in one long built-in.

// testBudget is the memory budget of the test pools: small, so that the
// attacks reach it quickly.
const testBudget = 64 << 20

// newPool returns a pool that is closed when the test ends.
func newPool(t *testing.T, opts script.PoolOptions) *script.Pool {
	t.Helper()
	p, err := script.NewPool(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var (
	sharedPoolOnce sync.Once
	sharedPool     *script.Pool
)

// pool returns a pool shared by the tests that only run ordinary scripts.
func pool(t *testing.T) *script.Pool {
	sharedPoolOnce.Do(func() {
		p, err := script.NewPool(script.PoolOptions{MemoryBytes: testBudget})
		if err != nil {
			t.Fatal(err)
		}
		sharedPool = p
	})
	return sharedPool
}

// errorKind is the world error kind of err, or nil.
func errorKind(err error) error {
	for _, kind := range []error{world.ErrInvalid, world.ErrNotFound, world.ErrPermission, world.ErrConflict,
		world.ErrFailedPrecondition, world.ErrUnavailable, world.ErrTooLarge, world.ErrTimeout} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	return nil
}

// Every script gives the same result, logs, error and world calls (with
// the caller's user) in a worker as in process.
func TestPoolMatchesInProcess(t *testing.T) {
	type tc struct {
		src  string
		opts script.Options
	}
	var cases []tc
	add := func(opts script.Options, srcs ...string) {
		for _, src := range srcs {
			cases = append(cases, tc{src, opts})
		}
	}
	add(script.Options{},
		// Values.
		`return 1.5`, `return -0`, `return "héllo <b>"`, `return true`, `return null`, `return undefined`, `1 + 1`,
		`return NaN`, `return () => 1`, `return [1, "a", null, undefined, () => 1, [true]]`,
		`return {a: 1, b: {c: [2]}, f() {}, u: undefined, s: Symbol()}`,
		`return new Date(Date.UTC(2024, 0, 2, 3, 4, 5))`, `return {toJSON() { return "custom" }}`,
		`return new Map([[1, 2]])`, `return JSON.parse('{"__proto__": {"a": 1}}')`,
		`return 2 ** 60`, `return 0.1 + 0.2`, `return "\u2028\ud800"`,
		// Failures.
		`const o = {}; o.self = o; return o`, `return 10n`,
		`let a = []; for (let i = 0; i < 1000; i++) a = [a]; return a`,
		`await new Promise(() => {}); return 1`,
		`throw new Error("boom")`, `throw "plain string"`, `await Promise.reject(new RangeError("bad range"))`,
		`const o = undefined; o.x`, `function f() { return f() } f()`, `function f() { return [1].map(f) } f()`,
		`return "ab".repeat(1 << 30)`, "const x = ;\nreturn x", "const a = 1;\nreturn a +;", "", "  \n\t ",
		`return new Array(1e9).fill(0)`, `const a = []; a.join = a.toString; return "" + a`,
		`return "x".repeat(1 << 20)`,
		// The world.
		`const a = await game.get("Actor.a1"); a.name = "x"; return [a, (await game.get("Actor.a1")).name]`,
		`return await game.update("Actor.a1", {name: "Hobgoblin", "system.hp.value": 7, when: new Date(0), skip: undefined, list: [1, "x"]})`,
		`return await game.update("Actor.a1", {})`,
		`return [await game.search("gob"), await game.search("gob", "Actor", {limit: 5}), await game.search("gob", {documentType: "Actor", folder: "f1"})]`,
		`return [await game.create("Actor", {name: "Orc", type: "npc"}, {folder: "f1"}), await game.create("Item", {name: "Sword"}, {parentUuid: "Actor.a1", keepId: true}), await game.create("JournalEntry")]`,
		`return [await game.delete("Actor.a1"), await game.users(), await game.structure({types: ["Actor"], path: "Folder.f1", recursive: true, depth: 2, includeData: true}), game.world]`,
		`const out = [];
		try { await game.get("Actor.missing"); } catch (e) { out.push(e.message, e.name, e.kind, e instanceof Error); }
		await game.delete("Actor.locked").catch((e) => out.push(e.kind));
		try { await game.update(42, {}); } catch (e) { out.push(e instanceof TypeError, e.message); }
		return out;`,
		`const a = await game.get("Actor.missing"); return a.name`,
		`try { await game.update("Actor.a1", {big: "x".repeat(2 << 20)}) } catch (e) { return e.message }`,
		// The console.
		`console.log("hello", 1, {a: [1, "<b>"]}); console.warn("careful"); console.error(new TypeError("bad")); return 1`,
		`console.log("before"); throw new Error("x")`,
		`for (let i = 0; i < 500; i++) console.log("line", i); return 1`,
		`return [typeof require, typeof process, typeof fetch, typeof setTimeout, Object.keys(game).sort()]`,
	)
	add(script.Options{MaxResultBytes: 1000}, `return "x".repeat(998)`, `return "x".repeat(2000)`)
	add(script.Options{MaxScriptBytes: 100}, "return 1;"+strings.Repeat(" ", 100))
	add(script.Options{Timeout: 300 * time.Millisecond}, `for (;;) {}`, `console.log("a"); while (true) { try { for (;;) {} } catch (e) {} }`)

	p := pool(t)
	ctx := context.Background()
	for _, c := range cases {
		inFake, outFake := newFake(), newFake()
		want, wantErr := script.Run(ctx, inFake, gm, c.src, c.opts)
		got, gotErr := p.Run(ctx, outFake, gm, c.src, c.opts)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && (wantErr.Error() != gotErr.Error() || errorKind(wantErr) != errorKind(gotErr))) {
			t.Errorf("%s:\nerror in a worker %v (%v)\nin process         %v (%v)", c.src, gotErr, errorKind(gotErr), wantErr, errorKind(wantErr))
			continue
		}
		if wantErr != nil {
			// A run the worker ended early loses nothing else that the
			// server would use: it discards the result of a failed run.
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\nresult in a worker %#v\nin process         %#v", c.src, got, want)
		}
		if gc, wc := outFake.Calls(), inFake.Calls(); !reflect.DeepEqual(gc, wc) {
			t.Errorf("%s:\nworld calls from a worker %+v\nin process                %+v", c.src, gc, wc)
		}
	}
}

// scaled returns the full-size value with RELAY_SCRIPT_FULL=1, else the
// scaled-down one.
func scaled[T any](small, full T) T {
	if os.Getenv("RELAY_SCRIPT_FULL") == "1" {
		return full
	}
	return small
}

// Attacks that sit in one long built-in (which the runtime cannot
// interrupt) or allocate without bound are stopped at the time limit or
// the memory budget, and leave the calling process's memory alone.
func TestPoolStopsAttacks(t *testing.T) {
	timeout := scaled(time.Second, 5*time.Second)
	budget := scaled[int64](testBudget, script.DefaultWorkerMemoryBytes)
	p := newPool(t, script.PoolOptions{MemoryBytes: budget})
	memoryMsg := "Script exceeded the memory limit of " + strconv.FormatInt(budget>>20, 10) + " MiB"
	for _, a := range scriptAttacks() {
		t.Run(a.name, func(t *testing.T) {
			timeout := timeout
			switch {
			case a.stop == "memory" && !raceBuild:
				// A memory attack gets time to reach its ceiling first
				// even on a loaded machine, where a second was seen to
				// run out before it.
				timeout = memoryAttackTimeout
			case a.stop != "time" && a.stop != "memory":
				// An attack that a limit of its own stops (the stack, an
				// array's length) must meet that limit, not the time
				// limit: with the race detector on a loaded machine, deep
				// recursion was seen to take more than a second.
				timeout = limitAttackTimeout
			}
			timeMsg := "Script exceeded the time limit of " + timeout.String()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := p.Run(context.Background(), newFake(), gm, a.src, script.Options{Timeout: timeout})
			elapsed := time.Since(start)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)

			t.Logf("%v: %v; worker peak RSS so far %d MiB", elapsed.Round(time.Millisecond), err, p.Stats().PeakRSSBytes>>20)
			want := map[string]string{"time": timeMsg, "memory": memoryMsg}[a.stop]
			if want == "" {
				want = a.stop
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				// Without its ceiling (race detector), a one-call
				// allocation runs into the time limit instead.
				if !(raceBuild && a.stop == "memory" && err != nil && strings.Contains(err.Error(), timeMsg)) {
					t.Errorf("error %v, want %q", err, want)
				}
			}
			if limit := timeout + script.KillGrace + attackSlack; elapsed > limit {
				t.Errorf("stopped after %v, more than %v", elapsed, limit)
			}
			if grown := int64(after.Sys) - int64(before.Sys); grown > 32<<20 {
				t.Errorf("the calling process grew by %d MiB", grown>>20)
			}
			if rss := p.Stats().PeakRSSBytes; !raceBuild && rss > budget+workerBaseRSS {
				t.Errorf("a worker reached %d MiB resident, more than its budget of %d MiB plus %d MiB", rss>>20, budget>>20, workerBaseRSS>>20)
			}
		})
	}
}

// memoryAttackTimeout is the time limit of the attacks that must end at
// their memory ceiling; limitAttackTimeout that of the attacks that
// another limit must end.
const (
	memoryAttackTimeout = 5 * time.Second
	limitAttackTimeout  = 60 * time.Second
)

// attackSlack is how much later than its limit a stopped script may end
// on a busy machine (a worker to start, the race detector, other
// processes on every core); workerBaseRSS is what a worker holds resident
// before it runs anything (the binary's pages and the runtime), generously.
const (
	attackSlack   = 10 * time.Second
	workerBaseRSS = 64 << 20
)

type scriptAttack struct {
	name, src string
	// stop is "time", "memory" or the text of the expected error.
	stop string
}

// scriptAttacks are the hostile scripts of the issue, sized for the test
// budget (or full size with RELAY_SCRIPT_FULL=1).
func scriptAttacks() []scriptAttack {
	n := scaled("4e5", "2e6")
	return []scriptAttack{
		{"huge repeat", `const parts = []; for (let i = 0; ; i++) parts.push("x".repeat(1 << 24) + i)`, "memory"},
		{"sort of a huge array", `const a = []; for (let i = 0; i < ` + n + `; i++) a.push((i * 7919) % 1000003); a.sort(); return a[0]`, "time"},
		{"JSON.stringify of a huge array", `const s = "x".repeat(1 << 20); return JSON.stringify(new Array(1024).fill(s)).length`, "memory"},
		{"big join", `const s = "y".repeat(1 << 20); return new Array(1024).fill(s).join("").length`, "memory"},
		{"Array(1e9).fill", `return new Array(1e9).fill(0).length`, "more than 16777216 elements"},
		{"tight loop", `for (;;) {}`, "time"},
		{"deep recursion", `function f(n) { return f(n + 1) + 1 } return f(0)`, "Maximum call stack size exceeded"},
		{"deep recursion through built-ins", `function f() { return [1].map(f) } f()`, "Maximum call stack size exceeded"},
		{"allocation in a loop", `const a = []; for (;;) a.push({i: a.length, s: "z".repeat(100) + a.length})`, "memory"},
		{"regexp backtracking", `for (;;) /^(a+)+(?!x)$/.test("a".repeat(30) + "!")`, "time"},
	}
}

// A caller that goes away, or whose deadline passes, stops the script at
// once, even one inside a long built-in.
func TestPoolCallerStops(t *testing.T) {
	p := pool(t)
	slow := `const a = []; for (let i = 0; i < 4e5; i++) a.push((i * 7919) % 1000003); a.sort(); return a[0]`
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := p.Run(ctx, newFake(), gm, slow, script.Options{Timeout: 30 * time.Second})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v is not context.Canceled", err)
	}
	if elapsed := time.Since(start); elapsed > 300*time.Millisecond+attackSlack {
		t.Errorf("stopped after %v", elapsed)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer dcancel()
	_, err = p.Run(dctx, newFake(), gm, slow, script.Options{Timeout: 30 * time.Second})
	wantErr(t, err, world.ErrTimeout, "deadline")

	// An already cancelled context runs nothing.
	f := newFake()
	_, err = p.Run(ctx, f, gm, `await game.get("Actor.a1")`, script.Options{})
	if !errors.Is(err, context.Canceled) || len(f.Calls()) != 0 {
		t.Errorf("error %v, calls %v", err, f.Calls())
	}
}

// A world call that takes too long ends at the script's time limit.
func TestPoolSlowWorldCall(t *testing.T) {
	f := newFake()
	f.block = true
	start := time.Now()
	_, err := pool(t).Run(context.Background(), f, gm, `try { await game.get("Actor.a1") } catch (e) {} return 1`, script.Options{Timeout: 200 * time.Millisecond})
	wantErr(t, err, world.ErrTimeout, "time limit of 200ms")
	if elapsed := time.Since(start); elapsed > 200*time.Millisecond+attackSlack {
		t.Errorf("stopped after %v", elapsed)
	}
}

// Arguments too large to send to the relay are refused inside the script.
func TestPoolLargeArguments(t *testing.T) {
	f := newFake()
	res, err := pool(t).Run(context.Background(), f, gm, `try { await game.get("x".repeat(2 << 20)) } catch (e) { return [e.kind, e.message] }`, script.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Value.([]any); len(v) != 2 || v[0] != "too large" || !strings.Contains(v[1].(string), "game.get: the arguments exceed the size limit") {
		t.Errorf("got %#v", res.Value)
	}
	if len(f.Calls()) != 0 {
		t.Errorf("calls %v", f.Calls())
	}
}

// At most Workers scripts run at once; one more waits up to its time
// limit, then is refused.
func TestPoolBoundsWorkers(t *testing.T) {
	p := newPool(t, script.PoolOptions{Workers: 1, MemoryBytes: testBudget, Warm: -1})
	busy := make(chan error, 1)
	go func() {
		_, err := p.Run(context.Background(), newFake(), gm, `for (;;) {}`, script.Options{Timeout: 1500 * time.Millisecond})
		busy <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Running == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	_, err := p.Run(context.Background(), newFake(), gm, `return 1`, script.Options{Timeout: 200 * time.Millisecond})
	wantErr(t, err, world.ErrUnavailable, "Too many scripts are running (at most 1 at once)")
	wantErr(t, <-busy, world.ErrTimeout, "time limit")
	// The slot is free again; no worker was kept warm.
	res, err := p.Run(context.Background(), newFake(), gm, `return 2`, script.Options{})
	if err != nil || res.Value != 2.0 {
		t.Fatalf("after the busy script: %#v %v", res.Value, err)
	}
	// The slot is freed once the worker's process is gone, just after.
	deadline = time.Now().Add(5 * time.Second)
	for p.Stats().Running != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s := p.Stats(); s.Running != 0 || s.Idle != 0 || s.Started != 2 {
		t.Errorf("stats %+v", s)
	}
}

// A closed pool refuses scripts and keeps no process.
func TestPoolClose(t *testing.T) {
	p := newPool(t, script.PoolOptions{MemoryBytes: testBudget, Warm: 2})
	if _, err := p.Run(context.Background(), newFake(), gm, `return 1`, script.Options{}); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Idle != 0 || s.Running != 0 {
		t.Errorf("stats after Close %+v", s)
	}
	_, err := p.Run(context.Background(), newFake(), gm, `return 1`, script.Options{})
	wantErr(t, err, world.ErrUnavailable, "shutting down")
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() >= before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n >= before {
		t.Errorf("%d goroutines before Close, %d after", before, n)
	}
}

func TestNewPoolRefusesBadOptions(t *testing.T) {
	for _, opts := range []script.PoolOptions{
		{Workers: -1},
		{MemoryBytes: 1 << 20},
	} {
		if p, err := script.NewPool(opts); err == nil {
			p.Close()
			t.Errorf("NewPool(%+v) accepted", opts)
		}
	}
}

// BenchmarkRun compares a script run in process with one in a worker
// process, kept warm (the default) or started for the script. The runs are
// 30 ms apart (not timed), as an occasional script's would be, so that a
// warm worker is ready.
func BenchmarkRun(b *testing.B) {
	const src = `const a = await game.get("Actor.a1"); return a.name`
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			time.Sleep(30 * time.Millisecond)
			b.StartTimer()
			if _, err := script.Run(context.Background(), newFake(), gm, src, script.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range []struct {
		name string
		warm int
	}{{"worker-warm", 0}, {"worker-cold", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := script.NewPool(script.PoolOptions{Warm: bc.warm})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			for b.Loop() {
				b.StopTimer()
				time.Sleep(30 * time.Millisecond)
				b.StartTimer()
				if _, err := p.Run(context.Background(), newFake(), gm, src, script.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// workerPids lists the test process's children that are script workers.
func workerPids(t *testing.T) []int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	var pids []int
	for _, task := range tasks {
		children, err := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(children)) {
			pid, _ := strconv.Atoi(f)
			if cmdline, err := os.ReadFile("/proc/" + f + "/cmdline"); err == nil && strings.HasPrefix(string(cmdline), "relay-script-worker") {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// A worker killed from outside (as the system's out-of-memory killer
// would) fails its script clearly, and the pool carries on with fresh
// workers, the warm one killed as well.
func TestPoolWorkerKilledFromOutside(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("workers need Linux")
	}
	p := newPool(t, script.PoolOptions{MemoryBytes: testBudget})
	if _, err := p.Run(context.Background(), newFake(), gm, `return 1`, script.Options{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	f := newFake()
	go func() {
		_, err := p.Run(context.Background(), f, gm, `await game.get("Actor.a1"); for (;;) {}`, script.Options{Timeout: 20 * time.Second})
		done <- err
	}()
	// Once the script has called the world, its worker runs it.
	deadline := time.Now().Add(10 * time.Second)
	for len(f.Calls()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	killed := workerPids(t)
	for _, pid := range killed {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case err := <-done:
		wantErr(t, err, world.ErrUnavailable, "its worker process was killed from outside the relay (signal: killed)")
	case <-time.After(10 * time.Second):
		t.Fatal("the script did not end when its worker was killed")
	}
	// Once the pool has reaped the killed workers, the dead warm one is
	// replaced when the next script finds it so.
	for _, pid := range killed {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	res, err := p.Run(context.Background(), newFake(), gm, `return 2`, script.Options{})
	if err != nil || res.Value != 2.0 {
		t.Fatalf("after the kill: %#v %v", res.Value, err)
	}
}
