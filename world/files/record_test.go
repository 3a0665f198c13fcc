package files_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tabletop-relay/relay/world/files"
)

// TestRecordedWrite checks that a write's Record sees the finished bytes
// and their digest before the file is in place, that a failing Record or
// Verify leaves nothing, and that Walk, Remove and RemoveAll see and
// remove what writes made.
func TestRecordedWrite(t *testing.T) {
	ctx := context.Background()
	area := files.New(filepath.Join(t.TempDir(), "files"))
	sum := sha256.Sum256([]byte("hello"))
	var seen files.Pending
	var read string
	record := func(_ context.Context, p files.Pending) error {
		seen = p
		if _, err := os.Stat(filepath.Join(area.Dir(), "maps", "a.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the file is in place before its record: %v", err)
		}
		r, err := p.Open()
		if err != nil {
			return err
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		read = string(b)
		return err
	}
	if _, err := area.Write(ctx, "maps", "a.txt", strings.NewReader("hello"), files.WriteOptions{Record: record}); err != nil {
		t.Fatal(err)
	}
	if seen.Path != "maps/a.txt" || seen.Size != 5 || seen.Digest != "sha256:"+hex.EncodeToString(sum[:]) || read != "hello" {
		t.Fatalf("the record saw %+v, read %q", seen, read)
	}

	refused := errors.New("refused")
	for what, o := range map[string]files.WriteOptions{
		"record": {Record: func(context.Context, files.Pending) error { return refused }},
		"verify": {Verify: func(files.Pending) error { return refused }},
	} {
		if _, err := area.Write(ctx, "notes/deep", "b.txt", strings.NewReader("bee"), o); !errors.Is(err, refused) {
			t.Fatalf("%s: %v", what, err)
		}
		if _, err := os.Stat(filepath.Join(area.Dir(), "notes")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: a refused write left its directory: %v", what, err)
		}
	}

	var walked []string
	if err := area.Walk(func(p string, size int64) error {
		walked = append(walked, p)
		return nil
	}); err != nil || len(walked) != 1 || walked[0] != "maps/a.txt" {
		t.Fatalf("walk: %v %v", walked, err)
	}
	if err := area.Remove("maps/a.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(area.Dir(), "maps")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the emptied directory stays: %v", err)
	}
	if err := area.Remove("maps/a.txt"); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
	if err := area.RemoveAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(area.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the area after RemoveAll: %v", err)
	}
}
