package world

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// seqJournal is a Journal numbering one record per change, like the event
// hub: each transaction after the last one recorded, given back on Abandon.
type seqJournal struct {
	mu        sync.Mutex
	committed uint64 // the last sequence committed (OnCommit)
	recorded  uint64 // the last sequence numbered
	pending   []uint64
	abandoned int
	errs      []string
}

func (j *seqJournal) Record(e *Engine, changes []Change, after *View) ([]JournalRecord, uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var records []JournalRecord
	for _, c := range changes {
		// The view is the world as the transaction leaves it, even while
		// the transactions before it are not durable yet.
		if doc, err := after.Get(c.UUID); (err == nil) != (c.After != nil) || err == nil && !cmp.Equal(doc, c.After) {
			j.errs = append(j.errs, fmt.Sprintf("%s in the view given to Record is %v, want %v", c.UUID, doc, c.After))
		}
		j.recorded++
		records = append(records, JournalRecord{Seq: j.recorded, Data: []byte(c.UUID)})
	}
	j.pending = append(j.pending, j.recorded)
	return records, 0
}

func (j *seqJournal) Abandon(e *Engine) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pending = nil
	j.recorded = j.committed
	j.abandoned++
}

// commit is the OnCommit side: transactions must come in the order they
// were recorded.
func (j *seqJournal) commit(changes []Change) {
	j.mu.Lock()
	defer j.mu.Unlock()
	want := j.committed + uint64(len(changes))
	if len(j.pending) == 0 || j.pending[0] != want {
		j.errs = append(j.errs, fmt.Sprintf("committed up to %d, pending %v", want, j.pending))
		return
	}
	j.pending = j.pending[1:]
	j.committed = want
}

// journalWorld is a test world with a journal, a commit log and a hook on
// the store's writes.
type journalWorld struct {
	*Engine
	dir     string
	journal *seqJournal
	log     *commitLog

	mu     sync.Mutex
	groups []int // sizes of the groups written (or attempted)
	hook   func(n int) error
}

func newJournalWorld(t *testing.T) *journalWorld {
	t.Helper()
	jw := &journalWorld{dir: t.TempDir(), journal: &seqJournal{}, log: &commitLog{}}
	opts := testOptions()
	opts.Journal = jw.journal
	opts.OnCommit = func(changes []Change) {
		jw.journal.commit(changes)
		jw.log.record(changes)
	}
	h, err := OpenHost(jw.dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := h.Create(context.Background(), "test", testSeed())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	jw.Engine = w
	// Set before the first write starts the committer; changed only
	// through jw.mu afterwards.
	jw.store.failWrite = func(group []*commitReq) error {
		jw.mu.Lock()
		jw.groups = append(jw.groups, len(group))
		n, hook := len(jw.groups), jw.hook
		jw.mu.Unlock()
		if hook != nil {
			return hook(n)
		}
		return nil
	}
	return jw
}

func (jw *journalWorld) setHook(hook func(n int) error) {
	jw.mu.Lock()
	defer jw.mu.Unlock()
	jw.hook = hook
}

func (jw *journalWorld) groupSizes() []int {
	jw.mu.Lock()
	defer jw.mu.Unlock()
	return slices.Clone(jw.groups)
}

// queued returns how many transactions wait for the committer.
func (e *Engine) queued() int {
	e.commits.mu.Lock()
	defer e.commits.mu.Unlock()
	return len(e.commits.queue)
}

// waitFor polls cond until it holds; after a while it fails the test
// (without stopping it: hooks call it on the committer's goroutine) and
// returns false.
func waitFor(t *testing.T, what string, cond func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// storedJournal reads the journal's sequence numbers from the database.
func storedJournal(t *testing.T, e *Engine) []uint64 {
	t.Helper()
	var seqs []uint64
	if err := e.ReadJournal(context.Background(), 0, func(r JournalRecord) error {
		seqs = append(seqs, r.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// increment adds 1 to a counter flag of the owner's actor and returns the
// value it wrote.
func increment(ctx context.Context, e *Engine) (int, error) {
	var wrote int
	err := e.Mutate(ctx, func(tx *Tx) error {
		doc, err := tx.Get(actorOwner)
		if err != nil {
			return err
		}
		n, _ := number(doc["flags"].(map[string]any)["counter"])
		wrote = int(n) + 1
		_, err = tx.Update(actorOwner, Document{"flags.counter": wrote})
		return err
	})
	return wrote, err
}

// TestGroupCommit: writers that come while a commit runs are written
// together in the next group; every one is durable, reported once and in
// order, and readers see each change once its Mutate has returned.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jw := newJournalWorld(t)
	const writers = 32

	// The first group waits until every other writer is queued behind it.
	jw.setHook(func(n int) error {
		if n == 1 {
			waitFor(t, "the queue", func() bool { return jw.queued() == writers-1 })
		}
		return nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i > 0 {
				waitFor(t, "the first group", func() bool { return len(jw.groupSizes()) > 0 })
			}
			wrote, err := increment(ctx, jw.Engine)
			if err != nil {
				errs <- err
				return
			}
			// Read-your-writes: the change is visible once Mutate returns.
			doc := mustGet(t, jw, actorOwner)
			if got := num(t, doc, "flags.counter"); got < float64(wrote) {
				errs <- fmt.Errorf("read %v after writing %d", got, wrote)
			}
			raw, err := jw.GetJSON(ctx, nil, actorOwner)
			if err != nil {
				errs <- err
				return
			}
			if !containsCounterAtLeast(raw, wrote) {
				errs <- fmt.Errorf("GetJSON after writing %d: %s", wrote, raw)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := jw.groupSizes(); !slices.Equal(got, []int{1, writers - 1}) {
		t.Errorf("groups %v, want [1 %d]", got, writers-1)
	}
	// OnCommit saw every transaction once, in commit order.
	var counters []float64
	for _, changes := range jw.log.all() {
		if len(changes) != 1 || changes[0].UUID != actorOwner {
			t.Fatalf("changes %+v", changes)
		}
		counters = append(counters, num(t, changes[0].After, "flags.counter"))
	}
	if len(counters) != writers {
		t.Fatalf("%d commits reported, want %d", len(counters), writers)
	}
	for i, c := range counters {
		if c != float64(i+1) {
			t.Fatalf("commit %d reported counter %v: %v", i, c, counters)
		}
	}
	if len(jw.journal.errs) > 0 {
		t.Errorf("journal order: %v", jw.journal.errs)
	}
	if got := storedJournal(t, jw.Engine); len(got) != writers || got[0] != 1 || got[writers-1] != writers {
		t.Errorf("journal %v, want 1..%d", got, writers)
	}
	// Durable: the reopened world holds the last value.
	if err := jw.Close(); err != nil {
		t.Fatal(err)
	}
	reopened := reopenAt(t, jw.dir)
	if got := num(t, mustGet(t, reopened, actorOwner), "flags.counter"); got != writers {
		t.Errorf("reopened counter = %v, want %d", got, writers)
	}
}

// containsCounterAtLeast reports whether the JSON of the owner's actor
// holds a counter of at least n.
func containsCounterAtLeast(raw []byte, n int) bool {
	var doc struct {
		Flags struct{ Counter int } `json:"flags"`
	}
	return json.Unmarshal(raw, &doc) == nil && doc.Flags.Counter >= n
}

// reopenAt opens the test world in dir again.
func reopenAt(t *testing.T, dir string) *Engine {
	t.Helper()
	h, err := OpenHost(dir, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	w, err := h.World(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestReadersSeeOnlyDurableStates: while a commit is being written, readers
// see the state before it and the next writer builds on it.
func TestReadersSeeOnlyDurableStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jw := newJournalWorld(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Close, on failure
	jw.setHook(func(n int) error {
		if n == 1 {
			<-release
		}
		return nil
	})
	first := make(chan error, 1)
	go func() {
		_, err := increment(ctx, jw.Engine)
		first <- err
	}()
	if !waitFor(t, "the first write", func() bool { return len(jw.groupSizes()) == 1 }) {
		return
	}
	if doc := mustGet(t, jw, actorOwner); doc["flags"].(Document)["counter"] != nil {
		t.Errorf("a reader saw a change not yet durable: %v", doc["flags"])
	}
	second := make(chan int, 1)
	go func() {
		wrote, err := increment(ctx, jw.Engine)
		if err != nil {
			t.Error(err)
		}
		second <- wrote
	}()
	if !waitFor(t, "the second write", func() bool { return jw.queued() == 1 }) {
		return
	}
	once.Do(func() { close(release) })
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if wrote := <-second; wrote != 2 {
		t.Errorf("the second writer wrote %d, want 2 (built on the first)", wrote)
	}
	if got := num(t, mustGet(t, jw, actorOwner), "flags.counter"); got != 2 {
		t.Errorf("counter = %v, want 2", got)
	}
}

// TestFailedGroupFailsEverythingBuiltOnIt: when a group's write fails, its
// members fail, and so do the transactions queued behind it and the one
// running on top of it at that moment; the world goes back to its last
// durable state, the journal gets its numbers back, and later writes work.
func TestFailedGroupFailsEverythingBuiltOnIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jw := newJournalWorld(t)
	if _, err := increment(ctx, jw.Engine); err != nil { // group 1: durable
		t.Fatal(err)
	}

	const members = 5
	inFn := make(chan struct{})
	releaseFn := make(chan struct{})
	lateErr := make(chan error, 1)
	jw.setHook(func(n int) error {
		switch n {
		case 2: // one transaction, held while the next ones queue
			waitFor(t, "the queue", func() bool { return jw.queued() == members })
		case 3: // the group of members: fails, while a writer runs on top of it
			go func() {
				lateErr <- jw.Mutate(ctx, func(tx *Tx) error {
					close(inFn)
					<-releaseFn
					_, err := tx.Update(actorBob, Document{"name": "Late"})
					return err
				})
			}()
			<-inFn
			go func() {
				time.Sleep(20 * time.Millisecond)
				close(releaseFn)
			}()
			return errors.New("disk on fire")
		}
		return nil
	})
	var wg sync.WaitGroup
	results := make(chan error, members+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := increment(ctx, jw.Engine)
		results <- err
	}()
	if !waitFor(t, "the second group", func() bool { return len(jw.groupSizes()) == 2 }) {
		t.FailNow()
	}
	for i := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Some write the counter, one changes nothing but read the
			// failed state, one deletes.
			var err error
			switch i {
			case 0:
				err = jw.Mutate(ctx, func(tx *Tx) error {
					_, err := tx.Get(actorOwner)
					return err
				})
				if err == nil {
					err = errors.New("no error") // counted below as a wrong kind
				}
			case 1:
				err = jw.Mutate(ctx, func(tx *Tx) error { return tx.Delete(potionUUID) })
			default:
				_, err = increment(ctx, jw.Engine)
			}
			results <- err
		}()
	}
	wg.Wait()
	close(results)
	var ok, failed int
	for err := range results {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrUnavailable):
			failed++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	// The read-only member read group 2's state before it was durable, so
	// it waited for it with the members, and failed with them.
	if ok != 1 || failed != members {
		t.Errorf("%d succeeded, %d failed; want group 2 to succeed and the %d members behind it to fail", ok, failed, members)
	}
	if err := <-lateErr; !errors.Is(err, ErrUnavailable) {
		t.Errorf("the writer running on the failed state: %v, want ErrUnavailable", err)
	}
	if got := jw.groupSizes(); len(got) != 3 || got[2] != members {
		t.Errorf("groups %v, want the members written together", got)
	}
	// Back to the last durable state: group 2's counter, the potion kept.
	if got := num(t, mustGet(t, jw, actorOwner), "flags.counter"); got != 2 {
		t.Errorf("counter = %v, want 2", got)
	}
	if _, err := jw.Get(ctx, nil, potionUUID); err != nil {
		t.Errorf("the potion whose deletion failed: %v", err)
	}
	if got := len(jw.log.all()); got != 2 {
		t.Errorf("OnCommit called %d times, want 2", got)
	}
	if jw.journal.abandoned != 1 {
		t.Errorf("journal abandoned %d times, want 1", jw.journal.abandoned)
	}

	// Later writes work, build on the durable state and continue the
	// journal without a gap.
	jw.setHook(nil)
	if wrote, err := increment(ctx, jw.Engine); err != nil || wrote != 3 {
		t.Fatalf("increment after the failure: %d, %v; want 3", wrote, err)
	}
	if got := storedJournal(t, jw.Engine); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("journal %v, want [1 2 3]", got)
	}
	if len(jw.journal.errs) > 0 {
		t.Errorf("journal order: %v", jw.journal.errs)
	}
	want := allDocs(jw.Engine)
	if err := jw.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, allDocs(reopenAt(t, jw.dir))); diff != "" {
		t.Errorf("disk differs from memory:\n%s", diff)
	}
}

// TestCloseWaitsForCommits: Close lets the queued commits finish, later
// writes fail, and no goroutine is left behind.
func TestCloseWaitsForCommits(t *testing.T) {
	ctx := context.Background()
	before := runtime.NumGoroutine()
	jw := newJournalWorld(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Close, on failure
	jw.setHook(func(n int) error {
		if n == 1 {
			<-release
		}
		return nil
	})
	const writers = 8
	errs := make(chan error, writers)
	for range writers {
		go func() {
			_, err := increment(ctx, jw.Engine)
			errs <- err
		}()
	}
	if !waitFor(t, "the queue", func() bool {
		g := jw.groupSizes()
		return len(g) == 1 && g[0]+jw.queued() == writers
	}) {
		return
	}
	closed := make(chan error, 1)
	go func() { closed <- jw.Close() }()
	if !waitFor(t, "Close to shut writers out", func() bool { return jw.closed.Load() }) {
		return
	}
	once.Do(func() { close(release) })
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Errorf("a queued write failed on Close: %v", err)
		}
	}
	if _, err := increment(ctx, jw.Engine); !errors.Is(err, ErrUnavailable) {
		t.Errorf("write after Close: %v, want ErrUnavailable", err)
	}
	if got := num(t, mustGet(t, reopenAt(t, jw.dir), actorOwner), "flags.counter"); got != writers {
		t.Errorf("reopened counter = %v, want %d", got, writers)
	}
	waitFor(t, "the committers to end", func() bool { return runtime.NumGoroutine() <= before+1 })
}

// TestCommitRenewsReadersJSON: a commit leaves the JSON of a document that
// readers have had serialised ready for them, made once by the commit, and
// leaves documents nobody read out of the cache.
func TestCommitRenewsReadersJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	if _, err := tw.GetJSON(ctx, nil, actorOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"name": "Renewed"}); err != nil {
		t.Fatal(err)
	}
	created, err := tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"name": "Unread"}})
	if err != nil {
		t.Fatal(err)
	}
	var stored, fresh Document
	tw.View(ctx, func(v *View) error {
		stored, _ = v.Get(actorOwner)
		fresh, _ = v.Get(created["uuid"].(string))
		return nil
	})
	raw, ok := tw.json.cached(actorOwner, stored)
	if !ok {
		t.Fatal("the committed version of a read document is not in the cache")
	}
	if want := referenceJSON(t, fullData(actorOwner, stored)); !bytes.Equal(raw, want) {
		t.Errorf("cached JSON\n%s\nwant\n%s", raw, want)
	}
	if got, _ := tw.GetJSON(ctx, nil, actorOwner); &got[0] != &raw[0] {
		t.Error("GetJSON serialised the document again")
	}
	if _, ok := tw.json.entries.Load(created["uuid"].(string)); ok || fresh == nil {
		t.Error("a created document nobody read is in the cache")
	}
}
