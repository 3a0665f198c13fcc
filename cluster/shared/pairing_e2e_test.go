package shared_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestRelaysSharePairing pairs a tabletop through one relay node with a
// code asked for on another, connects it to the node it paired through,
// and unpairs it through the first: its socket on the second node closes
// and its token is refused on both.
func TestRelaysSharePairing(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	a := relaytest.Start(t, func(cfg *node.Config) {
		cfg.Shared = &node.SharedState{JetStream: c.JetStream(0), NodeName: "a"}
	})
	b := relaytest.Start(t, func(cfg *node.Config) {
		cfg.Shared = &node.SharedState{JetStream: c.JetStream(1), NodeName: "b"}
		cfg.Demo = false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	code := a.Do("POST", "/pairing-codes", a.AdminKey, nil, map[string]any{}).Data(t)["code"].(string)
	tt := linktest.New(linktest.Config{RelayURL: b.Base, WorldID: "w1", WorldTitle: "World", ServerFingerprint: "fp1", ReconnectMaxAttempts: 1})
	res, err := tt.Pair(ctx, code)
	if err != nil {
		t.Fatalf("pair on node b with a code from node a: %v", err)
	}
	if err := tt.Connect(ctx); err != nil {
		t.Fatalf("connect to node b: %v", err)
	}
	// Node a lists the world paired through node b: its list of linked
	// worlds, kept in memory, follows the shared bucket.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(string(a.Do("GET", "/clients", a.AdminKey, nil, nil).Body), res.ClientID); {
		if time.Now().After(deadline) {
			t.Fatal("node a does not list the world paired through node b")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp := a.Do("DELETE", "/linked-worlds/"+res.ClientID, a.AdminKey, nil, nil); resp.Status != http.StatusOK {
		t.Fatalf("unpair on node a: %d %s", resp.Status, resp.Body)
	}
	start := time.Now()
	if err := tt.WaitFor(ctx, func(tt *linktest.Tabletop) bool { return !tt.Connected() }); err != nil {
		t.Fatal("the socket on node b stayed open after the unpairing on node a")
	}
	t.Logf("the socket on node b closed %v after the unpairing on node a answered", time.Since(start))
	if tt.LastClose() != link.CloseAuthFailed {
		t.Fatalf("closed with %d, want %d", tt.LastClose(), link.CloseAuthFailed)
	}
	for _, r := range []*relaytest.Relay{a, b} {
		other := linktest.New(linktest.Config{RelayURL: r.Base, ReconnectMaxAttempts: 1})
		other.SetCredentials(tt.Credentials())
		if err := other.Connect(ctx); err == nil {
			t.Fatalf("%s took the token of an unpaired world", r.Base)
		}
	}
}
