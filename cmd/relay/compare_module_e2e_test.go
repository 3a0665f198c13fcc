package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/demo"
)

// compareWorlds runs each call against the embedded demo world and against
// the linked copy, in order, and requires the embedded world's status to
// be the one the call names and both answers to be the same (the ignored
// keys aside).
func compareWorlds(t *testing.T, tr *testRelay, linked string, calls []comparison) {
	t.Helper()
	for _, c := range calls {
		var answers [2]any
		var statuses [2]int
		for i, clientID := range []string{demo.ClientID, linked} {
			query := url.Values{}
			for k, v := range c.query {
				query[k] = v
			}
			query.Set("clientId", clientID)
			var body any
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

// TestLinkedAnswersAsModuleDoes covers the calls where the module's own
// answers differ from the embedded world's (its selection filter, its
// documents without uuids, its handling of missing documents): through the
// relay, a linked world answers them as the embedded one does.
func TestLinkedAnswersAsModuleDoes(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	const missing = "Actor.missing000000001"
	compareWorlds(t, tr, linked, []comparison{
		{name: "select two tokens", status: 200, method: "POST", path: "/select", body: map[string]any{"uuids": []string{ariaTokenUUID, bromTokenUUID}, "overwrite": true}},
		{name: "the selection is those two", status: 200, method: "GET", path: "/selected"},
		{name: "select by a name that matches nothing", status: 404, method: "POST", path: "/select", body: map[string]any{"name": "Nobody At All", "overwrite": true}},
		{name: "select by name", status: 200, method: "POST", path: "/select", body: map[string]any{"name": "aria vale", "overwrite": true}},
		{name: "the selection is that one", status: 200, method: "GET", path: "/selected"},
		{name: "get carries the uuid", status: 200, method: "GET", path: "/get", query: relaytest.Q("uuid", relaytest.BromUUID)},
		{name: "update carries the uuid", status: 200, method: "PUT", path: "/update", query: relaytest.Q("uuid", relaytest.BromUUID), body: map[string]any{"data": map[string]any{"name": "Brom the Bold"}}, ignore: []string{"_stats"}},
		{name: "delete a missing document", status: 404, method: "DELETE", path: "/delete", query: relaytest.Q("uuid", missing)},
		{name: "delete a missing document as a player", status: 404, method: "DELETE", path: "/delete", query: relaytest.Q("uuid", missing, "userId", "Alice")},
		{name: "update a missing document", status: 404, method: "PUT", path: "/update", query: relaytest.Q("uuid", missing), body: map[string]any{"data": map[string]any{"name": "x"}}},
		{name: "update a missing document as a player", status: 404, method: "PUT", path: "/update", query: relaytest.Q("uuid", missing, "userId", "Alice"), body: map[string]any{"data": map[string]any{"name": "x"}}},
		{name: "delete refused to a player", status: 403, method: "DELETE", path: "/delete", query: relaytest.Q("uuid", relaytest.GoblinUUID, "userId", "Alice")},
	})
	// A created document carries its own uuid on both worlds.
	for _, clientID := range []string{demo.ClientID, linked} {
		resp := tr.Do("POST", "/create", tr.AdminKey, relaytest.Q("clientId", clientID), map[string]any{"entityType": "Actor", "data": map[string]any{"name": "Bandit", "type": "npc"}})
		if resp.Status != http.StatusOK {
			t.Fatalf("%s: create: %d %s", clientID, resp.Status, resp.Body)
		}
		data := resp.Data(t)
		doc, _ := data["document"].(map[string]any)
		id, _ := doc["_id"].(string)
		if id == "" || data["uuid"] != "Actor."+id || doc["uuid"] != "Actor."+id {
			t.Errorf("%s: create: uuid %v, the document's %v, id %q", clientID, data["uuid"], doc["uuid"], id)
		}
		got := tr.Do("GET", "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor."+id), nil)
		if got.Status != http.StatusOK {
			t.Errorf("%s: get the created document: %d %s", clientID, got.Status, got.Body)
		}
	}
}

// TestLinkedStructureAsEmbedded: /structure answers the specification's
// shape on a linked world as on the embedded one, whatever the request
// names (the module itself lists nothing without types, answers in a
// shape of its own, and needs the types for a folder path).
func TestLinkedStructureAsEmbedded(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	compareWorlds(t, tr, linked, []comparison{
		{name: "a sub-folder", status: 200, method: "POST", path: "/create-folder", body: map[string]any{"name": "Villains", "folderType": "Actor", "parentFolderId": "monstersFolder01", "folderId": "villainsFolder01"}},
		{name: "a sub-sub-folder", status: 200, method: "POST", path: "/create-folder", body: map[string]any{"name": "Lieutenants", "folderType": "Actor", "parentFolderId": "villainsFolder01", "folderId": "lieutenants00001"}},
		{name: "without types", status: 200, method: "GET", path: "/structure"},
		{name: "without types in the module's shape", status: 200, method: "GET", path: "/structure", query: relaytest.Q("shape", "module")},
		{name: "recursive", status: 200, method: "GET", path: "/structure", query: relaytest.Q("recursive", "true")},
		{name: "recursive two levels", status: 200, method: "GET", path: "/structure", query: relaytest.Q("recursive", "true", "recursiveDepth", "2", "types", `["Actor"]`)},
		{name: "a folder", status: 200, method: "GET", path: "/structure", query: relaytest.Q("path", "Folder.monstersFolder01", "recursive", "true")},
		{name: "a folder in the module's shape", status: 200, method: "GET", path: "/structure", query: relaytest.Q("path", "Folder.heroesFolder0001", "shape", "module")},
		{name: "a missing folder", status: 404, method: "GET", path: "/structure", query: relaytest.Q("path", "Folder.missingFolder001")},
		{name: "with the documents' data", status: 200, method: "GET", path: "/structure", query: relaytest.Q("includeEntityData", "true", "types", `["Item"]`), ignore: []string{"_stats"}},
		{name: "as a player", status: 200, method: "GET", path: "/structure", query: relaytest.Q("userId", "Alice", "recursive", "true")},
	})
}

// TestLinkedEncountersAsEmbedded: encounter moves answer the encounter
// with its combatants (the module names it without them), and a move
// without an encounter is 404, on a linked world as on the embedded one.
func TestLinkedEncountersAsEmbedded(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	ids := []string{"id", "encounterId"}
	compareWorlds(t, tr, linked, []comparison{
		{name: "next turn without an encounter", status: 404, method: "POST", path: "/next-turn"},
		{name: "start", status: 200, method: "POST", path: "/start-encounter", body: map[string]any{"name": "Brawl", "tokenUuids": []string{ariaTokenUUID, bromTokenUUID, goblinTokenUUID}}, ignore: ids},
		{name: "next turn", status: 200, method: "POST", path: "/next-turn", ignore: ids},
		{name: "next round", status: 200, method: "POST", path: "/next-round", ignore: ids},
		{name: "previous turn", status: 200, method: "POST", path: "/previous-turn", ignore: ids},
		{name: "next turn as a player", status: 403, method: "POST", path: "/next-turn", query: relaytest.Q("userId", "Alice")},
		{name: "end", status: 200, method: "POST", path: "/end-encounter", ignore: ids},
		{name: "previous round without an encounter", status: 404, method: "POST", path: "/previous-round"},
	})
}

// TestLinkedLateRepliesInMetrics: a reply of a linked world that matches
// no waiting request is counted in /metrics.
func TestLinkedLateRepliesInMetrics(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.MetricsListen = "127.0.0.1:0" })
	tt := tr.linkedTabletop()
	if err := tt.Send([]byte(`{"type":"entity-result","requestId":"entity_never-sent","data":null}`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, ok := scrape(t, tr.MetricsAddr())["relay_linked_late_replies_total"]
		if ok && v == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay_linked_late_replies_total = %v (present %v), want 1", v, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
