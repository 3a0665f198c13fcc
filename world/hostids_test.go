package world

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestHostIDsFollowCreate checks that the cached list of worlds includes a
// world as soon as Create returns, and that a fresh host reads the
// directory again (ignoring what is not a finished world).
func TestHostIDsFollowCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	h, err := OpenHost(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if ids, err := h.IDs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("IDs of an empty host = %v, %v; want none", ids, err)
	}
	for _, id := range []string{"beta", "alpha"} {
		if _, err := h.Create(ctx, id, testSeed()); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := h.IDs(ctx); err != nil || !slices.Equal(ids, []string{"alpha", "beta"}) {
		t.Fatalf("IDs after two creations = %v, %v; want [alpha beta]", ids, err)
	}
	// A directory without a database is not a world.
	if err := os.Mkdir(filepath.Join(dir, "worlds", "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	h.Close()
	h2, err := OpenHost(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if ids, err := h2.IDs(ctx); err != nil || !slices.Equal(ids, []string{"alpha", "beta"}) {
		t.Fatalf("IDs after reopening = %v, %v; want [alpha beta]", ids, err)
	}
}
