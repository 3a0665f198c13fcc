package files_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/files"
)

// newArea returns an area with a few files and a directory outside it
// holding a secret.
func newArea(t *testing.T) (*files.Area, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "worlds", "demo", "files")
	for name, data := range map[string]string{
		"maps/tavern.svg":     "<svg/>",
		"maps/old/cellar.svg": "<svg id='cellar'/>",
		"handouts/welcome.md": "# Welcome",
		"readme.txt":          "hi",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "secret.txt"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(dir, "escape-abs")))
	must(t, os.Symlink("../../../secret.txt", filepath.Join(dir, "escape-rel")))
	must(t, os.Symlink(base, filepath.Join(dir, "outside")))
	must(t, os.Symlink("maps/tavern.svg", filepath.Join(dir, "inside-link.svg")))
	area, err := files.Of(base, "demo")
	if err != nil {
		t.Fatal(err)
	}
	return area, base
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot lists every name under dir, to prove a refused request left
// nothing.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	must(t, err)
	return out
}

// traversals are paths that must all be refused.
var traversals = []string{
	"..",
	"../secret.txt",
	"../../../secret.txt",
	"maps/../../secret.txt",
	"maps/../../../../etc/passwd",
	"/etc/passwd",
	"//etc/passwd",
	"%2e%2e/secret.txt",
	"%2E%2E%2Fsecret.txt",
	"%252e%252e%252fsecret.txt",
	"..%2fsecret.txt",
	"maps/%2e%2e/%2e%2e/secret.txt",
	"..\\secret.txt",
	"maps\\..\\..\\secret.txt",
	"maps/tavern.svg\x00.png",
	"\x00",
	"maps/\nx",
	strings.Repeat("a", 256),
	strings.Repeat("a/", 600),
	"escape-abs",
	"escape-rel",
	"outside/secret.txt",
	"outside",
	"\xff\xfe",
	".relay-upload-1234",
}

func TestTraversalIsRefused(t *testing.T) {
	area, base := newArea(t)
	before := snapshot(t, base)
	ctx := context.Background()
	for _, p := range traversals {
		if f, err := area.Open(p); err == nil {
			f.Close()
			t.Errorf("Open(%q) succeeded", p)
		} else if !errors.Is(err, world.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", p, err)
		}
		if _, _, err := area.List(ctx, p, true, 0); !errors.Is(err, world.ErrInvalid) {
			t.Errorf("List(%q): %v, want ErrInvalid", p, err)
		}
		if _, err := area.Write(ctx, p, "x.txt", strings.NewReader("x"), files.WriteOptions{Overwrite: true}); err == nil {
			t.Errorf("Write(dir %q) succeeded", p)
		}
		if _, err := area.Write(ctx, "", p, strings.NewReader("x"), files.WriteOptions{Overwrite: true}); err == nil {
			t.Errorf("Write(name %q) succeeded", p)
		}
	}
	if after := snapshot(t, base); !slices.Equal(before, after) {
		t.Fatalf("refused requests changed the disk:\nbefore %v\nafter  %v", before, after)
	}
	secret, _ := os.ReadFile(filepath.Join(base, "secret.txt"))
	if string(secret) != "secret" {
		t.Fatal("the secret changed")
	}
}

func TestCleanKeepsHarmlessPaths(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "/": "", ".": "", "maps/": "maps", "./maps//tavern.svg": "maps/tavern.svg",
		"a%20b.png": "a%20b.png", "..hidden": "..hidden", "a..b/c": "a..b/c",
		"maps/http://x": "maps/http:/x", "1:2.png": "1:2.png", "httpdocs/a.png": "httpdocs/a.png",
	} {
		got, err := files.Clean(in)
		if err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestCleanRefusesURLs: a path that starts like an address (a URL scheme
// or a drive letter), as given or percent-encoded, is refused: a tabletop
// would fetch it instead of reading its own file.
func TestCleanRefusesURLs(t *testing.T) {
	for _, in := range []string{
		"http://example.invalid/x", "https:example.invalid", "HTTP://x", "file:///etc/passwd", "C:/Windows",
		"javascript:alert(1)", "http%3A%2F%2Fexample.invalid", "http%253A//x",
	} {
		if got, err := files.Clean(in); !errors.Is(err, world.ErrInvalid) {
			t.Errorf("Clean(%q) = %q, %v; want ErrInvalid", in, got, err)
		}
	}
}

func TestList(t *testing.T) {
	area, _ := newArea(t)
	ctx := context.Background()
	p, entries, err := area.List(ctx, "", false, 0)
	if err != nil || p != "" {
		t.Fatal(p, err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Type+":"+e.Path)
	}
	want := []string{"directory:handouts", "directory:maps", "file:inside-link.svg", "file:readme.txt"}
	if !slices.Equal(got, want) {
		t.Fatalf("listing %v, want %v", got, want)
	}
	_, entries, err = area.List(ctx, "/", true, 2)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, e := range entries {
		got = append(got, e.Path)
	}
	want = []string{"handouts", "maps", "inside-link.svg", "readme.txt", "handouts/welcome.md", "maps/old", "maps/tavern.svg"}
	if !slices.Equal(got, want) {
		t.Fatalf("depth 2: %v, want %v", got, want)
	}
	_, entries, err = area.List(ctx, "maps", true, 0)
	if err != nil || len(entries) != 3 || entries[2].Path != "maps/old/cellar.svg" || entries[2].Size != 18 || entries[2].Name != "cellar.svg" {
		t.Fatalf("maps: %+v %v", entries, err)
	}
	if _, _, err := area.List(ctx, "nope", false, 0); !errors.Is(err, world.ErrNotFound) || err.Error() != "Path not found: nope" {
		t.Fatalf("missing: %v", err)
	}
	if _, _, err := area.List(ctx, "readme.txt", false, 0); !errors.Is(err, world.ErrInvalid) {
		t.Fatalf("file: %v", err)
	}
	if _, _, err := area.List(ctx, "", true, 11); !errors.Is(err, world.ErrInvalid) {
		t.Fatalf("depth 11: %v", err)
	}
}

func TestOpen(t *testing.T) {
	area, _ := newArea(t)
	f, err := area.Open("handouts/welcome.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, _ := io.ReadAll(f)
	if string(data) != "# Welcome" || f.Size != 9 || f.Name != "welcome.md" || f.MIMEType != "text/markdown; charset=utf-8" {
		t.Fatalf("%+v %q", f, data)
	}
	if _, err := area.Open("maps"); !errors.Is(err, world.ErrInvalid) {
		t.Fatalf("directory: %v", err)
	}
	if _, err := area.Open("maps/none.png"); !errors.Is(err, world.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	link, err := area.Open("inside-link.svg")
	if err != nil {
		t.Fatalf("a link inside the area: %v", err)
	}
	link.Close()
}

func TestWrite(t *testing.T) {
	area, base := newArea(t)
	ctx := context.Background()
	w, err := area.Write(ctx, "new/deep", "a.bin", strings.NewReader("hello"), files.WriteOptions{MaxBytes: 5})
	if err != nil || w.Path != "new/deep/a.bin" || w.Size != 5 {
		t.Fatalf("write: %+v %v", w, err)
	}
	_, err = area.Write(ctx, "new/deep", "a.bin", strings.NewReader("again"), files.WriteOptions{})
	if !errors.Is(err, world.ErrConflict) || err.Error() != "File already exists: new/deep/a.bin. Set overwrite to true to replace it." {
		t.Fatalf("no overwrite: %v", err)
	}
	if _, err := area.Write(ctx, "new/deep", "a.bin", strings.NewReader("again"), files.WriteOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(area.Dir(), "new", "deep", "a.bin"))
	if string(data) != "again" {
		t.Fatalf("content %q", data)
	}
	if _, err := area.Write(ctx, "", "maps", strings.NewReader("x"), files.WriteOptions{Overwrite: true}); !errors.Is(err, world.ErrConflict) {
		t.Fatalf("over a directory: %v", err)
	}
	if _, err := area.Write(ctx, "readme.txt/sub", "x", strings.NewReader("x"), files.WriteOptions{}); !errors.Is(err, world.ErrConflict) {
		t.Fatalf("under a file: %v", err)
	}

	before := snapshot(t, base)
	// Over the limit, in new directories: nothing is left.
	_, err = area.Write(ctx, "big/er", "b.bin", bytes.NewReader(make([]byte, 6)), files.WriteOptions{MaxBytes: 5})
	if !errors.Is(err, world.ErrTooLarge) || err.Error() != "File too large: the upload limit is 5 bytes" {
		t.Fatalf("too large: %v", err)
	}
	// A failing reader: its error comes back, nothing is left.
	boom := errors.New("boom")
	_, err = area.Write(ctx, "x", "c.bin", io.MultiReader(strings.NewReader("part"), errReader{boom}), files.WriteOptions{})
	if !errors.Is(err, boom) {
		t.Fatalf("reader error: %v", err)
	}
	// A canceled context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := area.Write(cctx, "", "d.bin", strings.NewReader("x"), files.WriteOptions{}); err == nil {
		t.Fatal("canceled write succeeded")
	}
	if after := snapshot(t, base); !slices.Equal(before, after) {
		t.Fatalf("failed writes left files:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := area.Write(ctx, "", "", strings.NewReader("x"), files.WriteOptions{}); !errors.Is(err, world.ErrInvalid) {
		t.Fatalf("no name: %v", err)
	}
	if _, err := area.Write(ctx, "", "a/b", strings.NewReader("x"), files.WriteOptions{}); !errors.Is(err, world.ErrInvalid) {
		t.Fatalf("name with a slash: %v", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestAreaOf(t *testing.T) {
	if _, err := files.Of(t.TempDir(), "../x"); !errors.Is(err, world.ErrInvalid) {
		t.Fatalf("bad client id: %v", err)
	}
	if _, err := files.Of("", "demo"); !errors.Is(err, world.ErrUnavailable) {
		t.Fatalf("no data dir: %v", err)
	}
	// A world without a files directory gets an empty one on first use.
	area, _ := files.Of(t.TempDir(), "fresh")
	_, entries, err := area.List(context.Background(), "", true, 0)
	if err != nil || len(entries) != 0 {
		t.Fatalf("fresh: %v %v", entries, err)
	}
}
