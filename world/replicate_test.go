package world

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

// memLog is a replicated log in memory that checks the expected last
// sequence of every append, as the cluster's stream does.
type memLog struct {
	mu      sync.Mutex
	records [][]byte
	failing error
	fenced  []error
}

func (l *memLog) Append(clientID string, last uint64, record []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing != nil {
		return 0, l.failing
	}
	if last != uint64(len(l.records)) {
		return 0, fmt.Errorf("wrong last sequence: %d, the log holds %d", last, len(l.records))
	}
	l.records = append(l.records, append([]byte(nil), record...))
	return uint64(len(l.records)), nil
}

func (l *memLog) Fenced(clientID string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fenced = append(l.fenced, err)
}

func (l *memLog) snapshot() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.records...)
}

// applyAll applies the records from the replica's next one on.
func applyAll(t *testing.T, r *Replica, records [][]byte) {
	t.Helper()
	for i := r.Seq(); i < uint64(len(records)); i++ {
		if err := r.Apply(i+1, records[i]); err != nil {
			t.Fatalf("apply record %d: %v", i+1, err)
		}
	}
}

// TestReplicaFollowsTheEngine checks that a copy built from an engine's
// log alone, base and groups, holds every committed write, its settings
// and its journal, and opens as the same world; and that concurrent
// writers' groups reach it in commit order.
func TestReplicaFollowsTheEngine(t *testing.T) {
	ctx := context.Background()
	log := &memLog{}
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
	if err := w.StartReplication(ctx); err != nil {
		t.Fatal(err)
	}
	base := len(log.snapshot())
	if base == 0 {
		t.Fatal("no base in the log after StartReplication")
	}
	// A follower starts from the base alone.
	path := filepath.Join(t.TempDir(), "copy", "world.db")
	r, err := OpenReplica(path)
	if err != nil {
		t.Fatal(err)
	}
	applyAll(t, r, log.snapshot())
	if !r.Complete() {
		t.Fatal("copy not complete after the base")
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				_, err := w.Update(ctx, nil, actorOwner, Document{"name": fmt.Sprintf("w%d-%d", i, j), "system": Document{"attributes": Document{"hp": Document{"value": float64(i*100 + j)}}}})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if _, err := w.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"_id": "ReplicaActor0001", "name": "Copied", "type": "npc"}, KeepID: true}); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, nil, actorBob); err != nil {
		t.Fatal(err)
	}
	applyAll(t, r, log.snapshot())
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// The copy opens as the world, with the host's documents.
	h2, err := OpenHost(t.TempDir(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if err := h2.Adopt("test", filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	c, err := h2.World(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, uuid := range []string{actorOwner, actorNone, "Actor.ReplicaActor0001", sceneUUID} {
		if !reflect.DeepEqual(mustGet(t, w, uuid), mustGet(t, c, uuid)) {
			t.Fatalf("%s differs on the copy", uuid)
		}
	}
	if _, err := c.Get(ctx, nil, actorBob); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted actor on the copy: %v", err)
	}
	if c.Info() != w.Info() {
		t.Fatalf("info %+v, want %+v", c.Info(), w.Info())
	}
	// The copy continues the log where the host left it.
	if c.replSeq != uint64(len(log.snapshot())) {
		t.Fatalf("copy at %d, log at %d", c.replSeq, len(log.snapshot()))
	}
}

// TestEngineFencedByTheLog checks that an engine whose append is refused
// (another node appended meanwhile) fails the write, stops serving the
// world, says so once, and never writes the group to its own file.
func TestEngineFencedByTheLog(t *testing.T) {
	ctx := context.Background()
	log := &memLog{}
	opts := testOptions()
	opts.Replicator = log
	dir := t.TempDir()
	h, err := OpenHost(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := h.Create(ctx, "test", testSeed())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Update(ctx, nil, actorOwner, Document{"name": "Before"}); err != nil {
		t.Fatal(err)
	}
	// Another node takes the world over.
	log.mu.Lock()
	log.records = append(log.records, MarkerRecord())
	log.mu.Unlock()
	_, err = w.Update(ctx, nil, actorOwner, Document{"name": "After"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write after the take-over: %v", err)
	}
	if _, err := w.Get(ctx, nil, actorOwner); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read after the fence: %v", err)
	}
	if _, err := w.Update(ctx, nil, actorOwner, Document{"name": "Later"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("second write after the fence: %v", err)
	}
	if len(log.fenced) != 1 {
		t.Fatalf("fenced told %d times", len(log.fenced))
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	again := reopenAt(t, dir)
	if got := mustGet(t, again, actorOwner)["name"]; got != "Before" {
		t.Fatalf("name on disk %v, want Before", got)
	}
}

// TestReplicaSnapshotAndRestore checks that a snapshot of a copy holds
// the world as of the copy's last record, that another copy restored
// from it continues with the log's later records and ends equal to the
// engine, and that a snapshot naming another record, or a copy without
// a whole base, is refused without touching the copy.
func TestReplicaSnapshotAndRestore(t *testing.T) {
	ctx := context.Background()
	log := &memLog{}
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
	if err := w.StartReplication(ctx); err != nil {
		t.Fatal(err)
	}
	write := func(name string) {
		t.Helper()
		if _, err := w.Update(ctx, nil, actorOwner, Document{"name": name}); err != nil {
			t.Fatal(err)
		}
	}
	write("before the snapshot")
	dir := t.TempDir()
	src, err := OpenReplica(filepath.Join(dir, "src", "world.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	empty, err := OpenReplica(filepath.Join(dir, "empty", "world.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if err := empty.Snapshot(ctx, filepath.Join(dir, "nothing.db")); err == nil {
		t.Fatal("a copy without a base made a snapshot")
	}
	applyAll(t, src, log.snapshot())
	at := src.Seq()
	snap := filepath.Join(dir, "snap.db")
	if err := src.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	write("after the snapshot")

	// A follower with an empty copy: a snapshot that does not hold the
	// record it is said to hold is refused, and the copy stays empty.
	dst, err := OpenReplica(filepath.Join(dir, "dst", "world.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(snap, at+1); err == nil {
		t.Fatal("a snapshot restored as a later record")
	}
	if dst.Seq() != 0 || dst.Complete() {
		t.Fatalf("refused restore changed the copy: seq %d, whole %v", dst.Seq(), dst.Complete())
	}
	if err := dst.Restore(snap, at); err != nil {
		t.Fatal(err)
	}
	if dst.Seq() != at || !dst.Complete() {
		t.Fatalf("restored copy at %d (whole %v), want %d", dst.Seq(), dst.Complete(), at)
	}
	// Only the tail after the snapshot is applied.
	applyAll(t, dst, log.snapshot())
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	h2, err := OpenHost(t.TempDir(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if err := h2.Adopt("test", filepath.Join(dir, "dst")); err != nil {
		t.Fatal(err)
	}
	c, err := h2.World(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, c, actorOwner)["name"]; got != "after the snapshot" {
		t.Fatalf("restored copy's actor name %v", got)
	}
	if !reflect.DeepEqual(mustGet(t, w, sceneUUID), mustGet(t, c, sceneUUID)) {
		t.Fatal("the scene differs on the restored copy")
	}
}
