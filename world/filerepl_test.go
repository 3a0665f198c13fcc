package world

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// memFiles is a replicated log with a file store in memory.
type memFiles struct {
	memLog
	objects sync.Map // name -> []byte
	refuse  error
}

func (m *memFiles) PutFile(_ context.Context, _, object string, size int64, r io.Reader) error {
	if m.refuse != nil {
		return m.refuse
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if int64(len(b)) != size {
		return errors.New("size differs")
	}
	m.objects.Store(object, b)
	return nil
}

func (m *memFiles) DeleteFile(_ context.Context, _, object string) error {
	m.objects.Delete(object)
	return nil
}

func (m *memFiles) count() int {
	n := 0
	m.objects.Range(func(any, any) bool { n++; return true })
	return n
}

func record(t *testing.T, w *Engine, path, content string) {
	t.Helper()
	open := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(content)), nil }
	if err := w.RecordFile(context.Background(), path, "sha256:test-"+content, int64(len(content)), open); err != nil {
		t.Fatalf("record %s: %v", path, err)
	}
}

// manifest lists an engine's file manifest as path -> size.
func manifest(t *testing.T, w *Engine) map[string]FileRecord {
	t.Helper()
	out := map[string]FileRecord{}
	if err := w.RecordedFiles(context.Background(), func(r FileRecord) error {
		out[r.Path] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFilesRecordedInTheLog checks that recorded files are in the world's
// log and manifest, that a replaced file's object is deleted, that a
// removal drops the manifest's entry, that a new base carries the manifest
// (FileChanges restarts the copy's area and lists every file), and that a
// file whose object cannot be stored is not recorded.
func TestFilesRecordedInTheLog(t *testing.T) {
	ctx := context.Background()
	log := &memFiles{}
	opts := testOptions()
	opts.Replicator = log
	h, err := OpenHost(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	w, err := h.Create(ctx, "test", testSeed())
	if err != nil {
		t.Fatal(err)
	}
	if !w.ReplicatesFiles() {
		t.Fatal("an engine with a file store does not replicate files")
	}
	record(t, w, "maps/a.png", "first")
	record(t, w, "maps/a.png", "second")
	record(t, w, "notes/b.txt", "bee")
	if n := log.count(); n != 2 {
		t.Fatalf("%d objects after an overwrite, want 2", n)
	}
	m := manifest(t, w)
	if len(m) != 2 || m["maps/a.png"].Digest != "sha256:test-second" || m["notes/b.txt"].Size != 3 {
		t.Fatalf("manifest: %+v", m)
	}
	// The log's last records name the files in order.
	records := log.snapshot()
	var changes []FileRecord
	for _, rec := range records {
		c, _, err := FileChanges(rec)
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, c...)
	}
	if len(changes) != 3 || changes[0].Path != "maps/a.png" || changes[1].Digest != "sha256:test-second" || changes[2].Path != "notes/b.txt" {
		t.Fatalf("file changes in the log: %+v", changes)
	}

	// A removal drops the entry, in the log too.
	if err := w.recordFiles(ctx, FileRecord{Path: "notes/b.txt"}); err != nil {
		t.Fatal(err)
	}
	if m := manifest(t, w); len(m) != 1 {
		t.Fatalf("manifest after a removal: %+v", m)
	}
	records = log.snapshot()
	c, restart, err := FileChanges(records[len(records)-1])
	if err != nil || restart || len(c) != 1 || c[0].Object != "" || c[0].Path != "notes/b.txt" {
		t.Fatalf("the removal's record: %+v %v %v", c, restart, err)
	}

	// A copy built from the log holds the manifest; a new base carries it.
	rep, err := OpenReplica(filepath.Join(t.TempDir(), "copy.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	applyAll(t, rep, records)
	if err := w.replicateBase(); err != nil {
		t.Fatal(err)
	}
	records = log.snapshot()
	c, restart, err = FileChanges(records[len(records)-1])
	if err != nil || !restart || len(c) != 1 || c[0].Path != "maps/a.png" || c[0].Digest != "sha256:test-second" {
		t.Fatalf("the new base's files: %+v %v %v", c, restart, err)
	}

	// A file store that refuses: nothing is recorded.
	log.refuse = errors.New("no room")
	open := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("x")), nil }
	if err := w.RecordFile(ctx, "maps/c.png", "sha256:x", 1, open); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a refused file: %v", err)
	}
	if _, ok := manifest(t, w)["maps/c.png"]; ok {
		t.Fatal("a refused file is in the manifest")
	}
}

// TestFilesNotReplicatedAlone checks that an engine without a file store
// records nothing.
func TestFilesNotReplicatedAlone(t *testing.T) {
	h, err := OpenHost(t.TempDir(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	w, err := h.Create(context.Background(), "test", testSeed())
	if err != nil {
		t.Fatal(err)
	}
	if w.ReplicatesFiles() {
		t.Fatal("a lone engine replicates files")
	}
	record(t, w, "a.txt", "alone")
	if m := manifest(t, w); len(m) != 0 {
		t.Fatalf("manifest of a lone world: %+v", m)
	}
}
