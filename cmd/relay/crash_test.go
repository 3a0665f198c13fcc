package main

import (
	"bytes"
	"context"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/demo"
)

// TestCrash runs the relay as a child process and kills it with SIGKILL,
// again and again: under writes (Safety) and during its very first start
// (FirstStart). The relay is built once for both.
//
// The default run does a few cycles in seconds. RELAY_CRASH_CYCLES sets
// the number of cycles (`make crash` runs 200) and RELAY_CRASH_SEED
// replays a run: the seed drives the kill delays and the writes' choices
// (the interleaving of the concurrent writers is up to the scheduler).
func TestCrash(t *testing.T) {
	bin := crashBinary(t, t.TempDir())
	t.Run("Safety", func(t *testing.T) { crashSafety(t, bin) })
	t.Run("FirstStart", func(t *testing.T) { crashFirstStart(t, bin) })
}

// crashSafety drives concurrent writes (document updates, currency
// transfers between Aria and Brom, file uploads), kills the relay at a
// random moment, restarts it on the same data directory and checks that
// nothing acknowledged was lost and nothing was half done; then it does it
// again.
func crashSafety(t *testing.T, bin string) {
	cycles := 5
	if v := os.Getenv("RELAY_CRASH_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("RELAY_CRASH_CYCLES=%q: want a positive number", v)
		}
		cycles = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("RELAY_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RELAY_CRASH_SEED=%q: want a number", v)
		}
		seed = n
	}
	t.Logf("crash test: %d cycles, RELAY_CRASH_SEED=%d", cycles, seed)
	rng := rand.New(rand.NewPCG(seed, 0x7e1a7))

	dataDir := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "relay.log")
	p := startCrashProc(t, bin, dataDir, logPath)
	keyBytes, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
	if err != nil {
		t.Fatalf("admin key: %v", err)
	}
	key := strings.TrimSpace(string(keyBytes))
	st := newCrashState(t, &crashClient{base: p.base, key: key, http: &http.Client{Timeout: 5 * time.Second}}, dataDir)

	var startups []time.Duration
	var acked crashCounts
	for cycle := 1; cycle <= cycles; cycle++ {
		delay := time.Duration(20+rng.IntN(780)) * time.Millisecond
		if cycles > 20 && rng.IntN(4) == 0 {
			delay = time.Duration(rng.IntN(20)) * time.Millisecond // right after start
		}
		workSeed := rng.Uint64()
		client := &crashClient{base: p.base, key: key, http: &http.Client{Timeout: 5 * time.Second}}
		got := st.drive(client, workSeed, delay, p.kill)
		acked.add(got)
		if t.Failed() {
			t.Fatalf("failed in cycle %d (RELAY_CRASH_SEED=%d); the relay log ends:\n%s", cycle, seed, crashLogTail(logPath, 40))
		}

		p = startCrashProc(t, bin, dataDir, logPath)
		startups = append(startups, p.startup)
		t.Logf("cycle %d: killed after %v: %s acknowledged; restarted in %v", cycle, delay, got, p.startup.Round(time.Millisecond))
		if problems := p.startupProblems(); len(problems) > 0 {
			t.Errorf("cycle %d: start-up logged problems:\n%s", cycle, strings.Join(problems, "\n"))
		}
		st.verify(&crashClient{base: p.base, key: key, http: &http.Client{Timeout: 5 * time.Second}}, cycle)
		if t.Failed() {
			t.Fatalf("failed after cycle %d (RELAY_CRASH_SEED=%d); the relay log ends:\n%s", cycle, seed, crashLogTail(logPath, 40))
		}
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Errorf("final graceful stop: %v", err)
	}
	var worst time.Duration
	for _, d := range startups {
		worst = max(worst, d)
	}
	t.Logf("%d kills, all restarts healthy (slowest %v); acknowledged in total: %s", cycles, worst.Round(time.Millisecond), acked)
}

// crashCounts counts acknowledged writes.
type crashCounts struct {
	updates, transfers, uploads int
}

func (c *crashCounts) add(o crashCounts) {
	c.updates += o.updates
	c.transfers += o.transfers
	c.uploads += o.uploads
}

func (c crashCounts) String() string {
	return strconv.Itoa(c.updates) + " updates, " + strconv.Itoa(c.transfers) + " transfers, " + strconv.Itoa(c.uploads) + " uploads"
}

// crashKillDuring runs work until ctx ends, kills the relay after delay,
// then cancels ctx and waits for work.
func crashKillDuring(delay time.Duration, kill func(), work []func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, w := range work {
		wg.Go(func() { w(ctx) })
	}
	time.Sleep(delay)
	kill()
	cancel()
	wg.Wait()
}

// crashFirstStart kills the relay at a random moment of its very first
// start (creating the demo world, its files and the admin key), then
// starts it again: it must start, with the demo world whole (every demo
// file as shipped) and a working admin key. It does RELAY_CRASH_CYCLES/10
// rounds (at least 4).
func crashFirstStart(t *testing.T, bin string) {
	rounds := 4
	if n, err := strconv.Atoi(os.Getenv("RELAY_CRASH_CYCLES")); err == nil && n/10 > rounds {
		rounds = n / 10
	}
	seed := uint64(time.Now().UnixNano())
	if n, err := strconv.ParseUint(os.Getenv("RELAY_CRASH_SEED"), 10, 64); err == nil {
		seed = n
	}
	t.Logf("first-start crash test: %d rounds, RELAY_CRASH_SEED=%d", rounds, seed)
	rng := rand.New(rand.NewPCG(seed, 0xf125))
	want := map[string][]byte{}
	err := fs.WalkDir(demo.Files(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		want[p], err = fs.ReadFile(demo.Files(), p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// An uninterrupted first start shows how long one takes; the kills
	// fall somewhere within that time.
	whole := startCrashProc(t, bin, t.TempDir(), filepath.Join(t.TempDir(), "relay.log"))
	span := whole.startup
	whole.kill()
	t.Logf("a first start takes %v", span.Round(time.Millisecond))

	for round := 1; round <= rounds; round++ {
		dataDir := t.TempDir()
		logPath := filepath.Join(t.TempDir(), "relay.log")
		delay := time.Duration(rng.Int64N(int64(span)))
		first := launchCrashProc(t, bin, dataDir, logPath)
		time.Sleep(delay)
		first.kill()

		p := startCrashProc(t, bin, dataDir, logPath)
		if problems := p.startupProblems(); len(problems) > 0 {
			t.Errorf("round %d (killed after %v): start-up logged problems:\n%s", round, delay, strings.Join(problems, "\n"))
		}
		filesDir := filepath.Join(dataDir, "worlds", "demo", "files")
		for name, content := range want {
			got, err := os.ReadFile(filepath.Join(filesDir, filepath.FromSlash(name)))
			if err != nil || !bytes.Equal(got, content) {
				t.Errorf("round %d (killed after %v): demo file %s: %d bytes of %d, %v", round, delay, name, len(got), len(content), err)
			}
		}
		keyBytes, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
		if err != nil {
			t.Fatalf("round %d (killed after %v): admin key: %v", round, delay, err)
		}
		c := &crashClient{base: p.base, key: strings.TrimSpace(string(keyBytes)), http: &http.Client{Timeout: 5 * time.Second}}
		if coins, err := crashBalance(context.Background(), c, relaytest.AriaUUID); err != nil || coins["gp"] != 85 {
			t.Errorf("round %d (killed after %v): Aria's coins %v, %v", round, delay, coins, err)
		}
		if _, err := os.Stat(filepath.Join(dataDir, node.DemoPendingFile)); err == nil {
			t.Errorf("round %d: %s left behind", round, node.DemoPendingFile)
		}
		if err := p.stop(10 * time.Second); err != nil {
			t.Errorf("round %d: graceful stop: %v", round, err)
		}
		note := ""
		if strings.Contains(p.log(), "wrote the demo world's files again") {
			note = " (the kill fell between creating the world and writing its files)"
		}
		t.Logf("round %d: killed after %v, restarted in %v%s", round, delay, p.startup.Round(time.Millisecond), note)
		if t.Failed() {
			t.Fatalf("failed in round %d (RELAY_CRASH_SEED=%d); the relay log ends:\n%s", round, seed, crashLogTail(logPath, 40))
		}
	}
}
