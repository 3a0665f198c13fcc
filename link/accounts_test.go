package link_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tabletop-relay/relay/link"
)

// TestPairingStaysInItsAccount pairs a world with an account's code: the
// world belongs to that account. Another account's code cannot take it
// over by presenting its clientId and fingerprint (the world gets a new
// clientId in that account instead), nor pair it again by clientId.
func TestPairingStaysInItsAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	p := e.svc.Pairings()

	codeA, _, err := e.svc.CreatePairingCodeIn(ctx, "acc_a", "", "key-a")
	if err != nil {
		t.Fatal(err)
	}
	tt := e.tabletop()
	first, err := tt.Pair(ctx, codeA)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := p.World(ctx, first.ClientID); err != nil || w.Account != "acc_a" {
		t.Fatalf("world after pairing with account A's code: %+v, %v", w, err)
	}

	// The same tabletop (same fingerprint, presenting its clientId) with
	// account B's code: a new world of account B.
	codeB, _, err := e.svc.CreatePairingCodeIn(ctx, "acc_b", "", "key-b")
	if err != nil {
		t.Fatal(err)
	}
	second, err := tt.Pair(ctx, codeB)
	if err != nil {
		t.Fatal(err)
	}
	if second.ClientID == first.ClientID {
		t.Fatalf("account B's code took over account A's world %s", first.ClientID)
	}
	if w, _ := p.World(ctx, first.ClientID); w.Account != "acc_a" {
		t.Fatalf("account A's world now belongs to %q", w.Account)
	}
	if w, _ := p.World(ctx, second.ClientID); w.Account != "acc_b" {
		t.Fatalf("the new world belongs to %q, want acc_b", w.Account)
	}
	// Account B cannot make a code that pairs account A's world again:
	// for it the world does not exist.
	if _, _, err := e.svc.CreatePairingCodeIn(ctx, "acc_b", first.ClientID, "key-b"); !errors.Is(err, link.ErrUnknownWorld) {
		t.Fatalf("account B's code for account A's world: %v", err)
	}
	// The operator ("" account) may pair it again; it stays account A's.
	if _, c, err := e.svc.CreatePairingCode(ctx, first.ClientID, "test"); err != nil || c.Account != "acc_a" {
		t.Fatalf("the operator's code for account A's world: %+v, %v", c, err)
	}
}
