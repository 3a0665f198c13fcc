package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/dice"
	"github.com/tabletop-relay/relay/world/embedded"
)

// linkDemoCopy links to r a simulated tabletop that answers from its own
// copy of the demo world (an embedded engine in another data directory)
// and returns the linked world's clientId.
func linkDemoCopy(tb testing.TB, r *node.Node) string {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	host, err := world.OpenHost(dir, world.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { host.Close() })
	seed, err := demo.Seed()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := host.Create(ctx, demo.ClientID, seed); err != nil {
		tb.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "worlds", demo.ClientID, "files"), demo.Files()); err != nil {
		tb.Fatal(err)
	}
	// The copy rolls from the test relay's seed (relaytest.DiceSeed), so
	// that the same calls in the same order roll the same dice on both
	// sides.
	w, err := embedded.NewRegistry(host, embedded.Options{DataDir: dir, Dice: dice.NewSeeded(relaytest.DiceSeed)}).World(ctx, demo.ClientID)
	if err != nil {
		tb.Fatal(err)
	}
	players, err := linktest.Players(ctx, w)
	if err != nil {
		tb.Fatal(err)
	}
	code, _, err := r.Links().CreatePairingCode(ctx, "", "test")
	if err != nil {
		tb.Fatal(err)
	}
	tt := linktest.New(linktest.Config{RelayURL: "http://" + r.Addr(), WorldID: "demo-copy", WorldTitle: w.Info().Title,
		FoundryVersion: "13.345", SystemID: "dnd5e", SystemVersion: "5.0.4", ServerFingerprint: "fp-demo-copy",
		Players: players, Handler: linktest.WorldHandler(w)})
	if _, err := tt.Pair(ctx, code); err != nil {
		tb.Fatal(err)
	}
	if err := tt.Connect(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tt.Drop)
	clientID, _ := tt.Credentials()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if info, _ := r.Links().Hub().Info(clientID); len(info.Players) == len(players) {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatal("timed out waiting for the player list")
		}
	}
	return clientID
}

// comparison is one call of the comparison suite.
type comparison struct {
	name         string
	status       int // the embedded world's status
	method, path string
	query        url.Values
	body         map[string]any
	// ignore are keys left out of the comparison wherever they occur
	// (ids and times the two worlds make up each on their own).
	ignore []string
}

// TestLinkedMatchesEmbedded runs the same calls against the embedded demo
// world and against a copy of it linked through the simulator, and
// requires the same status and body, ids and times aside: the answers of a
// linked world cannot be told from an embedded one's.
func TestLinkedMatchesEmbedded(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	actor := map[string]any{"name": "Bandit", "type": "npc"}
	calls := []comparison{
		{status: 200, name: "get as GM", method: "GET", path: "/get", query: relaytest.Q("uuid", relaytest.AriaUUID)},
		{status: 200, name: "get as a player", method: "GET", path: "/get", query: relaytest.Q("uuid", relaytest.AriaUUID, "userId", "Alice")},
		{status: 403, name: "get limited", method: "GET", path: "/get", query: relaytest.Q("uuid", relaytest.GoblinUUID, "userId", "Alice")},
		{status: 404, name: "get missing", method: "GET", path: "/get", query: relaytest.Q("uuid", "Actor.missing000000001")},
		{status: 200, name: "update", method: "PUT", path: "/update", query: relaytest.Q("uuid", relaytest.AriaUUID), body: map[string]any{"data": map[string]any{"system.attributes.hp.value": 20}}, ignore: []string{"_stats"}},
		{status: 403, name: "update refused", method: "PUT", path: "/update", query: relaytest.Q("uuid", relaytest.GoblinUUID, "userId", "Alice"), body: map[string]any{"data": map[string]any{"name": "x"}}},
		{status: 200, name: "structure", method: "GET", path: "/structure", query: relaytest.Q("types", `["Actor"]`)},
		{status: 200, name: "structure in the module's shape", method: "GET", path: "/structure", query: relaytest.Q("types", `["Actor"]`, "shape", "module")},
		{status: 200, name: "create", method: "POST", path: "/create", body: map[string]any{"entityType": "Actor", "data": actor}, ignore: []string{"_id", "uuid", "_stats"}},
		{status: 200, name: "search", method: "GET", path: "/search", query: relaytest.Q("query", "ar")},
		{status: 200, name: "search as a player", method: "GET", path: "/search", query: relaytest.Q("query", "o", "userId", "Alice")},
		{status: 200, name: "increase", method: "POST", path: "/increase", query: relaytest.Q("uuid", relaytest.BromUUID), body: map[string]any{"attribute": "system.attributes.hp.value", "amount": 2}},
		{status: 200, name: "give", method: "POST", path: "/give", query: relaytest.Q("userId", "Gamemaster"), body: map[string]any{"fromUuid": relaytest.BromUUID, "toUuid": relaytest.AriaUUID, "itemName": "Longsword"}, ignore: []string{"newItemUuid", "newItemId"}},
		{status: 200, name: "delete", method: "DELETE", path: "/delete", query: relaytest.Q("uuid", relaytest.MaraUUID)},
		{status: 200, name: "encounters", method: "GET", path: "/encounters"},
		{status: 200, name: "start encounter", method: "POST", path: "/start-encounter", body: map[string]any{"name": "Brawl", "tokenUuids": []string{ariaTokenUUID, bromTokenUUID}}, ignore: []string{"id", "encounterId"}},
		{status: 200, name: "next turn", method: "POST", path: "/next-turn", ignore: []string{"id", "encounterId"}},
		{status: 403, name: "start encounter as a player", method: "POST", path: "/start-encounter", query: relaytest.Q("userId", "Alice"), body: map[string]any{"name": "Brawl"}},
		{status: 200, name: "file listing", method: "GET", path: "/file-system", query: relaytest.Q("path", "maps"), ignore: []string{"size", "modified"}},
	}
	for _, c := range calls {
		var answers [2]any
		var statuses [2]int
		for i, clientID := range []string{demo.ClientID, linked} {
			query := url.Values{}
			for k, v := range c.query {
				query[k] = v
			}
			query.Set("clientId", clientID)
			var body any // a nil map would be sent as a JSON null
			if c.body != nil {
				body = c.body
			}
			r := tr.Do(c.method, c.path, tr.AdminKey, query, body)
			statuses[i] = r.Status
			var v any
			if err := json.Unmarshal(r.Body, &v); err != nil {
				t.Fatalf("%s: %s", c.name, r.Body)
			}
			answers[i] = normalise(v, append(c.ignore, "requestId"))
		}
		if statuses[0] != c.status {
			t.Errorf("%s: embedded %d, want %d", c.name, statuses[0], c.status)
		}
		if statuses[0] != statuses[1] || !reflect.DeepEqual(answers[0], answers[1]) {
			e, _ := json.Marshal(answers[0])
			l, _ := json.Marshal(answers[1])
			t.Errorf("%s: embedded %d %s\n linked %d %s", c.name, statuses[0], e, statuses[1], l)
		}
	}
}

// normalise drops the ignored keys from v, at every depth.
func normalise(v any, ignore []string) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			skip := false
			for _, i := range ignore {
				skip = skip || k == i
			}
			if !skip {
				out[k] = normalise(x, ignore)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalise(x, ignore)
		}
		return out
	}
	return v
}

// BenchmarkLinkedGet measures GET /get of an actor as a player on the
// embedded demo world and on a copy of it linked through the simulator
// (over a loopback WebSocket, answered by an embedded engine), one request
// at a time, so that the difference is the latency a link adds. The third
// world is linked through a simulator that answers with a reply prepared
// once (the same document), so that it measures the relay and the
// WebSocket round trip without the module's own work.
func BenchmarkLinkedGet(b *testing.B) {
	r, key := benchRelay(b)
	linked := linkDemoCopy(b, r)
	canned := linkCanned(b, r)
	c := benchClient()
	for _, w := range []struct{ name, clientID string }{{"embedded", demo.ClientID}, {"linked", linked}, {"linked-canned", canned}} {
		b.Run(w.name, func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+r.Addr()+"/get?uuid="+relaytest.AriaUUID+"&userId=Alice&clientId="+w.clientID, nil)
			req.Header.Set("x-api-key", key)
			for b.Loop() {
				doBench(b, c, req, nil)
			}
		})
	}
}

// linkCanned links to r a simulated tabletop that answers every `entity`
// request with the demo world's wizard, encoded once as the module sends
// it (source data without a uuid), and returns its clientId.
func linkCanned(b *testing.B, r *node.Node) string {
	b.Helper()
	ctx := context.Background()
	host, err := world.OpenHost(b.TempDir(), world.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { host.Close() })
	seed, err := demo.Seed()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := host.Create(ctx, demo.ClientID, seed); err != nil {
		b.Fatal(err)
	}
	w, err := embedded.NewRegistry(host, embedded.Options{}).World(ctx, demo.ClientID)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := w.(world.Documents).GetJSON(ctx, nil, relaytest.AriaUUID)
	if err != nil {
		b.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		b.Fatal(err)
	}
	delete(doc, "uuid")
	answer, _ := json.Marshal(map[string]any{"data": doc})
	players, err := linktest.Players(ctx, w)
	if err != nil {
		b.Fatal(err)
	}
	code, _, err := r.Links().CreatePairingCode(ctx, "", "test")
	if err != nil {
		b.Fatal(err)
	}
	tt := linktest.New(linktest.Config{RelayURL: "http://" + r.Addr(), WorldID: "demo-canned", WorldTitle: "Canned",
		FoundryVersion: "13.345", SystemID: "dnd5e", SystemVersion: "5.0.4", ServerFingerprint: "fp-demo-canned",
		Players: players, Handler: linktest.ByType(map[string]linktest.Handler{
			"entity": func(context.Context, linktest.Request) (any, bool) { return linktest.RawReply(answer), true },
		})})
	if _, err := tt.Pair(ctx, code); err != nil {
		b.Fatal(err)
	}
	if err := tt.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tt.Drop)
	clientID, _ := tt.Credentials()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if info, _ := r.Links().Hub().Info(clientID); len(info.Players) == len(players) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("timed out waiting for the player list")
		}
	}
	return clientID
}
