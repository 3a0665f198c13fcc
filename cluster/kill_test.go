package cluster_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/clustertest"
	"github.com/tabletop-relay/relay/relaytest"
)

// The SIGKILL fault script: three `relay serve` processes form a cluster
// of embedded NATS servers, and one of them a round is killed with
// SIGKILL under load and started again on its data directory.

const (
	// killSettle is how long after a node is ready again its failures (as
	// host or as edge) are still put down to its kill: the other nodes
	// learn its new lease and see its NATS routes come back.
	killSettle = 2 * time.Second
	// killReadyLimit is the longest a (re)started node may take to answer
	// /readyz.
	killReadyLimit = 90 * time.Second
	// killTermLimit is the longest a node may take to exit after SIGTERM,
	// alone under load or with the other two at once (when the cluster
	// loses its quorum under it). It stops in about two seconds; it used
	// to take more than ten.
	killTermLimit = 5 * time.Second
)

// TestClusterKill kills nodes of a three-node cluster of real relay
// processes with SIGKILL while writers update documents of the worlds of
// two nodes through random live nodes and an event subscriber per world
// follows its hook events, reconnecting through other nodes with
// Last-Event-ID when its stream breaks. It checks that:
//   - every acknowledged write is in its world at the end;
//   - every acknowledged write's event reached the subscriber once, with
//     event ids increasing across reconnections (except after a
//     documented reset event);
//   - calls fail only around a kill: when the world's host or the node
//     called was down or came back less than killSettle ago.
//
// It runs only with RELAY_CLUSTER_KILL set to the number of rounds
// (RELAY_CLUSTER_KILL=5 go test ./cluster -run TestClusterKill -v);
// RELAY_CLUSTER_KILL_LEASE sets the world lease (the relay's default,
// 15s, otherwise) and RELAY_CLUSTER_KILL_SEED replays the kills' choices.
func TestClusterKill(t *testing.T) {
	v := os.Getenv("RELAY_CLUSTER_KILL")
	if v == "" {
		t.Skip("set RELAY_CLUSTER_KILL=<rounds> to run the SIGKILL fault script")
	}
	rounds, err := strconv.Atoi(v)
	if err != nil || rounds < 1 {
		t.Fatalf("RELAY_CLUSTER_KILL=%q: want a positive number of rounds", v)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RELAY_CLUSTER_KILL_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("RELAY_CLUSTER_KILL_SEED=%q: want a number", s)
		}
	}
	t.Logf("%d rounds, RELAY_CLUSTER_KILL_SEED=%d", rounds, seed)
	rng := mrand.New(mrand.NewPCG(seed, 15))

	// The world lease: a killed host's worlds are unavailable for at most
	// this long after it died. The relay's default unless
	// RELAY_CLUSTER_KILL_LEASE says otherwise.
	lease := cluster.DefaultLeaseTTL
	if s := os.Getenv("RELAY_CLUSTER_KILL_LEASE"); s != "" {
		if lease, err = time.ParseDuration(s); err != nil || lease <= 0 {
			t.Fatalf("RELAY_CLUSTER_KILL_LEASE=%q: want a positive duration", s)
		}
	}
	c := startKillCluster(t, lease)
	key := c.adminKey(t)

	// Worlds on two different nodes: demo on n1, west on n2. n3 hosts
	// nothing and is only an edge.
	type target struct {
		world, uuid string
		host        int
	}
	targets := []target{
		{"demo", relaytest.MaraUUID, 0}, {"demo", relaytest.GuardUUID, 0},
		{"west", relaytest.AriaUUID, 1}, {"west", relaytest.BromUUID, 1},
	}
	acked := make([]atomic.Int64, len(targets))
	// ackedNames holds every acknowledged write's name, per target (each
	// written by its writer alone, read after the writers stopped).
	ackedNames := make([][]string, len(targets))
	var ok, excused atomic.Int64
	var unexpectedMu sync.Mutex
	var unexpected []killFailure
	stop := make(chan struct{})
	var readers, writers sync.WaitGroup

	// The subscribers are connected before the first write, so that they
	// must see every write's event.
	subs := []*killSubscriber{newKillSubscriber("demo"), newKillSubscriber("west")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, s := range subs {
		readers.Go(func() { s.follow(ctx, c, key) })
	}
	for _, s := range subs {
		deadline := time.Now().Add(30 * time.Second)
		for !s.connected() {
			if time.Now().After(deadline) {
				t.Fatalf("the subscriber of %s did not connect within 30 s", s.world)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for w, tg := range targets {
		writers.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for seq := int64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				edge, edgeGen := c.pick(-1)
				hostGen := c.generation(tg.host)
				began := time.Now()
				name := fmt.Sprintf("w%d-%d", w, seq)
				status, body := killPut(client, c.base(edge), key, tg.world, tg.uuid, name)
				if status == http.StatusOK {
					acked[w].Store(seq)
					ackedNames[w] = append(ackedNames[w], name)
					ok.Add(1)
					continue
				}
				// A failure is put down to a kill when the world's host or
				// the node called was killed or restarted around it.
				if c.disturbed(tg.host, hostGen, began) || c.disturbed(edge, edgeGen, began) {
					excused.Add(1)
				} else {
					unexpectedMu.Lock()
					unexpected = append(unexpected, killFailure{at: began, what: fmt.Sprintf("%s via n%d: %d %s", tg.world, edge+1, status, body)})
					unexpectedMu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}

	var readies, terms []time.Duration
	var kills []killRound
	countUnexpected := func() int {
		unexpectedMu.Lock()
		defer unexpectedMu.Unlock()
		return len(unexpected)
	}
	for r := 1; r <= rounds; r++ {
		time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
		i := rng.IntN(3)
		killed := time.Now()
		// One round in three stops the node gracefully instead, under
		// the same load.
		how := "killed"
		if rng.IntN(3) == 0 {
			how = "stopped (SIGTERM)"
			terms = append(terms, c.term(t, i))
		} else {
			c.kill(i)
		}
		down := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		time.Sleep(down)
		ready := c.start(t, i)
		readies = append(readies, ready)
		kills = append(kills, killRound{node: i, killed: killed, back: time.Now()})
		t.Logf("round %d (at %s): n%d %s, down %v, ready again %v after its restart; so far %d writes acknowledged, %d failed around a kill, %d failed otherwise",
			r, killed.Format("15:04:05.000"), i+1, how, down, ready.Round(time.Millisecond), ok.Load(), excused.Load(), countUnexpected())
	}
	time.Sleep(2 * time.Second)
	close(stop)
	writers.Wait()

	// Every acknowledged write is in its world.
	client := &http.Client{Timeout: 10 * time.Second}
	for w, tg := range targets {
		edge, _ := c.pick(-1)
		var name string
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, data := killGetName(client, c.base(edge), key, tg.world, tg.uuid)
			if status == http.StatusOK {
				name = data
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s: not readable at the end: %d %s", tg.world, tg.uuid, status, data)
			}
			time.Sleep(100 * time.Millisecond)
		}
		seq, err := strconv.ParseInt(strings.TrimPrefix(name, fmt.Sprintf("w%d-", w)), 10, 64)
		if err != nil || seq < acked[w].Load() {
			t.Errorf("%s %s: name %q, but write %d was acknowledged: an acknowledged write is lost", tg.world, tg.uuid, name, acked[w].Load())
		}
	}

	// A last write to each world must reach its subscriber: the streams
	// caught up after the last kill.
	for _, s := range subs {
		mark := "final-" + s.world
		edge, _ := c.pick(-1)
		// Aria: the demo world's writers used Mara and the guard, and
		// west's Aria was checked above.
		if status, body := killPut(client, c.base(edge), key, s.world, relaytest.AriaUUID, mark); status != http.StatusOK {
			t.Fatalf("final write to %s: %d %s", s.world, status, body)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !s.saw(mark) {
			if time.Now().After(deadline) {
				t.Errorf("%s: the subscriber did not receive the final write's event within 30 s", s.world)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cancel()
	readers.Wait()

	// Every acknowledged write's event reached its world's subscriber.
	for w, tg := range targets {
		s := subs[slices.IndexFunc(subs, func(s *killSubscriber) bool { return s.world == tg.world })]
		var missing []string
		for _, name := range ackedNames[w] {
			if !s.saw(name) {
				missing = append(missing, name)
			}
		}
		switch {
		case len(missing) > 0 && s.resetCount() > 0:
			// The subscriber was told its resume point was no longer kept:
			// the documented loss.
			t.Logf("%s %s: %d of %d acknowledged writes' events lost to the subscriber's reset", tg.world, tg.uuid, len(missing), len(ackedNames[w]))
		case len(missing) > 0:
			t.Errorf("%s %s: the subscriber missed the events of %d of %d acknowledged writes: %v", tg.world, tg.uuid, len(missing), len(ackedNames[w]), missing[:min(10, len(missing))])
		}
	}

	t.Logf("%d rounds, lease %v: %d writes acknowledged, none lost; %d failed around a kill (the world's host or the node called was down or had restarted less than %v ago), %d failed otherwise",
		rounds, c.lease, ok.Load(), excused.Load(), killSettle, len(unexpected))
	// Calls for worlds whose host lives must keep succeeding, whichever
	// node they reach, while another node is killed and comes back.
	for _, b := range killBursts(unexpected, kills) {
		t.Errorf("failed though neither the world's host nor the node called was killed: %s", b)
	}
	t.Logf("restarts ready (/readyz 200) after: %v", roundAll(readies))
	t.Logf("graceful stops (SIGTERM to exit) under load: %v", roundAll(terms))
	for _, s := range subs {
		s.report(t)
	}
	for i, path := range c.logs {
		for _, line := range killLogProblems(path) {
			t.Logf("n%d logged %s", i+1, line)
		}
		for _, line := range killPhases(path) {
			t.Logf("n%d %s", i+1, line)
		}
	}
}

// killPhases lists how long each start and stop of a node took, phase by
// phase, from its "relay ready" and "relay stopped" log lines.
func killPhases(path string) []string {
	data, _ := os.ReadFile(path)
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Msg   string                   `json:"msg"`
			Start map[string]time.Duration `json:"start"`
			Stop  map[string]time.Duration `json:"stop"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		phases := line.Start
		switch {
		case line.Msg == "relay stopped":
			phases = line.Stop
		case strings.HasPrefix(line.Msg, "published the events"):
			out = append(out, strings.TrimSpace(sc.Text()))
			continue
		case line.Msg != "relay ready":
			continue
		}
		names := make([]string, 0, len(phases))
		for name := range phases {
			names = append(names, name)
		}
		slices.Sort(names)
		var parts []string
		for _, name := range names {
			parts = append(parts, fmt.Sprintf("%s %v", name, phases[name].Round(time.Millisecond)))
		}
		out = append(out, line.Msg+": "+strings.Join(parts, ", "))
	}
	return out
}

// killLogProblems summarizes a node's log lines at level WARN and above:
// each message with its count and its first error, for the report.
func killLogProblems(path string) []string {
	data, _ := os.ReadFile(path)
	type problem struct {
		count int
		first string
	}
	byMsg := map[string]*problem{}
	var order []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Time  string `json:"time"`
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || (line.Level != "WARN" && line.Level != "ERROR") {
			continue
		}
		if strings.HasPrefix(line.Msg, "nats: Error trying to connect to route") {
			continue // a peer is down: expected, and many
		}
		key := line.Level + " " + line.Msg
		p := byMsg[key]
		if p == nil {
			p = &problem{first: line.Time + " " + line.Error}
			byMsg[key] = p
			order = append(order, key)
		}
		p.count++
	}
	var out []string
	for _, key := range order {
		out = append(out, fmt.Sprintf("%q %d times; first at %s", key, byMsg[key].count, byMsg[key].first))
	}
	return out
}

// killCluster is the three relay processes and what the test knows of
// them: whether each is up, and a generation counting its starts.
type killCluster struct {
	bin    string
	lease  time.Duration
	args   [][]string
	dirs   []string
	listen []string
	logs   []string

	mu     sync.Mutex
	procs  []*exec.Cmd
	waited []chan error
	up     []bool
	gen    []int
	// changed is when each node was last killed or became ready.
	changed []time.Time
}

// startKillCluster builds the relay and starts three nodes: n1 with the
// demo world, n2 with a world "west" seeded into its data directory, n3
// with none.
func startKillCluster(t *testing.T, lease time.Duration) *killCluster {
	t.Helper()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "relay")
	build := exec.Command("go", "build", "-o", bin, "github.com/tabletop-relay/relay/cmd/relay")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	routes := clustertest.FreeAddrs(t, 3)
	listen := clustertest.FreeAddrs(t, 3)
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	c := &killCluster{bin: bin, listen: listen, lease: lease,
		procs: make([]*exec.Cmd, 3), waited: make([]chan error, 3), up: make([]bool, 3), gen: make([]int, 3), changed: make([]time.Time, 3)}
	for i := range 3 {
		dir := t.TempDir()
		if i == 1 {
			seedWorld(t, dir, "west")
		}
		c.dirs = append(c.dirs, dir)
		c.logs = append(c.logs, filepath.Join(tmp, fmt.Sprintf("n%d.log", i+1)))
		c.args = append(c.args, []string{"serve",
			"--node-name", fmt.Sprintf("n%d", i+1),
			"--listen", listen[i],
			"--data", dir,
			"--demo=" + strconv.FormatBool(i == 0),
			"--cluster-listen", routes[i],
			"--cluster-peers", strings.Join(routes, ","),
			"--cluster-secret", hex.EncodeToString(secret),
			"--cluster-lease", lease.String(),
			"--cluster-forward-timeout", "2s",
			"--log-format", "json",
		})
	}
	t.Cleanup(func() { c.stopAll(t) })
	// The shared state is kept three ways: the cluster answers once all
	// three are up, so they start together.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { c.start(t, i) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return c
}

// start starts node i on its data directory and waits until it answers
// /readyz with 200; it returns how long that took.
func (c *killCluster) start(t *testing.T, i int) time.Duration {
	logFile, err := os.OpenFile(c.logs[i], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer logFile.Close()
	cmd := exec.Command(c.bin, c.args[i]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = withoutRelayEnv()
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Error(err)
		return 0
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	c.mu.Lock()
	c.procs[i], c.waited[i] = cmd, waited
	c.gen[i]++
	c.mu.Unlock()

	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get("http://" + c.listen[i] + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-waited:
			waited <- err
			t.Errorf("n%d exited during start-up (%v); its log ends:\n%s", i+1, err, crashTail(c.logs[i], 30))
			return 0
		default:
		}
		if time.Since(began) > killReadyLimit {
			t.Errorf("n%d not ready within %v; its log ends:\n%s", i+1, killReadyLimit, crashTail(c.logs[i], 30))
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	c.up[i] = true
	c.changed[i] = time.Now()
	c.mu.Unlock()
	return time.Since(began)
}

// kill sends node i SIGKILL and waits until it is gone.
func (c *killCluster) kill(i int) {
	c.mu.Lock()
	c.up[i] = false
	c.changed[i] = time.Now()
	cmd, waited := c.procs[i], c.waited[i]
	c.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err := <-waited
	waited <- err
}

// term stops node i with SIGTERM and returns how long it took to exit; a
// node that takes more than killTermLimit fails the test, and one that
// has not exited after ten seconds is killed.
func (c *killCluster) term(t *testing.T, i int) time.Duration {
	c.mu.Lock()
	c.up[i] = false
	c.changed[i] = time.Now()
	cmd, waited := c.procs[i], c.waited[i]
	c.mu.Unlock()
	began := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-waited:
		waited <- err
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := <-waited
		waited <- err
	}
	took := time.Since(began)
	if took > killTermLimit {
		t.Errorf("n%d took %v to exit after SIGTERM (limit %v); its log ends:\n%s", i+1, took, killTermLimit, crashTail(c.logs[i], 20))
	}
	return took
}

// stopAll stops the nodes together with SIGTERM, each within
// killTermLimit though the cluster loses its quorum as they go.
func (c *killCluster) stopAll(t *testing.T) {
	var wg sync.WaitGroup
	took := make([]time.Duration, 3)
	for i := range 3 {
		c.mu.Lock()
		running := c.procs[i] != nil
		c.mu.Unlock()
		if running {
			wg.Go(func() { took[i] = c.term(t, i) })
		}
	}
	wg.Wait()
	t.Logf("the three nodes stopped together (SIGTERM to exit): %v", roundAll(took))
}

// adminKey reads the cluster's admin key, which the node that made the
// cluster's first key wrote into its data directory.
func (c *killCluster) adminKey(t *testing.T) string {
	t.Helper()
	for _, dir := range c.dirs {
		if b, err := os.ReadFile(filepath.Join(dir, "admin.key")); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatal("no node wrote admin.key")
	return ""
}

// pick returns a random live node other than not (-1: any) and its
// generation. Some node is always up: one is killed at a time.
func (c *killCluster) pick(not int) (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live []int
	for i := range 3 {
		if c.up[i] && i != not {
			live = append(live, i)
		}
	}
	if len(live) == 0 {
		for i := range 3 {
			if c.up[i] {
				live = append(live, i)
			}
		}
	}
	i := live[mrand.IntN(len(live))]
	return i, c.gen[i]
}

// generation is node i's number of starts so far.
func (c *killCluster) generation(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen[i]
}

// disturbed tells whether node i, of generation gen when a call began at
// began, was killed or restarted since, is down, or became ready less than
// killSettle before the call began.
func (c *killCluster) disturbed(i, gen int, began time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.up[i] || c.gen[i] != gen || c.changed[i].After(began.Add(-killSettle))
}

// base is node i's URL.
func (c *killCluster) base(i int) string { return "http://" + c.listen[i] }

// killPut sets a document's name through a node and returns the answer's
// status (0 when none came) and body. Each write carries an idempotency
// key of its own (names are unique), as a client that retries would send.
func killPut(client *http.Client, base, key, world, uuid, name string) (int, string) {
	body := fmt.Sprintf(`{"data":{"name":%q}}`, name)
	req, _ := http.NewRequest(http.MethodPut, base+"/update?"+relaytest.Q("clientId", world, "uuid", uuid).Encode(), strings.NewReader(body))
	req.Header.Set("x-api-key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "kill/"+world+"/"+uuid+"/"+name)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// killGetName reads a document's name through a node: the status and the
// name, or the body when the status is not 200.
func killGetName(client *http.Client, base, key, world, uuid string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, base+"/get?"+relaytest.Q("clientId", world, "uuid", uuid).Encode(), nil)
	req.Header.Set("x-api-key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, string(b)
	}
	var env struct {
		Data struct {
			Name string `json:"name"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, env.Data.Name
}

// killSubscriber follows one world's hooks stream (every hook event of
// the world, for the admin key) through random live nodes, and records
// what it saw. Each time its stream breaks it tries another node, with
// Last-Event-ID, and goes on trying live nodes until one serves it.
type killSubscriber struct {
	world string

	mu         sync.Mutex
	last       int64 // the last event id seen; 0 before the first
	reset      bool  // a reset event came after last
	events     int
	disorder   []string // ids not above the last one, without a reset event
	skipped    int      // ids skipped (those of other channels' events)
	dupes      int      // writes whose event came twice
	resets     int
	reconnects int
	opened     int         // streams opened
	refused    map[int]int // failed (re)connections by status; 0: no answer
	longest    time.Duration
	seen       map[string]bool // the names written that events carried
	node       int             // the node of the stream being read
	resetNotes []string        // when, where and what each reset said
}

func newKillSubscriber(world string) *killSubscriber {
	return &killSubscriber{world: world, refused: map[int]int{}, seen: map[string]bool{}}
}

// follow opens the stream and, each time it ends, opens it again through
// another live node with Last-Event-ID, until ctx ends.
func (s *killSubscriber) follow(ctx context.Context, c *killCluster, key string) {
	client := &http.Client{}
	prev := -1
	var broke time.Time
	for ctx.Err() == nil {
		edge, _ := c.pick(prev)
		prev = edge
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base(edge)+"/hooks/subscribe?"+relaytest.Q("clientId", s.world).Encode(), nil)
		req.Header.Set("x-api-key", key)
		s.mu.Lock()
		if s.last > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(s.last, 10))
		}
		s.mu.Unlock()
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			status := 0
			if err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			if ctx.Err() == nil {
				s.mu.Lock()
				s.refused[status]++
				s.mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		s.node = edge
		s.opened++
		if !broke.IsZero() {
			s.reconnects++
			s.longest = max(s.longest, time.Since(broke))
		}
		s.mu.Unlock()
		s.read(resp.Body)
		resp.Body.Close()
		broke = time.Now()
	}
}

// read consumes one stream's frames until it ends.
func (s *killSubscriber) read(body io.Reader) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var id, event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		case line == "":
			s.frame(id, event, data)
			id, event, data = "", "", ""
		}
	}
}

// frame records one event: its id must follow the last one, unless a
// reset came in between.
func (s *killSubscriber) frame(id, event, data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch event {
	case "":
		return
	case "reset":
		s.resets++
		s.reset = true // any next id is accepted
		s.resetNotes = append(s.resetNotes, fmt.Sprintf("%s on n%d: %s", time.Now().Format("15:04:05.000"), s.node+1, data))
		return
	}
	if id == "" {
		return // connected, overflow
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		s.disorder = append(s.disorder, "bad id "+id)
		return
	}
	if n <= s.last && !s.reset {
		s.disorder = append(s.disorder, fmt.Sprintf("%d after %d", n, s.last))
	}
	if n > s.last+1 && s.last > 0 && !s.reset {
		// The hooks stream carries a part of the world's events (an
		// update is also an actor-update of the actor channel, under an
		// id of its own), so ids may skip; what must not be missed is
		// checked through the writes' names.
		s.skipped += int(n - s.last - 1)
	}
	s.last, s.reset = n, false
	s.events++
	if event == "updateActor" {
		if name := killEventName.FindStringSubmatch(data); name != nil {
			if s.seen[name[1]] {
				s.dupes++
			}
			s.seen[name[1]] = true
		}
	}
}

// killEventName finds the name a write of the test set in an event's
// payload.
var killEventName = regexp.MustCompile(`"name":"(w[0-9]+-[0-9]+|final-[a-z]+)"`)

// resetCount is the number of reset events received.
func (s *killSubscriber) resetCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resets
}

// connected tells whether a stream was opened.
func (s *killSubscriber) connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened > 0
}

// saw tells whether an update event setting the name mark arrived.
func (s *killSubscriber) saw(mark string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[mark]
}

// report logs what the subscriber saw and fails the test on a gap.
func (s *killSubscriber) report(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("subscriber of %s: %d events with increasing ids, last id %d (%d ids of other channels skipped); %d reconnections through another node (longest %v from break to open stream); %d resets; %d duplicate events; refused reconnections by status (0: no answer): %v",
		s.world, s.events, s.last, s.skipped, s.reconnects, s.longest.Round(time.Millisecond), s.resets, s.dupes, s.refused)
	for _, note := range s.resetNotes {
		t.Logf("subscriber of %s: reset at %s", s.world, note)
	}
	if len(s.disorder) > 0 {
		t.Errorf("subscriber of %s: %d ids not increasing without a reset: %v", s.world, len(s.disorder), s.disorder[:min(10, len(s.disorder))])
	}
	if s.dupes > 0 {
		t.Errorf("subscriber of %s: %d events came twice", s.world, s.dupes)
	}
}

// killFailure is a call that failed, and when.
type killFailure struct {
	at   time.Time
	what string
}

// killRound is one kill: of which node, when, and when it was ready again.
type killRound struct {
	node         int
	killed, back time.Time
}

// killBursts groups failures into bursts (less than a second apart, after
// the same kill) and describes each: when it began and ended after the
// last kill before it, how many calls failed, and the first failure.
func killBursts(failures []killFailure, rounds []killRound) []string {
	slices.SortFunc(failures, func(a, b killFailure) int { return a.at.Compare(b.at) })
	after := func(f killFailure) int {
		r := -1
		for k, round := range rounds {
			if !round.killed.After(f.at) {
				r = k
			}
		}
		return r
	}
	var out []string
	for i := 0; i < len(failures); {
		r := after(failures[i])
		j := i + 1
		for j < len(failures) && failures[j].at.Sub(failures[j-1].at) < time.Second && after(failures[j]) == r {
			j++
		}
		if r < 0 {
			out = append(out, fmt.Sprintf("%d calls before the first kill; first: %s", j-i, failures[i].what))
		} else {
			k := rounds[r]
			out = append(out, fmt.Sprintf("round %d (n%d killed, ready again at +%v): %d calls from +%v to +%v; first: %s",
				r+1, k.node+1, k.back.Sub(k.killed).Round(time.Millisecond), j-i,
				failures[i].at.Sub(k.killed).Round(time.Millisecond), failures[j-1].at.Sub(k.killed).Round(time.Millisecond), failures[i].what))
		}
		i = j
	}
	return out
}

// withoutRelayEnv is the environment without RELAY_* settings, so the
// nodes do not inherit the developer's.
func withoutRelayEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "RELAY_") })
}

// crashTail is the last n lines of a node's log.
func crashTail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// roundAll rounds durations to milliseconds, for the log.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
