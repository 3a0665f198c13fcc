package keys

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
)

// TestWorldOwnersPersist records world owners, refuses a second owner of
// one world, forgets a released one, and finds the records again after a
// reopen.
func TestWorldOwnersPersist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "relay.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimWorld(ctx, "alpha", "acc_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimWorld(ctx, "beta", "acc_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimWorld(ctx, "alpha", "acc_b"); !errors.Is(err, ErrWorldClaimed) {
		t.Fatalf("a second owner of alpha: %v", err)
	}
	if a, ok := s.WorldOwner("alpha"); !ok || a != "acc_a" {
		t.Fatalf("owner of alpha = %q, %v", a, ok)
	}
	if err := s.ReleaseWorld(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.WorldOwner("beta"); ok {
		t.Fatal("beta keeps its owner after release")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.OwnedWorlds("acc_a"); !slices.Equal(got, []string{"alpha"}) {
		t.Fatalf("after reopen acc_a owns %v", got)
	}
	if _, ok := s.WorldOwner("demo"); ok {
		t.Fatal("a world never claimed has an owner")
	}
}
