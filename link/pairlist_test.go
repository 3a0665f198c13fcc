package link_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tabletop-relay/relay/link"
)

// TestPairingsWorldsFollowChanges checks that the list of linked worlds,
// which the pairings keep between changes (every call that names no world
// reads it), shows each pairing and unpairing at once, and that a caller
// changing its copy does not change what the next caller gets.
func TestPairingsWorldsFollowChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := link.OpenSQLite(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	p := link.NewPairings(store, nil, nil)

	list := func() []link.World {
		t.Helper()
		ws, err := p.Worlds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	if ws := list(); len(ws) != 0 {
		t.Fatalf("worlds before any pairing: %+v", ws)
	}
	code, _, err := p.NewCode(ctx, "", "key")
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Pair(ctx, link.PairRequest{Code: code, WorldID: "w1", WorldTitle: "One", ServerFingerprint: "fp1"})
	if err != nil {
		t.Fatal(err)
	}
	ws := list()
	if len(ws) != 1 || ws[0].ClientID != res.World.ClientID || !ws[0].Paired() {
		t.Fatalf("worlds after pairing: %+v", ws)
	}
	ws[0].ClientID = "changed by a caller"
	if ws := list(); ws[0].ClientID != res.World.ClientID {
		t.Fatalf("a caller's change to its copy reached the kept list: %+v", ws)
	}
	if _, err := p.Unpair(ctx, res.World.ClientID); err != nil {
		t.Fatal(err)
	}
	if ws := list(); len(ws) != 1 || ws[0].Paired() {
		t.Fatalf("worlds after unpairing: %+v", ws)
	}
	code, _, err = p.NewCode(ctx, res.World.ClientID, "key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pair(ctx, link.PairRequest{Code: code, WorldID: "w1", ServerFingerprint: "fp1"}); err != nil {
		t.Fatal(err)
	}
	if ws := list(); len(ws) != 1 || !ws[0].Paired() {
		t.Fatalf("worlds after pairing again: %+v", ws)
	}
}

// BenchmarkPairingsWorlds is what every call naming no world asks of the
// pairings: the list of linked worlds, kept between pairings.
func BenchmarkPairingsWorlds(b *testing.B) {
	ctx := context.Background()
	store, err := link.OpenSQLite(filepath.Join(b.TempDir(), "relay.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	p := link.NewPairings(store, nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Worlds(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
