package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world/demo"
)

// isolationRequest is one request of the isolation test and what came back.
type isolationRequest struct {
	world, op          string
	method, path, body string
	key                string
	status             int
	headerID           string
	respBody           []byte
	err                error
}

// TestIsolationTwoWorldsConcurrent sends many requests of the same kind to
// two worlds at the same moment, each world through a key bound to it, and
// checks that no answer carries the other world's data, that every write
// landed in its own world only, and that every request id is unique.
func TestIsolationTwoWorldsConcurrent(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	ctx := context.Background()
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Worlds().Create(ctx, otherWorld, seed); err != nil {
		t.Fatal(err)
	}
	// Both worlds come from the same seed: mark Aria in each so that an
	// answer tells which world it came from.
	marker := map[string]string{demo.ClientID: "Aria of the demo world", otherWorld: "Aria of the other world"}
	worldKeys := map[string]string{}
	for clientID, name := range marker {
		resp := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("clientId", clientID), map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"name": name}})
		if resp.Status != http.StatusOK {
			t.Fatalf("mark %s: %d %s", clientID, resp.Status, resp.Body)
		}
		plain, _, err := tr.Keys().Create(ctx, keys.Spec{Name: clientID, Scopes: keys.AllScopes, ClientIDs: []string{clientID}})
		if err != nil {
			t.Fatal(err)
		}
		worldKeys[clientID] = plain
	}

	const perKind = 40 // per world and kind of request
	var reqs []*isolationRequest
	for _, clientID := range []string{demo.ClientID, otherWorld} {
		for i := range perKind {
			// The key alone selects the world (it is bound to one), except
			// every other request, which also names it.
			query := ""
			if i%2 == 0 {
				query = "clientId=" + clientID + "&"
			}
			reqs = append(reqs,
				&isolationRequest{world: clientID, op: "get", method: http.MethodGet, path: "/get?" + query + "uuid=" + relaytest.AriaUUID},
				&isolationRequest{world: clientID, op: "search", method: http.MethodGet, path: "/search?" + query + "query=Aria"},
				&isolationRequest{world: clientID, op: "update", method: http.MethodPut, path: "/update?" + query,
					body: fmt.Sprintf(`{"uuid":%q,"data":{"flags.isolation.%s%d":%q}}`, relaytest.AriaUUID, clientID, i, clientID)},
			)
		}
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: len(reqs), MaxConnsPerHost: len(reqs)}}
	defer client.CloseIdleConnections()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range reqs {
		r.key = worldKeys[r.world]
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(r.method, tr.Base+r.path, strings.NewReader(r.body))
			if err != nil {
				r.err = err
				return
			}
			req.Header.Set("x-api-key", r.key)
			<-start // every request leaves at once
			resp, err := client.Do(req)
			if err != nil {
				r.err = err
				return
			}
			defer resp.Body.Close()
			r.status = resp.StatusCode
			r.headerID = resp.Header.Get("X-Request-Id")
			r.respBody, r.err = io.ReadAll(resp.Body)
		}()
	}
	close(start)
	wg.Wait()

	ids := map[string]bool{}
	for _, r := range reqs {
		if r.err != nil || r.status != http.StatusOK {
			t.Errorf("%s %s on %s: %d %v %s", r.method, r.path, r.world, r.status, r.err, r.respBody)
			continue
		}
		var env struct {
			RequestID string          `json:"requestId"`
			Data      json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(r.respBody, &env); err != nil {
			t.Errorf("%s: %v", r.path, err)
			continue
		}
		if env.RequestID != r.headerID || ids[env.RequestID] {
			t.Errorf("request id %q (header %q) repeated or inconsistent", env.RequestID, r.headerID)
		}
		ids[env.RequestID] = true
		// Every answer (an update answers with the new document) names
		// its own world's Aria and nothing of the other world.
		if !bytes.Contains(env.Data, []byte(marker[r.world])) {
			t.Errorf("%s on %s lacks its own world's data: %s", r.path, r.world, env.Data)
		}
		other := otherOf(r.world)
		if bytes.Contains(env.Data, []byte(marker[other])) || bytes.Contains(env.Data, []byte(`:"`+other+`"`)) {
			t.Errorf("%s on %s carries %s's data: %s", r.path, r.world, other, env.Data)
		}
	}
	if len(ids) != len(reqs) {
		t.Errorf("%d distinct request ids for %d requests", len(ids), len(reqs))
	}
	// Every write is in its own world, none in the other.
	for _, clientID := range []string{demo.ClientID, otherWorld} {
		w, err := tr.Worlds().World(ctx, clientID)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := w.Get(ctx, nil, relaytest.AriaUUID)
		if err != nil {
			t.Fatal(err)
		}
		flags, _ := doc["flags"].(map[string]any)
		iso, _ := flags["isolation"].(map[string]any)
		if len(iso) != perKind {
			t.Errorf("%s holds %d isolation flags, want %d: %v", clientID, len(iso), perKind, iso)
		}
		for k, v := range iso {
			if !strings.HasPrefix(k, clientID) || v != clientID {
				t.Errorf("%s holds %s=%v, written to the other world", clientID, k, v)
			}
		}
		if doc["name"] != marker[clientID] {
			t.Errorf("%s: Aria is now %v", clientID, doc["name"])
		}
	}
	t.Logf("%d concurrent requests over two worlds, %d distinct request ids", len(reqs), len(ids))
}

// otherOf names the other world of the isolation tests.
func otherOf(clientID string) string {
	if clientID == demo.ClientID {
		return otherWorld
	}
	return demo.ClientID
}
