package shared_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/server/keys"
)

// TestAccountsAcrossNodes makes an account on one node, uses its key on
// another, suspends it on that other node and expects the first to refuse
// the key within a second; then deletes it.
func TestAccountsAcrossNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	nodes := openKeys(t, c)
	a, b := nodes[0], nodes[1]
	ctx := context.Background()

	acct, plain, first, err := a.CreateAccount(ctx, "op", "Guild", keys.Quotas{Worlds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if first.AccountID != acct.ID {
		t.Fatalf("first key = %+v", first)
	}
	if _, _, _, err := b.CreateAccount(ctx, "op", "GUILD", keys.Quotas{}); !errors.Is(err, keys.ErrAccountExists) {
		t.Fatalf("duplicate name on another node: %v", err)
	}
	if _, _, _, err := b.CreateAccount(ctx, "op", "operator", keys.Quotas{}); !errors.Is(err, keys.ErrAccountExists) {
		t.Fatalf("the operator's name: %v", err)
	}
	for i, n := range nodes {
		if _, err := n.Authenticate(ctx, plain); err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	list, err := b.ListAccounts(ctx)
	if err != nil || len(list) != 2 || list[0].ID != keys.OperatorAccount || list[1].ID != acct.ID {
		t.Fatalf("accounts = %+v, %v", list, err)
	}

	if _, err := b.SuspendAccount(ctx, acct.ID, true); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for {
		_, err := a.Authenticate(ctx, plain)
		if errors.Is(err, keys.ErrSuspended) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node A still answers %v a second after the suspension on node B", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := a.SuspendAccount(ctx, keys.OperatorAccount, true); !errors.Is(err, keys.ErrOperatorAccount) {
		t.Fatalf("suspending the operator: %v", err)
	}
	if _, err := a.SuspendAccount(ctx, acct.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, plain); err != nil {
		t.Fatalf("resumed: %v", err)
	}

	if _, err := a.DeleteAccount(ctx, acct.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetAccount(ctx, acct.ID); !errors.Is(err, keys.ErrAccountNotFound) {
		t.Fatalf("deleted account on node B: %v", err)
	}
	// The account's keys are deleted after it, and node B sees them go
	// through its watcher: a moment later on a loaded machine.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := b.Get(ctx, first.ID)
		if errors.Is(err, keys.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted account's key on node B: %v", err)
		}
	}
}
