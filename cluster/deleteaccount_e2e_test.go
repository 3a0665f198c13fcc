package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
)

// TestDeleteAccountRemovesItsWorldsOnEveryNode deletes, through a third
// node, an account whose embedded worlds are hosted by two other nodes of
// three and which has a linked world connected to one of them: each
// embedded world is removed by its host, so that every node answers 404
// for it, its replicated log and its events are gone, the followers'
// copies and its snapshots are removed, and no node brings it back once its lease would have
// run out; the linked world's token is refused on every node.
func TestDeleteAccountRemovesItsWorldsOnEveryNode(t *testing.T) {
	nodes, cfgs := startReplicated(t, withSnapshots)
	n3 := nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	made := n3.Do(http.MethodPost, "/accounts", n3.AdminKey, nil, map[string]any{"name": "Leaving"})
	if made.Status != http.StatusOK {
		t.Fatalf("POST /accounts: %d %s", made.Status, made.Body)
	}
	acctID := made.Data(t)["account"].(map[string]any)["id"].(string)
	key := made.Data(t)["key"].(string)

	// One embedded world on the first node and one on the second.
	hosted := map[string]int{"leaving-north": 0, "leaving-south": 1}
	for id, i := range hosted {
		n := nodes[i]
		if r := n.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"clientId": id, "title": id, "seed": "demo"}); r.Status != http.StatusOK {
			t.Fatalf("POST /worlds %s on %s: %d %s", id, cfgs[i].NodeName, r.Status, r.Body)
		}
		waitUntil(t, cfgs[2].NodeName+" knowing that "+cfgs[i].NodeName+" hosts "+id, func() bool {
			for _, h := range n3.Registry().Snapshot() {
				if h.ClientID == id && h.Node == cfgs[i].NodeName && h.Live {
					return true
				}
			}
			return false
		})
		// Writes through the third node: the world has events, a snapshot,
		// and its followers a copy.
		for hp := range snapshotEvery + 2 {
			if r := n3.Do(http.MethodPut, "/update", key, relaytest.Q("clientId", id), map[string]any{"uuid": relaytest.GoblinUUID, "data": map[string]any{"system.attributes.hp.value": hp}}); r.Status != http.StatusOK {
				t.Fatalf("update %s through %s: %d %s", id, cfgs[2].NodeName, r.Status, r.Body)
			}
		}
		waitFor(t, 30*time.Second, "a snapshot of "+id, func() bool { return len(worldSnapshots(t, ctx, n3, id)) > 0 })
		for j := range nodes {
			if j != i {
				waitFor(t, 30*time.Second, "the copy of "+id+" on "+cfgs[j].NodeName, func() bool { return copyComplete(cfgs[j].DataDir, id, 0) })
			}
		}
		waitUntil(t, "the events of "+id, func() bool {
			_, kept := streamState(t, ctx, n3, "relay.events."+id)
			return kept > 0
		})
	}

	// A linked world of the account, connected to the first node.
	code := nodes[0].Do(http.MethodPost, "/pairing-codes", key, nil, map[string]any{})
	if code.Status != http.StatusOK {
		t.Fatalf("pairing code: %d %s", code.Status, code.Body)
	}
	gm := []link.Player{{ID: "gm000000000000001", Name: "Gamemaster", Role: world.RoleGamemaster, Active: true}}
	tt := linktest.New(linktest.Config{RelayURL: nodes[0].Base, WorldID: "w", WorldTitle: "Leaving Tales", SystemID: "dnd5e", ServerFingerprint: "fp-leaving", Players: gm})
	if _, err := tt.Pair(ctx, code.Data(t)["code"].(string)); err != nil {
		t.Fatal(err)
	}
	if err := tt.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.Drop)
	linkedID, token := tt.Credentials()

	if r := n3.Do(http.MethodDelete, "/accounts/"+acctID, n3.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("DELETE /accounts/%s through %s: %d %s", acctID, cfgs[2].NodeName, r.Status, r.Body)
	}

	for id, i := range hosted {
		if _, err := os.Stat(filepath.Join(cfgs[i].DataDir, "worlds", id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, its host, still has %s's directory: %v", cfgs[i].NodeName, id, err)
		}
		for j, n := range nodes {
			waitFor(t, 30*time.Second, "404 for "+id+" on "+cfgs[j].NodeName, func() bool {
				return n.Do(http.MethodGet, "/get", n.AdminKey, relaytest.Q("clientId", id, "uuid", relaytest.GoblinUUID), nil).Status == http.StatusNotFound
			})
			if j != i {
				waitFor(t, 30*time.Second, "the removal of "+id+"'s copy on "+cfgs[j].NodeName, func() bool {
					_, err := os.Stat(filepath.Join(cfgs[j].DataDir, "replicas", id))
					return errors.Is(err, os.ErrNotExist)
				})
			}
		}
		if _, err := n3.Cluster().JetStream().Stream(ctx, "RELAY_WORLD_"+id); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("%s's replicated log after the account's removal: %v, want no such stream", id, err)
		}
		if seqs := worldSnapshots(t, ctx, n3, id); len(seqs) != 0 {
			t.Errorf("%s's snapshots after the account's removal: %v, want none", id, seqs)
		}
		waitUntil(t, "the removal of "+id+"'s events", func() bool {
			_, kept := streamState(t, ctx, n3, "relay.events."+id)
			return kept == 0
		})
	}

	// The linked world's token is refused by every node.
	for j, n := range nodes {
		again := linktest.New(linktest.Config{RelayURL: n.Base, WorldID: "w", WorldTitle: "Leaving Tales", SystemID: "dnd5e", ServerFingerprint: "fp-leaving", Players: gm})
		again.SetCredentials(linkedID, token)
		if err := again.Connect(ctx); err == nil {
			again.Drop()
			t.Errorf("the deleted account's linked world connected to %s with its token", cfgs[j].NodeName)
		}
	}

	// Past the lease: nobody took a world over.
	time.Sleep(2 * clusterLease)
	for id := range hosted {
		for j, n := range nodes {
			if r := n.Do(http.MethodGet, "/get", n.AdminKey, relaytest.Q("clientId", id, "uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusNotFound {
				t.Errorf("%s on %s after its lease: %d %s", id, cfgs[j].NodeName, r.Status, r.Body)
			}
		}
	}
}

// worldSnapshots lists the snapshots the cluster keeps of a world.
func worldSnapshots(t *testing.T, ctx context.Context, via *relaytest.Relay, clientID string) []uint64 {
	t.Helper()
	seqs, err := via.Cluster().WorldSnapshots(ctx, clientID)
	if err != nil {
		t.Logf("%s's snapshots: %v", clientID, err)
	}
	return seqs
}
