package files_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tabletop-relay/relay/world/files"
)

// A write killed half-way leaves a temporary file; the start-up sweep
// removes every one of them, in every world, and nothing else.
func TestRemoveTemporaryAll(t *testing.T) {
	data := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(data, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("worlds/demo/files/maps/tavern.svg", "<svg/>")
	write("worlds/demo/files/maps/.relay-upload-0123abcd", "<sv")
	write("worlds/demo/files/.relay-upload-ffff", "")
	write("worlds/other/files/a/b/.relay-upload-1", "half")
	write("worlds/other/files/a/b/kept.txt", "kept")
	write("worlds/other/world.db", "not a file area")
	write("worlds/other/.relay-upload-outside", "outside the file area")
	// A link to a directory outside the area is not followed.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, ".relay-upload-x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(data, "worlds", "demo", "files", "link")); err != nil {
		t.Fatal(err)
	}

	n, err := files.RemoveTemporaryAll(data)
	if err != nil || n != 3 {
		t.Fatalf("removed %d, %v; want 3", n, err)
	}
	for _, gone := range []string{"worlds/demo/files/maps/.relay-upload-0123abcd", "worlds/demo/files/.relay-upload-ffff", "worlds/other/files/a/b/.relay-upload-1"} {
		if _, err := os.Stat(filepath.Join(data, gone)); !os.IsNotExist(err) {
			t.Errorf("%s: %v", gone, err)
		}
	}
	for _, kept := range []string{"worlds/demo/files/maps/tavern.svg", "worlds/other/files/a/b/kept.txt", "worlds/other/.relay-upload-outside"} {
		if _, err := os.Stat(filepath.Join(data, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, ".relay-upload-x")); err != nil {
		t.Errorf("followed a link out of the area: %v", err)
	}
	// No worlds directory at all is nothing to do.
	if n, err := files.RemoveTemporaryAll(t.TempDir()); n != 0 || err != nil {
		t.Fatalf("empty data directory: %d, %v", n, err)
	}
}
