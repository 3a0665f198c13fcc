package shared_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/cluster/shared"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
)

// clock is a settable clock shared by the nodes of a test.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestTicketsAcrossNodes issues a stream ticket on one node and uses it on
// the others: it opens its stream anywhere, refuses other streams
// everywhere, stays valid for the reconnect window after its stream
// closed, and is worthless once its key is revoked on any node.
func TestTicketsAcrossNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	clk := newClock()
	ctx := context.Background()
	keyStores := openKeys(t, c)
	var nodes []*server.Tickets
	for i := range c.Servers {
		ts, err := shared.OpenTickets(ctx, c.JetStream(i), shared.Options{Replicas: c.Replicas(), Clock: clk.now, TicketRenewEvery: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, server.NewTicketsIn(ts, clk.now, keyStores[i].Get))
	}
	_, key, err := keyStores[0].Create(ctx, keys.Spec{Name: "browser", Scopes: []string{keys.ScopeEventsSubscribe}})
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := nodes[0].Issue(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// At once on another node.
	got, use, err := nodes[1].Redeem(ctx, plain)
	if err != nil || got.ID != key.ID {
		t.Fatalf("node B redeems: %+v, %v", got, err)
	}
	closed, err := use.Open(ctx, "actors/demo/Actor.a")
	if err != nil {
		t.Fatal(err)
	}
	// Bound: another stream is refused on every node.
	_, use3, err := nodes[2].Redeem(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := use3.Open(ctx, "scenes/demo"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("another stream on node C: %v, want Unauthenticated", err)
	}
	// Open past its first-use deadline and its first reconnect window:
	// still valid, since the open stream renews it.
	for range 3 {
		clk.advance(server.StreamTicketReconnectWindow * 2 / 3)
		// The renewals (every 5 ms here) keep it valid.
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := nodes[2].Check(ctx, plain)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ticket of an open stream, on node C: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	closed()
	// Within the reconnect window the same stream reopens on node C.
	clk.advance(server.StreamTicketReconnectWindow / 2)
	_, use3, err = nodes[2].Redeem(ctx, plain)
	if err != nil {
		t.Fatalf("reconnect on node C: %v", err)
	}
	closed3, err := use3.Open(ctx, "actors/demo/Actor.a")
	if err != nil {
		t.Fatalf("reopen on node C: %v", err)
	}
	closed3()
	// Revoked on node B: worthless on node A within a second.
	if _, err := keyStores[1].Revoke(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for nodes[0].Check(ctx, plain) == nil {
		if time.Since(start) > time.Second {
			t.Fatal("node A still takes the ticket of a key revoked on node B a second ago")
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("ticket of a revoked key refused on another node after %v", time.Since(start))

	// A ticket whose window passed is gone everywhere.
	_, key2, _ := keyStores[0].Create(ctx, keys.Spec{Name: "b2", Scopes: []string{keys.ScopeEventsSubscribe}})
	plain2, _, err := nodes[1].Issue(ctx, key2)
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(server.StreamTicketTTL)
	for i, n := range nodes {
		if err := n.Check(ctx, plain2); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("node %d takes a lapsed ticket: %v", i+1, err)
		}
	}
}

// TestPairingAcrossNodes pairs a world with a code made on one node
// through another, authenticates its token on a third, and checks that a
// new pairing or an unpairing on any node ends the old token everywhere,
// that a code works once even when two nodes take it at once, and that a
// lapsed code is refused.
func TestPairingAcrossNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	clk := newClock()
	ctx := context.Background()
	var nodes []*link.Pairings
	for i := range c.Servers {
		st, err := shared.OpenLinks(ctx, c.JetStream(i), shared.Options{Replicas: c.Replicas()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		nodes = append(nodes, link.NewPairings(st, clk.now, nil))
	}
	req := func(code string) link.PairRequest {
		return link.PairRequest{Code: code, WorldID: "w1", WorldTitle: "World", ServerFingerprint: "fp1"}
	}
	code, _, err := nodes[0].NewCode(ctx, "", "k1")
	if err != nil {
		t.Fatal(err)
	}
	paired, err := nodes[1].Pair(ctx, req(code))
	if err != nil {
		t.Fatal(err)
	}
	if id, _, err := nodes[2].Authenticate(ctx, paired.Token); err != nil || id != paired.World.ClientID {
		t.Fatalf("node C authenticates the token: %q, %v", id, err)
	}
	if _, err := nodes[2].Pair(ctx, req(code)); !errors.Is(err, link.ErrCodeRejected) {
		t.Fatalf("a used code on node C: %v, want ErrCodeRejected", err)
	}

	// Pairing again (a code for that world, made on C, used on A): the
	// old token ends on every node.
	code2, _, err := nodes[2].NewCode(ctx, paired.World.ClientID, "k1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := nodes[0].Pair(ctx, req(code2))
	if err != nil || !again.Again || again.World.ClientID != paired.World.ClientID {
		t.Fatalf("pair again: %+v, %v", again, err)
	}
	for i, n := range nodes {
		if _, _, err := n.Authenticate(ctx, paired.Token); !errors.Is(err, link.ErrTokenRejected) {
			t.Fatalf("node %d takes the replaced token: %v", i+1, err)
		}
		if _, _, err := n.Authenticate(ctx, again.Token); err != nil {
			t.Fatalf("node %d refuses the new token: %v", i+1, err)
		}
	}
	// Node C never wrote the world's record: its list (kept in memory)
	// learns of it from its follower of the bucket.
	for i, n := range nodes {
		waitWorlds(t, n, func(ws []link.World) bool {
			return len(ws) == 1 && ws[0].ClientID == paired.World.ClientID && ws[0].Paired()
		}, fmt.Sprintf("node %d lists the world paired on node B as paired", i+1))
	}
	// A code for a new world, made on B and presented on C with the
	// world's clientId and fingerprint, does not take the world over: the
	// token stays valid on every node.
	newWorldCode, _, err := nodes[1].NewCode(ctx, "", "k2")
	if err != nil {
		t.Fatal(err)
	}
	takeOver := req(newWorldCode)
	takeOver.ExistingClientID = paired.World.ClientID
	if _, err := nodes[2].Pair(ctx, takeOver); !errors.Is(err, link.ErrCodeForNewWorld) {
		t.Fatalf("a new world's code for a known world: %v, want ErrCodeForNewWorld", err)
	}
	for i, n := range nodes {
		if _, _, err := n.Authenticate(ctx, again.Token); err != nil {
			t.Fatalf("node %d refuses the token after a refused take-over: %v", i+1, err)
		}
	}

	// Unpaired on B: refused everywhere, and listed as unpaired everywhere.
	if n, err := nodes[1].Unpair(ctx, paired.World.ClientID); err != nil || n != 1 {
		t.Fatalf("Unpair = %d, %v; want 1 token revoked", n, err)
	}
	for i, n := range nodes {
		if _, _, err := n.Authenticate(ctx, again.Token); !errors.Is(err, link.ErrTokenRejected) {
			t.Fatalf("node %d takes the token of an unpaired world: %v", i+1, err)
		}
		waitWorlds(t, n, func(ws []link.World) bool {
			return len(ws) == 1 && !ws[0].Paired()
		}, fmt.Sprintf("node %d lists the world unpaired on node B as unpaired", i+1))
	}
	if _, err := nodes[0].Unpair(ctx, "fvtt_0000000000000000"); !errors.Is(err, link.ErrUnknownWorld) {
		t.Fatalf("Unpair(unknown) = %v, want ErrUnknownWorld", err)
	}
	for _, id := range []string{"*", ">", "a.b", "a b", ""} {
		if _, err := nodes[0].World(ctx, id); !errors.Is(err, link.ErrUnknownWorld) {
			t.Fatalf("World(%q) = %v, want ErrUnknownWorld", id, err)
		}
		if _, err := nodes[1].Unpair(ctx, id); !errors.Is(err, link.ErrUnknownWorld) {
			t.Fatalf("Unpair(%q) = %v, want ErrUnknownWorld", id, err)
		}
	}

	// One code, two nodes at once: one pairing.
	code3, _, err := nodes[0].NewCode(ctx, "", "k1")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var won atomic.Int32
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.Pair(ctx, req(code3)); err == nil {
				won.Add(1)
			} else if !errors.Is(err, link.ErrCodeRejected) {
				t.Errorf("pair: %v", err)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d pairings with one code, want 1", won.Load())
	}

	// A lapsed code is refused.
	code4, _, err := nodes[0].NewCode(ctx, "", "k1")
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(link.CodeTTL)
	if _, err := nodes[1].Pair(ctx, req(code4)); !errors.Is(err, link.ErrCodeRejected) {
		t.Fatalf("a lapsed code: %v, want ErrCodeRejected", err)
	}
}

// TestPairingsImportFromSingleNode brings a single node's linked worlds
// into an empty cluster: a paired world's token works on every node, an
// unpaired world stays unpaired, and a second import adds nothing.
func TestPairingsImportFromSingleNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	local, err := link.OpenSQLite(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	single := link.NewPairings(local, nil, nil)
	pair := func(fp string) link.Paired {
		code, _, err := single.NewCode(ctx, "", "k1")
		if err != nil {
			t.Fatal(err)
		}
		p, err := single.Pair(ctx, link.PairRequest{Code: code, WorldID: fp, ServerFingerprint: fp})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	kept, gone := pair("fp1"), pair("fp2")
	if _, err := single.Unpair(ctx, gone.World.ClientID); err != nil {
		t.Fatal(err)
	}
	exported, err := local.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}

	c := jstest.Start(t, 2)
	var nodes []*link.Pairings
	var stores []*shared.LinkStore
	for i := range c.Servers {
		st, err := shared.OpenLinks(ctx, c.JetStream(i), shared.Options{Replicas: c.Replicas()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		stores = append(stores, st)
		nodes = append(nodes, link.NewPairings(st, nil, nil))
	}
	if n, err := stores[0].Import(ctx, exported); err != nil || n != 2 {
		t.Fatalf("Import = %d, %v; want 2", n, err)
	}
	for i, n := range nodes {
		if id, _, err := n.Authenticate(ctx, kept.Token); err != nil || id != kept.World.ClientID {
			t.Fatalf("node %d, the imported token: %q, %v", i+1, id, err)
		}
		if _, _, err := n.Authenticate(ctx, gone.Token); !errors.Is(err, link.ErrTokenRejected) {
			t.Fatalf("node %d, the unpaired world's token: %v", i+1, err)
		}
	}
	waitWorlds(t, nodes[1], func(ws []link.World) bool { return len(ws) == 2 }, "the other node lists both imported worlds")
	ws, err := nodes[1].Worlds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Paired() != (w.ClientID == kept.World.ClientID) {
			t.Fatalf("world %s paired = %v", w.ClientID, w.Paired())
		}
	}
	if n, err := stores[1].Import(ctx, exported); err != nil || n != 0 {
		t.Fatalf("a second Import = %d, %v; want 0", n, err)
	}
}

// waitWorlds waits up to a few seconds for the pairings' list of linked
// worlds to satisfy ok, and fails the test with what when it does not.
func waitWorlds(t *testing.T, p *link.Pairings, ok func([]link.World) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws, err := p.Worlds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ok(ws) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Worlds = %+v", what, ws)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
