package world

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatherWorld is a test world with a commit delay whose group commits are
// recorded by size.
type gatherWorld struct {
	*Engine
	mu     sync.Mutex
	groups []int
}

func newGatherWorld(t *testing.T, delay time.Duration) *gatherWorld {
	t.Helper()
	gw := &gatherWorld{}
	opts := testOptions()
	opts.CommitDelay = delay
	opts.ObserveCommit = func(_ time.Duration, n int) {
		gw.mu.Lock()
		gw.groups = append(gw.groups, n)
		gw.mu.Unlock()
	}
	h, err := OpenHost(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	w, err := h.Create(context.Background(), "test", testSeed())
	if err != nil {
		t.Fatal(err)
	}
	gw.Engine = w
	return gw
}

func (gw *gatherWorld) groupSizes() []int {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return slices.Clone(gw.groups)
}

// writing returns how many writers are inside the engine without a queued
// transaction.
func (e *Engine) writing() int {
	e.commits.mu.Lock()
	defer e.commits.mu.Unlock()
	return e.commits.writing
}

// holdWriteLock starts a transaction that keeps the write lock until
// release is closed, then increments the counter; its error arrives on the
// returned channel.
func holdWriteLock(ctx context.Context, t *testing.T, e *Engine, release <-chan struct{}) <-chan error {
	t.Helper()
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Mutate(ctx, func(tx *Tx) error {
			close(held)
			<-release
			doc, err := tx.Get(actorOwner)
			if err != nil {
				return err
			}
			n, _ := number(doc["flags"].(map[string]any)["counter"])
			_, err = tx.Update(actorOwner, Document{"flags.counter": n + 1})
			return err
		})
	}()
	<-held
	return done
}

// TestCommitDelayGathersConcurrentWriters: with a commit delay, the
// committer waits for the writers already inside the engine (here queued
// behind a transaction that holds the write lock) and writes them all in
// one group commit, far sooner than the delay; each write is durable and
// counted once.
func TestCommitDelayGathersConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An hour: the test would time out rather than pass if the committer
	// waited for the delay instead of for the writers.
	gw := newGatherWorld(t, time.Hour)
	const writers = 8
	release := make(chan struct{})
	first := holdWriteLock(ctx, t, gw.Engine, release)
	errs := make(chan error, writers)
	for range writers - 1 {
		go func() {
			_, err := increment(ctx, gw.Engine)
			errs <- err
		}()
	}
	waitFor(t, "the writers to enter the engine", func() bool { return gw.writing() == writers })
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range writers - 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := gw.groupSizes(); !slices.Equal(got, []int{writers}) {
		t.Errorf("groups %v, want one of %d", got, writers)
	}
	if got := num(t, mustGet(t, gw, actorOwner), "flags.counter"); got != writers {
		t.Errorf("counter = %v, want %d", got, writers)
	}
	if got := gw.commits.gathered.Load(); got != 1 {
		t.Errorf("the committer gathered %d groups, want 1", got)
	}
}

// TestCommitDelayLoneWriterDoesNotWait: a writer alone never waits for
// company, whatever the delay: each of its transactions is written in a
// group of its own at once.
func TestCommitDelayLoneWriterDoesNotWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gw := newGatherWorld(t, time.Hour)
	for range 5 {
		if _, err := increment(ctx, gw.Engine); err != nil {
			t.Fatal(err)
		}
	}
	if got := gw.groupSizes(); !slices.Equal(got, []int{1, 1, 1, 1, 1}) {
		t.Errorf("groups %v, want five of one", got)
	}
	if got := gw.commits.gathered.Load(); got != 0 {
		t.Errorf("the committer waited for company %d times, want 0", got)
	}
}

// TestCommitDelayWriterLeavingWithoutCommit: a writer that the committer
// waits for and whose transaction fails (or changes nothing) releases the
// wait: the group is written without it, and the engine still closes.
func TestCommitDelayWriterLeavingWithoutCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gw := newGatherWorld(t, time.Hour)
	release := make(chan struct{})
	first := holdWriteLock(ctx, t, gw.Engine, release)
	refused := errors.New("refused")
	failed := make(chan error, 1)
	go func() { failed <- gw.Mutate(ctx, func(*Tx) error { return refused }) }()
	unchanged := make(chan error, 1)
	go func() { unchanged <- gw.Mutate(ctx, func(*Tx) error { return nil }) }()
	waitFor(t, "the writers to enter the engine", func() bool { return gw.writing() == 3 })
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-failed; !errors.Is(err, refused) {
		t.Errorf("failing transaction: %v", err)
	}
	if err := <-unchanged; err != nil {
		t.Errorf("empty transaction: %v", err)
	}
	// The transaction that changed nothing read the first one's change
	// before it was durable, so it waits for the same commit.
	if got := gw.groupSizes(); !slices.Equal(got, []int{2}) {
		t.Errorf("groups %v, want one of 2", got)
	}
	if got := gw.writing(); got != 0 {
		t.Errorf("%d writers still counted in the engine", got)
	}
	// Closing stops a committer that would wait: it must not hang.
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStoredRowsLeaveOutUUID: a commit's rows are cut from the full
// readers' JSON when written: what the database holds for each document a
// group wrote is encoding/json's output of the document alone, without its
// uuid, whether the uuid member sorted last or before another key.
func TestStoredRowsLeaveOutUUID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gw := newGatherWorld(t, 0)
	// The owner's actor has no key sorting after "uuid" until the
	// second update gives it one.
	docs := []struct {
		name  string
		extra Document
	}{
		{"uuid last", Document{"name": "Last"}},
		{"uuid before zz", Document{"name": "Mid", "zz": 1.0}},
	}
	for _, d := range docs {
		name := d.name
		err := gw.Mutate(ctx, func(tx *Tx) error {
			_, err := tx.Update(actorOwner, d.extra)
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := referenceJSON(t, map[string]any(mustStored(t, gw.Engine, actorOwner)))
		var got string
		if err := gw.store.db.QueryRow("SELECT data FROM documents WHERE collection = 'Actor' AND id = ?", strings.TrimPrefix(actorOwner, "Actor.")).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s: stored\n%s\nwant\n%s", name, got, want)
		}
	}
}

// mustStored returns the engine's stored version of a top-level document
// (without its uuid).
func mustStored(t *testing.T, e *Engine, uuid string) Document {
	t.Helper()
	var doc Document
	if err := e.Mutate(context.Background(), func(tx *Tx) error {
		_, _, d, err := tx.View().find(uuid)
		if err != nil {
			return err
		}
		doc = d
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return doc
}

// windowJournal numbers one record per change and keeps the last size.
type windowJournal struct {
	mu       sync.Mutex
	recorded uint64
	size     uint64
}

func (j *windowJournal) Record(e *Engine, changes []Change, after *View) ([]JournalRecord, uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var records []JournalRecord
	for range changes {
		j.recorded++
		records = append(records, JournalRecord{Seq: j.recorded, Data: []byte("x")})
	}
	var keepFrom uint64
	if j.recorded > j.size {
		keepFrom = j.recorded - j.size + 1
	}
	return records, keepFrom
}

func (j *windowJournal) Abandon(e *Engine) {}

// TestJournalTrimmedInBatches: the records below the journal's window are
// deleted in batches: the journal always holds its window, and never more
// than a batch besides.
func TestJournalTrimmedInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := &windowJournal{size: 10}
	opts := testOptions()
	opts.Journal = j
	h, err := OpenHost(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	w, err := h.Create(ctx, "test", testSeed())
	if err != nil {
		t.Fatal(err)
	}
	sawTrim := false
	for i := range 3*journalTrimBatch + 20 {
		if _, err := increment(ctx, w); err != nil {
			t.Fatal(err)
		}
		seqs := storedJournal(t, w)
		last := uint64(i + 1)
		if len(seqs) == 0 || seqs[len(seqs)-1] != last {
			t.Fatalf("after %d writes the journal ends at %v", last, seqs)
		}
		window := min(last, 10)
		if n := uint64(len(seqs)); n < window || n > window+journalTrimBatch {
			t.Fatalf("after %d writes the journal holds %d records, want %d to %d", last, n, window, window+journalTrimBatch)
		}
		sawTrim = sawTrim || last > journalTrimBatch+10 && len(seqs) < journalTrimBatch
	}
	if !sawTrim {
		t.Error("old records were never deleted")
	}
}
