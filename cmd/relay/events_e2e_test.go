package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// sseFrame is one frame of an event stream: an event, or a comment.
type sseFrame struct {
	id, event, data, comment string
}

// json decodes an event's data.
func (f sseFrame) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(f.data), &v); err != nil {
		t.Fatalf("event %s data is not a JSON object: %v: %s", f.event, err, f.data)
	}
	return v
}

// sseClient is an open event stream read by a goroutine.
type sseClient struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	frames chan sseFrame
}

// openStream opens an event stream; it fails the test unless the answer is
// 200 with text/event-stream. header may add request headers.
func (tr *testRelay) openStream(path, key string, query url.Values, header http.Header) *sseClient {
	tr.t.Helper()
	resp, cancel := tr.startStream(path, key, query, header)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body := make([]byte, 512)
		n, _ := resp.Body.Read(body)
		cancel()
		tr.t.Fatalf("GET %s: status %d %s: %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body[:n])
	}
	c := &sseClient{t: tr.t, resp: resp, cancel: cancel, frames: make(chan sseFrame, 10000)}
	go c.read()
	tr.t.Cleanup(c.close)
	return c
}

// startStream sends a stream request and returns the response as is.
func (tr *testRelay) startStream(path, key string, query url.Values, header http.Header) (*http.Response, context.CancelFunc) {
	tr.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := tr.Base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		tr.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	// No client time-out: a stream lasts.
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		cancel()
		tr.t.Fatalf("GET %s: %v", path, err)
	}
	return resp, func() { cancel(); resp.Body.Close() }
}

func (c *sseClient) close() { c.cancel() }

// read parses frames until the stream ends, then closes frames.
func (c *sseClient) read() {
	defer close(c.frames)
	sc := bufio.NewScanner(c.resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var f sseFrame
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if f.event != "" || f.data != "" {
				c.frames <- f
			}
			f = sseFrame{}
		case strings.HasPrefix(line, ":"):
			c.frames <- sseFrame{comment: strings.TrimSpace(line[1:])}
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.data = line[6:]
		}
	}
}

// next returns the next event, skipping comments; it fails after timeout.
func (c *sseClient) next(timeout time.Duration) sseFrame {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatal("the stream ended")
			}
			if f.comment == "" {
				return f
			}
		case <-deadline:
			c.t.Fatalf("no event within %v", timeout)
		}
	}
}

// expect reads the next events and checks their names.
func (c *sseClient) expect(names ...string) []sseFrame {
	c.t.Helper()
	var out []sseFrame
	for _, name := range names {
		f := c.next(5 * time.Second)
		if f.event != name {
			c.t.Fatalf("event %q (%s), want %q; so far %v", f.event, f.data, name, out)
		}
		out = append(out, f)
	}
	return out
}

// ended reports whether the stream ends (after any remaining frames)
// within timeout, returning the events read meanwhile.
func (c *sseClient) ended(timeout time.Duration) ([]sseFrame, bool) {
	var got []sseFrame
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return got, true
			}
			if f.comment == "" {
				got = append(got, f)
			}
		case <-deadline:
			return got, false
		}
	}
}

// write sends a REST write with the admin key and checks it succeeded.
func (tr *testRelay) write(method, path string, body map[string]any) map[string]any {
	tr.t.Helper()
	resp := tr.Do(method, path, tr.AdminKey, nil, body)
	if resp.Status != http.StatusOK {
		tr.t.Fatalf("%s %s: %d %s", method, path, resp.Status, resp.Body)
	}
	return resp.Data(tr.t)
}

func (tr *testRelay) setHP(uuid string, hp int) {
	tr.t.Helper()
	tr.write("PUT", "/update", map[string]any{"uuid": uuid, "data": map[string]any{"system.attributes.hp.value": hp}})
}

// names lists the event names of frames.
func names(frames []sseFrame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.event
	}
	return out
}

// quiet fails when an event (not a keepalive) arrives within d.
func (c *sseClient) quiet(d time.Duration) {
	c.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return
			}
			if f.comment == "" {
				c.t.Fatalf("unexpected event %s: %s", f.event, f.data)
			}
		case <-deadline:
			return
		}
	}
}

func TestEventChannelsAndFilters(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	key := tr.AdminKey
	const combatID = "combatOne0000001"
	allHooks := tr.openStream("/hooks/subscribe", key, nil, nil)
	someHooks := tr.openStream("/hooks/subscribe", key, relaytest.Q("hooks", "createItem, deleteItem"), nil)
	allActors := tr.openStream("/actor/subscribe", key, nil, nil)
	aria := tr.openStream("/actor/subscribe", key, relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	tavern := tr.openStream("/scene/subscribe", key, relaytest.Q("sceneId", "tavernScene00001"), nil)
	anyScene := tr.openStream("/scene/subscribe", key, nil, nil)
	combat := tr.openStream("/encounters/subscribe", key, relaytest.Q("encounterId", combatID), nil)
	otherCombat := tr.openStream("/encounters/subscribe", key, relaytest.Q("encounterId", "otherCombat00001"), nil)
	streams := []*sseClient{allHooks, someHooks, allActors, aria, tavern, anyScene, combat, otherCombat}
	for _, c := range streams {
		f := c.expect("connected")[0]
		if f.id != "" || f.json(t)["clientId"] != "demo" {
			t.Fatalf("connected frame %+v", f)
		}
	}
	tavernToken := "Scene.tavernScene00001.Token.ariaToken0000001"

	tr.setHP(relaytest.BromUUID, 20)
	tr.setHP(relaytest.AriaUUID, 1)
	item := tr.write("POST", "/create", map[string]any{"entityType": "Item", "parentUuid": relaytest.AriaUUID, "data": map[string]any{"name": "Gem", "type": "loot"}})["uuid"].(string)
	tr.write("PUT", "/update", map[string]any{"uuid": item, "data": map[string]any{"name": "Ruby"}})
	tr.write("DELETE", "/delete", map[string]any{"uuid": item})
	effect := tr.write("POST", "/create", map[string]any{"entityType": "ActiveEffect", "parentUuid": relaytest.AriaUUID, "data": map[string]any{"name": "Blessed"}})["uuid"].(string)
	tr.write("DELETE", "/delete", map[string]any{"uuid": effect})
	tr.write("PUT", "/update", map[string]any{"uuid": tavernToken, "data": map[string]any{"x": 500}})
	barrel := tr.write("POST", "/create", map[string]any{"entityType": "Token", "parentUuid": relaytest.TavernScene, "data": map[string]any{"name": "Barrel"}})["uuid"].(string)
	tr.write("DELETE", "/delete", map[string]any{"uuid": barrel})
	tr.write("PUT", "/update", map[string]any{"uuid": relaytest.TavernScene, "data": map[string]any{"name": "The Tavern"}})
	cellar := tr.write("POST", "/create", map[string]any{"entityType": "Scene", "data": map[string]any{"name": "Cellar"}})["uuid"].(string)
	tr.write("PUT", "/update", map[string]any{"uuid": cellar, "data": map[string]any{"active": true}})
	tr.write("POST", "/create", map[string]any{"entityType": "Combat", "keepId": true, "data": map[string]any{"_id": combatID, "round": 0, "turn": 0, "started": false, "scene": "tavernScene00001"}})
	tr.write("POST", "/create", map[string]any{"entityType": "Combatant", "parentUuid": "Combat." + combatID, "data": map[string]any{"name": "Brom", "actorId": "bromIronfist0001", "tokenId": "bromToken0000001"}})
	tr.write("PUT", "/update", map[string]any{"uuid": "Combat." + combatID, "data": map[string]any{"started": true, "round": 1}})
	tr.write("PUT", "/update", map[string]any{"uuid": "Combat." + combatID, "data": map[string]any{"turn": 1}})
	tr.write("PUT", "/update", map[string]any{"uuid": "Combat." + combatID, "data": map[string]any{"round": 2, "turn": 0}})
	tr.write("DELETE", "/delete", map[string]any{"uuid": "Combat." + combatID})

	hooks := allHooks.expect("updateActor", "updateActor", "createItem", "updateItem", "deleteItem",
		"createActiveEffect", "deleteActiveEffect", "updateToken", "createToken", "deleteToken",
		"updateScene", "createScene", "updateScene", "createCombat", "createCombatant",
		"updateCombat", "combatStart", "updateCombat", "combatTurn", "updateCombat", "combatRound", "deleteCombat")
	var last uint64
	for _, f := range hooks {
		id, err := strconv.ParseUint(f.id, 10, 64)
		if err != nil || id <= last {
			t.Fatalf("event ids must increase: %q after %d", f.id, last)
		}
		last = id
		if f.json(t)["uuid"] == nil {
			t.Fatalf("%s payload without uuid: %s", f.event, f.data)
		}
	}
	if got := hooks[1].json(t); got["uuid"] != relaytest.AriaUUID || got["changes"].(map[string]any)["system"] == nil {
		t.Fatalf("updateActor payload %v", got)
	}
	if got := hooks[2].json(t)["data"].(map[string]any); got["name"] != "Gem" || got["uuid"] != item {
		t.Fatalf("createItem data %v", got)
	}
	someHooks.expect("createItem", "deleteItem")
	actorEvents := allActors.expect("actor-update", "actor-update", "actor-item-add", "actor-item-update", "actor-item-remove", "actor-effect-add", "actor-effect-remove")
	if got := actorEvents[3].json(t); got["actorUuid"] != relaytest.AriaUUID || got["itemName"] != "Ruby" || got["changes"].(map[string]any)["name"] != "Ruby" {
		t.Fatalf("actor-item-update payload %v", got)
	}
	aria.expect("actor-update", "actor-item-add", "actor-item-update", "actor-item-remove", "actor-effect-add", "actor-effect-remove")
	tavern.expect("scene-token-update", "scene-token-create", "scene-token-delete", "scene-update")
	anyScene.expect("scene-token-update", "scene-token-create", "scene-token-delete", "scene-update", "scene-activate", "scene-update")
	fights := combat.expect("combat-combatant-add", "combat-start", "combat-turn", "combat-round", "combat-end")
	start := fights[1].json(t)
	if start["encounterId"] != combatID || start["round"] != 1.0 || start["started"] != true {
		t.Fatalf("combat-start payload %v", start)
	}
	if list := start["combatants"].([]any); len(list) != 1 || list[0].(map[string]any)["actorUuid"] != relaytest.BromUUID ||
		list[0].(map[string]any)["tokenUuid"] != "Scene.tavernScene00001.Token.bromToken0000001" {
		t.Fatalf("combatants %v", list)
	}
	for _, c := range streams {
		c.quiet(200 * time.Millisecond)
	}
}

func TestEventsFollowTheSubscribersPermissions(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	aliceKey, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "alice", Scopes: []string{"events:subscribe"}, ScopedUserId: "Alice"})
	bobKey, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "bob", Scopes: []string{"events:subscribe"}})
	alice := tr.openStream("/actor/subscribe", aliceKey, nil, nil)
	bob := tr.openStream("/hooks/subscribe", bobKey, relaytest.Q("userId", "Bob", "hooks", "createItem,updateActor"), nil)
	aliceCombat := tr.openStream("/encounters/subscribe", aliceKey, nil, nil)
	alice.expect("connected")
	bob.expect("connected")
	aliceCombat.expect("connected")

	tr.setHP(relaytest.GoblinUUID, 2)                                                                                  // NONE for both
	tr.setHP(relaytest.GuardUUID, 3)                                                                                   // LIMITED: no limited field changed
	tr.write("PUT", "/update", map[string]any{"uuid": relaytest.GuardUUID, "data": map[string]any{"name": "Captain"}}) // LIMITED: the name
	tr.write("POST", "/create", map[string]any{"entityType": "Item", "parentUuid": relaytest.AriaUUID, "data": map[string]any{"name": "Secret map", "type": "loot", "system": map[string]any{"description": map[string]any{"value": "X marks the spot"}}}})
	tr.setHP(relaytest.AriaUUID, 7) // Alice owns Aria; Bob is LIMITED on her
	combat := tr.write("POST", "/create", map[string]any{"entityType": "Combat", "data": map[string]any{"round": 1, "turn": 0, "started": false}})["uuid"].(string)
	tr.write("POST", "/create", map[string]any{"entityType": "Combatant", "parentUuid": combat, "data": map[string]any{"name": "Lurker", "actorId": "goblin0000000001", "hidden": true}})
	tr.write("POST", "/create", map[string]any{"entityType": "Combatant", "parentUuid": combat, "data": map[string]any{"name": "Brom", "actorId": "bromIronfist0001"}})
	tr.write("PUT", "/update", map[string]any{"uuid": combat, "data": map[string]any{"started": true}})

	got := alice.expect("actor-update", "actor-item-add", "actor-update")
	if d := got[0].json(t); d["actorUuid"] != relaytest.GuardUUID || len(d["changes"].(map[string]any)) != 1 || d["changes"].(map[string]any)["name"] != "Captain" {
		t.Fatalf("LIMITED actor-update for Alice: %v", d)
	}
	if d := got[1].json(t)["item"].(map[string]any); d["system"] == nil {
		t.Fatalf("Alice owns Aria and gets the whole item: %v", d)
	}
	if d := got[2].json(t); d["actorUuid"] != relaytest.AriaUUID {
		t.Fatalf("Alice's own actor: %v", d)
	}
	alice.quiet(200 * time.Millisecond)

	got = bob.expect("updateActor", "createItem")
	if d := got[0].json(t); d["uuid"] != relaytest.GuardUUID || len(d["changes"].(map[string]any)) != 1 {
		t.Fatalf("Bob's LIMITED updateActor: %v", d)
	}
	item := got[1].json(t)["data"].(map[string]any)
	if len(item) != 4 || item["name"] != "Secret map" || item["type"] != "Item" || item["system"] != nil {
		t.Fatalf("Bob is LIMITED on Aria and gets only the limited fields of her item: %v", item)
	}
	bob.quiet(200 * time.Millisecond)

	fight := aliceCombat.expect("combat-combatant-add", "combat-start")
	if d := fight[0].json(t)["combatant"].(map[string]any); d["name"] != "Brom" {
		t.Fatalf("Alice must not learn of the hidden combatant: %v", d)
	}
	if list := fight[1].json(t)["combatants"].([]any); len(list) != 1 {
		t.Fatalf("combatants shown to Alice: %v", list)
	}
	aliceCombat.quiet(200 * time.Millisecond)
}

func TestEventStreamRefusals(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.MaxStreamsPerKey = 2; c.MaxStreamsPerWorld = 3 })
	elsewhere, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "elsewhere", Scopes: []string{"events:subscribe"}, ClientIds: []string{"elsewhere"}})
	resp, cancel := tr.startStream("/actor/subscribe", elsewhere, relaytest.Q("clientId", "demo"), nil)
	cancel()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a key bound to another world: status %d, want 403", resp.StatusCode)
	}

	first, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "one", Scopes: []string{"events:subscribe"}})
	second, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "two", Scopes: []string{"events:subscribe"}})
	a := tr.openStream("/hooks/subscribe", first, nil, nil)
	tr.openStream("/hooks/subscribe", first, nil, nil)
	over := tr.Do("GET", "/scene/subscribe", first, nil, nil)
	if over.Status != http.StatusTooManyRequests || over.ErrorText(t) != "Too many event streams for this API key: at most 2 may be open at once" {
		t.Fatalf("third stream of a key: %d %s", over.Status, over.Body)
	}
	tr.openStream("/hooks/subscribe", second, nil, nil)
	over = tr.Do("GET", "/hooks/subscribe", second, nil, nil)
	if over.Status != http.StatusTooManyRequests || over.ErrorText(t) != "Too many event streams on world 'demo': at most 3 may be open at once" {
		t.Fatalf("fourth stream of the world: %d %s", over.Status, over.Body)
	}
	// Closing a stream gives its place back.
	a.close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, cancel := tr.startStream("/hooks/subscribe", second, nil, nil)
		cancel()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closed stream's place was not released: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEventResumeWhileWritesContinue(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	const writes = 60
	first := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	first.expect("connected")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= writes; i++ {
			tr.setHP(relaytest.AriaUUID, i)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	hp := func(f sseFrame) int {
		v := f.json(t)["changes"].(map[string]any)["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]
		return int(v.(float64))
	}
	var seen []int
	var lastID string
	for range 10 {
		f := first.expect("actor-update")[0]
		seen = append(seen, hp(f))
		lastID = f.id
	}
	first.close() // the caller goes away while writes go on
	time.Sleep(30 * time.Millisecond)
	second := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("actorUuid", relaytest.AriaUUID), http.Header{"Last-Event-Id": {lastID}})
	second.expect("connected")
	for len(seen) < writes {
		seen = append(seen, hp(second.expect("actor-update")[0]))
	}
	<-done
	for i, v := range seen {
		if v != i+1 {
			t.Fatalf("after resuming, hp values %v: want 1..%d, each once, in order", seen, writes)
		}
	}
	second.quiet(200 * time.Millisecond)

	// An id older than the window, or from the future, is a reset.
	third := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("lastEventId", "999999"), nil)
	third.expect("connected")
	if d := third.expect("reset")[0].json(t); d["lastEventId"] != "999999" {
		t.Fatalf("reset payload %v", d)
	}
	tr.setHP(relaytest.AriaUUID, 1)
	third.expect("actor-update")
}

func TestEventSequencesSurviveARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tr := startTestRelay(t, func(c *node.Config) { c.DataDir = dir })
	s := tr.openStream("/actor/subscribe", tr.AdminKey, nil, nil)
	s.expect("connected")
	tr.setHP(relaytest.AriaUUID, 3)
	before, _ := strconv.ParseUint(s.expect("actor-update")[0].id, 10, 64)
	s.close()
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	again := startTestRelay(t, func(c *node.Config) { c.DataDir = dir })
	key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	again.AdminKey = strings.TrimSpace(string(key))
	resumed := again.openStream("/actor/subscribe", again.AdminKey, relaytest.Q("lastEventId", strconv.FormatUint(before-1, 10)), nil)
	resumed.expect("connected")
	if f := resumed.expect("actor-update")[0]; f.id != strconv.FormatUint(before, 10) {
		t.Fatalf("replayed id %s after a restart, want %d", f.id, before)
	}
	again.setHP(relaytest.AriaUUID, 4)
	if after, _ := strconv.ParseUint(resumed.expect("actor-update")[0].id, 10, 64); after <= before {
		t.Fatalf("sequence %d after a restart, not above %d", after, before)
	}
}

func TestEventOverflow(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.EventQueueSize = 4; c.MaxBodyBytes = 1 << 20 })
	resp, cancel := tr.startStream("/hooks/subscribe", tr.AdminKey, relaytest.Q("hooks", "updateActor"), nil)
	defer cancel()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The subscriber reads nothing while large events pile up: the socket
	// buffers fill, then the gRPC window, then its queue.
	blob := strings.Repeat("x", 256<<10)
	for i := range 60 {
		tr.write("PUT", "/update", map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"flags.test.blob": fmt.Sprint(i, blob)}})
	}
	c := &sseClient{t: t, resp: resp, cancel: cancel, frames: make(chan sseFrame, 10000)}
	go c.read()
	frames, ended := c.ended(10 * time.Second)
	if !ended {
		t.Fatal("an overflowed stream must end")
	}
	if len(frames) < 2 || frames[len(frames)-1].event != "overflow" {
		t.Fatalf("the last event is %v, want overflow", names(frames))
	}
	d := frames[len(frames)-1].json(t)
	lastID := frames[len(frames)-2].id
	if d["lastEventId"] != lastID {
		t.Fatalf("overflow says resume from %v, the last event was %s", d["lastEventId"], lastID)
	}
	t.Logf("%d events before the overflow", len(frames)-2)
	if len(frames) >= 60 {
		t.Fatalf("the stream delivered %d events: it never overflowed", len(frames))
	}
}

func TestEventKeepalivesAndRelease(t *testing.T) {
	tr := startTestRelay(t, func(c *node.Config) { c.EventKeepalive = 40 * time.Millisecond })
	s := tr.openStream("/scene/subscribe", tr.AdminKey, nil, nil)
	s.expect("connected")
	keepalives := 0
	timeout := time.After(2 * time.Second)
	for keepalives < 3 {
		select {
		case f := <-s.frames:
			if f.comment == "keepalive" {
				keepalives++
			} else {
				t.Fatalf("unexpected frame %+v", f)
			}
		case <-timeout:
			t.Fatalf("%d keepalives in 2s at a 40ms interval", keepalives)
		}
	}
	s.close()

	// Goroutines of open streams are released when their callers go away.
	settle := func() int {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	base := settle()
	var streams []*sseClient
	for range 20 {
		c := tr.openStream("/hooks/subscribe", tr.AdminKey, nil, nil)
		c.expect("connected")
		streams = append(streams, c)
	}
	if open := runtime.NumGoroutine(); open < base+20 {
		t.Fatalf("%d goroutines with 20 streams open, %d before", open, base)
	}
	for _, c := range streams {
		c.close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for n := settle(); n > base+2; n = settle() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after closing 20 streams, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
	}
}

func TestStreamTickets(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	key, keyID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "page", Scopes: []string{"events:subscribe"}, ScopedUserId: "Alice"})
	noEvents, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "reader", Scopes: []string{"entity:read"}})
	if r := tr.Do("POST", "/stream-tickets", noEvents, nil, map[string]any{}); r.Status != http.StatusForbidden {
		t.Fatalf("ticket for a key without events:subscribe: %d %s", r.Status, r.Body)
	}
	issue := func() string {
		r := tr.Do("POST", "/stream-tickets", key, nil, map[string]any{})
		d := r.Data(t)
		if r.Status != http.StatusOK || d["expiresIn"] != 60.0 || !strings.HasPrefix(d["ticket"].(string), "st_") {
			t.Fatalf("ticket: %d %s", r.Status, r.Body)
		}
		return d["ticket"].(string)
	}
	ticket := issue()
	s := tr.openStream("/actor/subscribe", "", relaytest.Q("ticket", ticket), nil)
	s.expect("connected")
	tr.setHP(relaytest.GoblinUUID, 1) // the ticket acts as the key's user: Alice sees nothing of the goblin
	tr.setHP(relaytest.AriaUUID, 2)
	first := s.expect("actor-update")[0]
	if d := first.json(t); d["actorUuid"] != relaytest.AriaUUID {
		t.Fatalf("ticket stream got %v", d)
	}
	// The first stream binds the ticket: any other stream is refused, over
	// SSE and over gRPC alike.
	const otherStream = "This stream ticket belongs to another stream: a ticket reopens only the stream it was first used for (the same endpoint, world, user and filters); get a new ticket for this one"
	for _, other := range []struct {
		path  string
		query url.Values
	}{
		{"/actor/subscribe", relaytest.Q("ticket", ticket, "actorUuid", relaytest.AriaUUID)},
		{"/encounters/subscribe", relaytest.Q("ticket", ticket)},
		{"/hooks/subscribe", relaytest.Q("ticket", ticket)},
		{"/scene/subscribe", relaytest.Q("ticket", ticket)},
	} {
		if r := tr.Do("GET", other.path, "", other.query, nil); r.Status != http.StatusUnauthorized || r.ErrorText(t) != otherStream {
			t.Fatalf("the ticket on %s?%s: %d %s", other.path, other.query.Encode(), r.Status, r.Body)
		}
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-stream-ticket", ticket))
	defer cancel()
	if st, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeActors(ctx, &relayv1.SubscribeActorsRequest{ActorUuid: relaytest.AriaUUID}); err == nil {
		if _, err = st.Recv(); status.Convert(err).Message() != otherStream {
			t.Fatalf("the ticket on another stream over gRPC: %v", err)
		}
	}
	// The same stream reconnects with it and resumes after its last event,
	// even while the server still holds the first one open.
	tr.setHP(relaytest.AriaUUID, 3)
	again := tr.openStream("/actor/subscribe", "", relaytest.Q("ticket", ticket), http.Header{"Last-Event-Id": {first.id}})
	again.expect("connected")
	if d := again.expect("actor-update")[0].json(t); d["changes"].(map[string]any)["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"] != 3.0 {
		t.Fatalf("the reconnected stream resumed with %v", d)
	}
	s.close()
	again.close()
	// Closed, the stream can still reopen for a while...
	tr.openStream("/actor/subscribe", "", relaytest.Q("ticket", ticket, "lastEventId", first.id), nil).expect("connected", "actor-update")
	// ...but never once its key is revoked.
	if r := tr.Do("DELETE", "/keys/"+keyID, tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	if r := tr.Do("GET", "/actor/subscribe", "", relaytest.Q("ticket", ticket), nil); r.Status != http.StatusUnauthorized || r.ErrorText(t) != "API key has been revoked" {
		t.Fatalf("the ticket of a revoked key: %d %s", r.Status, r.Body)
	}
	other, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "other", Scopes: []string{"events:subscribe", "entity:read"}})
	if r := tr.Do("POST", "/stream-tickets", other, nil, map[string]any{}); r.Status == http.StatusOK {
		if r := tr.Do("GET", "/get", "", relaytest.Q("ticket", r.Data(t)["ticket"].(string), "uuid", relaytest.AriaUUID), nil); r.Status != http.StatusUnauthorized || r.ErrorText(t) != "API key is required" {
			t.Fatalf("a ticket outside the event streams: %d %s", r.Status, r.Body)
		}
	} else {
		t.Fatalf("ticket: %d %s", r.Status, r.Body)
	}
}

func TestEventCoalescedFramesStayWellFormedAndOrdered(t *testing.T) {
	t.Parallel()
	// A long window: the quick writes below reach each stream in a few
	// batches of many frames, written together.
	tr := startTestRelay(t, func(c *node.Config) { c.EventCoalesce = 50 * time.Millisecond })
	actors := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	hooks := tr.openStream("/hooks/subscribe", tr.AdminKey, relaytest.Q("hooks", "updateActor"), nil)
	actors.expect("connected")
	hooks.expect("connected")
	const writes = 30
	for i := 1; i <= writes; i++ {
		tr.setHP(relaytest.AriaUUID, i)
	}
	hp := func(f sseFrame) int {
		v := f.json(t)["changes"].(map[string]any)["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]
		return int(v.(float64))
	}
	for _, s := range []struct {
		c    *sseClient
		name string
	}{{actors, "actor-update"}, {hooks, "updateActor"}} {
		var last uint64
		for i := 1; i <= writes; i++ {
			f := s.c.expect(s.name)[0]
			id, err := strconv.ParseUint(f.id, 10, 64)
			if err != nil || id <= last {
				t.Fatalf("%s %d: id %q after %d", s.name, i, f.id, last)
			}
			if got := hp(f); got != i {
				t.Fatalf("%s %d carries hp %d: frames out of order or merged", s.name, i, got)
			}
			last = id
		}
		s.c.quiet(150 * time.Millisecond)
	}
}

func TestEventStreamOverGRPC(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	// A gRPC caller on the relay's port gets the stream's events as gRPC
	// messages, with the request id in the header.
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey))
	defer cancel()
	stream, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeActors(ctx, &relayv1.SubscribeActorsRequest{ActorUuid: relaytest.AriaUUID})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := stream.Recv(); err != nil || first.GetEvent().GetName() != "connected" {
		t.Fatalf("first message %v, %v", first, err)
	}
	if header, err := stream.Header(); err != nil || !strings.HasPrefix(firstOf(header.Get("x-request-id")), "actor-subscribe_") {
		t.Fatalf("header %v, %v: want the stream's request id", header, err)
	}
	tr.setHP(relaytest.AriaUUID, 7)
	ev, err := stream.Recv()
	if err != nil || ev.GetEvent().GetName() != "actor-update" || ev.GetEvent().GetSequence() == 0 {
		t.Fatalf("event %v, %v", ev, err)
	}
}

// firstOf returns the first of values, or "".
func firstOf(values []string) string {
	if len(values) == 0 {
		return ""
	}
	return values[0]
}
