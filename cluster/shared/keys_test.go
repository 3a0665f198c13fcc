package shared_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/cluster/shared"
	"github.com/tabletop-relay/relay/server/keys"
)

// openKeys opens one key store per server of the cluster, each over its
// own connection, as the nodes of a relay cluster do.
func openKeys(t *testing.T, c *jstest.Cluster) []*shared.KeyStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stores []*shared.KeyStore
	for i := range c.Servers {
		s, err := shared.OpenKeys(ctx, c.JetStream(i), shared.Options{Replicas: c.Replicas()})
		if err != nil {
			t.Fatalf("open keys on node %d: %v", i+1, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores = append(stores, s)
	}
	return stores
}

// TestKeysAcrossNodes creates a key on one node and uses it on another at
// once, then revokes it on the other and expects the first to refuse it
// within a second.
func TestKeysAcrossNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	nodes := openKeys(t, c)
	a, b := nodes[0], nodes[1]
	ctx := context.Background()

	plain, k, err := a.Create(ctx, keys.Spec{Name: "bot", Scopes: []string{keys.ScopeEntityRead}, ClientIDs: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	// No wait: node B reads through to the bucket when the watcher has
	// not brought the key yet.
	if err := nodes[2].Check(ctx, plain); err != nil {
		t.Fatalf("node C's check refused a key created on node A: %v", err)
	}
	got, err := b.Authenticate(ctx, plain)
	if err != nil {
		t.Fatalf("node B refused a key created on node A: %v", err)
	}
	if got.ID != k.ID || !got.BoundTo("demo") || got.BoundTo("other") {
		t.Fatalf("node B got %+v, want the key created on A (%s)", got, k.ID)
	}
	if _, err := nodes[2].Get(ctx, k.ID); err != nil {
		t.Fatalf("node C: get by id: %v", err)
	}

	// Every node authenticates the key before the revocation, so that
	// the refusal below comes from the watcher, not from a fresh read.
	for i, n := range nodes {
		if _, err := n.Authenticate(ctx, plain); err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	start := time.Now()
	if _, err := b.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Authenticate(ctx, plain); !errors.Is(err, keys.ErrRevoked) {
		t.Fatalf("node B after its own revocation: %v, want ErrRevoked", err)
	}
	// Admission's check gives the same verdicts.
	if err := b.Check(ctx, plain); !errors.Is(err, keys.ErrRevoked) {
		t.Fatalf("node B's check after its own revocation: %v, want ErrRevoked", err)
	}
	if err := b.Check(ctx, "rk_"+strings.Repeat("A", 43)); !errors.Is(err, keys.ErrUnknown) {
		t.Fatalf("node B's check of an unknown key: %v, want ErrUnknown", err)
	}
	var wg sync.WaitGroup
	for i, n := range []*shared.KeyStore{a, nodes[2]} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := n.Authenticate(ctx, plain)
				if errors.Is(err, keys.ErrRevoked) {
					t.Logf("revocation reached node %d after %v", 2*i+1, time.Since(start))
					return
				}
				if time.Since(start) > time.Second {
					t.Errorf("node %d still answers %v a second after the revocation", 2*i+1, err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()

	// A node started later loads what the others did.
	late, err := shared.OpenKeys(ctx, c.JetStream(2), shared.Options{Replicas: c.Replicas()})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if _, err := late.Authenticate(ctx, plain); !errors.Is(err, keys.ErrRevoked) {
		t.Fatalf("a node opened later: %v, want ErrRevoked", err)
	}
	if n, err := late.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1", n, err)
	}
}

// TestKeysAuthorityInCluster checks that the cluster's store applies the
// same authority rules as the SQLite store: a key may not create a key
// beyond its own bindings, nor see or revoke one.
func TestKeysAuthorityInCluster(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	s := openKeys(t, c)[0]
	ctx := context.Background()
	_, admin, err := s.Create(ctx, keys.Spec{Name: "admin", Scopes: keys.AllScopes})
	if err != nil {
		t.Fatal(err)
	}
	_, bound, err := s.CreateAs(ctx, admin, keys.Spec{Name: "demo admin", Scopes: []string{keys.ScopeAdmin, keys.ScopeEntityRead}, ClientIDs: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	if bound.CreatedBy != admin.ID {
		t.Fatalf("CreatedBy = %q, want %q", bound.CreatedBy, admin.ID)
	}
	// Beyond its worlds, beyond its scopes: refused, nothing stored.
	for _, spec := range []keys.Spec{
		{Name: "x", Scopes: []string{keys.ScopeEntityRead}},
		{Name: "x", Scopes: []string{keys.ScopeEntityWrite}, ClientIDs: []string{"demo"}},
	} {
		if _, _, err := s.CreateAs(ctx, bound, spec); !errors.Is(err, keys.ErrForbidden) {
			t.Fatalf("CreateAs(%+v) = %v, want ErrForbidden", spec, err)
		}
	}
	if _, _, err := s.CreateAs(ctx, bound, keys.Spec{Name: "", Scopes: []string{keys.ScopeEntityRead}}); !errors.Is(err, keys.ErrInvalid) {
		t.Fatalf("CreateAs without a name = %v, want ErrInvalid", err)
	}
	if _, err := s.RevokeAs(ctx, bound, admin.ID); !errors.Is(err, keys.ErrForbidden) {
		t.Fatalf("RevokeAs(admin) = %v, want ErrForbidden", err)
	}
	if _, err := s.Revoke(ctx, "0123456789abcdef"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("Revoke(unknown) = %v, want ErrNotFound", err)
	}
	// Ids from callers that are no key names at all (wildcards, spaces,
	// dots): not found, like any unknown id.
	for _, id := range []string{"*", ">", "a b", "k.x", "", strings.Repeat("x", 300)} {
		if _, err := s.Get(ctx, id); !errors.Is(err, keys.ErrNotFound) {
			t.Fatalf("Get(%q) = %v, want ErrNotFound", id, err)
		}
		if _, err := s.RevokeAs(ctx, admin, id); !errors.Is(err, keys.ErrNotFound) {
			t.Fatalf("RevokeAs(%q) = %v, want ErrNotFound", id, err)
		}
	}
	seen, err := s.ListAs(ctx, bound)
	if err != nil || len(seen) != 1 || seen[0].ID != bound.ID {
		t.Fatalf("ListAs(bound) = %v, %v; want itself only", seen, err)
	}
	if n, err := s.Count(ctx); err != nil || n != 2 {
		t.Fatalf("Count = %d, %v; want 2 (nothing stored by the refusals)", n, err)
	}
	if _, err := s.Authenticate(ctx, "rk_"+strings.Repeat("A", 43)); !errors.Is(err, keys.ErrUnknown) {
		t.Fatalf("unknown key: %v, want ErrUnknown", err)
	}
	if _, err := s.Authenticate(ctx, "garbage"); !errors.Is(err, keys.ErrUnknown) {
		t.Fatalf("malformed key: %v, want ErrUnknown", err)
	}
}

// TestKeysBootstrapOnce starts three nodes on an empty bucket at once:
// exactly one creates the admin key.
func TestKeysBootstrapOnce(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	nodes := openKeys(t, c)
	dir := t.TempDir()
	var wg sync.WaitGroup
	created := make([]bool, len(nodes))
	plains := make([]string, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			plains[i], created[i], err = n.Bootstrap(context.Background(), filepath.Join(dir, "n"+string(rune('1'+i)), "admin.key"))
			if err != nil {
				t.Errorf("node %d: %v", i+1, err)
			}
		}()
	}
	wg.Wait()
	count := 0
	for i := range nodes {
		if !created[i] {
			continue
		}
		count++
		data, err := os.ReadFile(filepath.Join(dir, "n"+string(rune('1'+i)), "admin.key"))
		if err != nil || string(data) != plains[i]+"\n" {
			t.Fatalf("key file of node %d: %q, %v", i+1, data, err)
		}
		for j, n := range nodes {
			if k, err := n.Authenticate(context.Background(), plains[i]); err != nil || k.CreatedBy != keys.CreatedByBootstrap {
				t.Fatalf("node %d with the admin key: %+v, %v", j+1, k, err)
			}
		}
	}
	if count != 1 {
		t.Fatalf("%d nodes created an admin key, want 1", count)
	}
}

// TestKeysImportFromSingleNode brings a single node's SQLite keys into an
// empty cluster: they keep working (revoked ones stay revoked) on every
// node, no admin key is bootstrapped besides, and a second node's keys are
// not merged.
func TestKeysImportFromSingleNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	local, err := keys.Open(filepath.Join(t.TempDir(), "relay.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	admin, created, err := local.Bootstrap(ctx, filepath.Join(t.TempDir(), "admin.key"))
	if err != nil || !created {
		t.Fatal(created, err)
	}
	gone, goneKey, err := local.Create(ctx, keys.Spec{Name: "gone", Scopes: []string{keys.ScopeSearch}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.Revoke(ctx, goneKey.ID); err != nil {
		t.Fatal(err)
	}
	exported, err := local.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}

	c := jstest.Start(t, 3)
	nodes := openKeys(t, c)
	if n, err := nodes[0].Import(ctx, exported); err != nil || n != 2 {
		t.Fatalf("Import = %d, %v; want 2", n, err)
	}
	for i, n := range nodes {
		if k, err := n.Authenticate(ctx, admin); err != nil || k.CreatedBy != keys.CreatedByBootstrap {
			t.Fatalf("node %d with the imported admin key: %+v, %v", i+1, k, err)
		}
		if _, err := n.Authenticate(ctx, gone); !errors.Is(err, keys.ErrRevoked) {
			t.Fatalf("node %d with the imported revoked key: %v", i+1, err)
		}
	}
	if _, created, err := nodes[1].Bootstrap(ctx, filepath.Join(t.TempDir(), "admin.key")); err != nil || created {
		t.Fatalf("Bootstrap after an import: created %v, %v", created, err)
	}
	if n, err := nodes[2].Import(ctx, exported[:1]); err != nil || n != 0 {
		t.Fatalf("a second Import = %d, %v; want 0", n, err)
	}
}
