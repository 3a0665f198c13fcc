package world

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit. Writers run their functions one at a time under the write
// lock, each on top of the latest state (Engine.latest), which includes the
// transactions that are not durable yet. A finished transaction leaves the
// lock at once and waits in the commit queue; the committer goroutine
// writes every transaction waiting there in one SQLite transaction, with
// one fsync, then publishes the resulting state to readers and reports the
// changes, in order, before it answers each waiting writer. So the cost of
// an fsync is shared by every writer that came while the previous one ran,
// and readers still only ever see durable states.
//
// A writer serialises its documents and works out the changes after it
// has left the lock (see commitReq.prepare), so that writers do that in
// parallel; the committer waits for each request to be prepared, has the
// journal record it, in order, and writes the group.
//
// Each group costs about the same whatever its size (an SQLite
// transaction, its WAL frames and an fsync: some 250 µs of CPU with a
// 20 KB actor), so the fewer the groups the less CPU a write costs. When
// writers are concurrent, the committer lets more transactions join a
// group before it writes it, for at most Options.CommitDelay (see gather);
// a lone writer never waits.
//
// When the SQLite write fails, the group fails as a whole, and so does
// every transaction built on top of it since (they are all in the queue, or
// running fn under the write lock): the committer takes the write lock,
// fails everything queued, puts the latest state back to the last durable
// snapshot and gives the journal its numbers back.

// commitReq is one finished transaction waiting to be made durable.
type commitReq struct {
	meta map[string]string
	// docs are the top-level documents the transaction replaced, set
	// under the write lock; the rest is made from them by prepare.
	docs []changedDoc
	// snap is the state after this transaction (and all before it).
	snap *snapshot

	prepared chan struct{} // closed once prepare is done
	prepErr  error
	rows     []row
	changes  []Change
	// cached are the full readers' JSON of the top-level documents the
	// transaction wrote, for the JSON cache once they are published.
	cached []cachedJSON
	// fresh are the embedded documents serialised for the transaction,
	// for the engine's registry (see embeddedJSON) once committed.
	fresh []embeddedDoc
	// journal is what the journal records for the transaction, set by the
	// committer.
	journal journalBatch
	// replMeta, set by the committer on the last transaction of a
	// replicated group, records the copy's place in the world's log
	// (replicate.go), in the same SQLite transaction.
	replMeta map[string]string
	// forceBase asks the committer to replicate the world's base if it
	// has not yet (Engine.StartReplication); it writes nothing else.
	forceBase bool

	err  error
	done chan struct{} // closed once err is final
}

// cachedJSON is the JSON GetJSON would produce for a document.
type cachedJSON struct {
	uuid string
	doc  Document
	json []byte
}

// empty reports whether the request has nothing to write: a transaction
// that changed nothing (or nothing but documents it left equal) but read a
// state that was not durable yet, and so waits for it.
func (r *commitReq) empty() bool {
	return len(r.rows) == 0 && len(r.meta) == 0 && len(r.journal.records) == 0 && len(r.replMeta) == 0
}

// DefaultCommitDelay is the longest a transaction waits for others to
// join its group commit when writers are concurrent, as relay serve sets it
// (--commit-delay). Measured with relay-bench (`--only update`, 64
// connections, docs/development/performance.md), it takes about 15 % of the relay's
// CPU off each update, and BenchmarkUpdateJSON's groups grow from 6 or 7
// transactions to 12. It bounds how much longer a write may wait than it
// would without it; the committer seldom waits that long (see gather).
const DefaultCommitDelay = 500 * time.Microsecond

// gatherFull is the group size at which the committer stops waiting for
// more transactions to join (see Options.CommitDelay).
const gatherFull = 64

// committer is an engine's commit queue and the goroutine that drains it.
type committer struct {
	mu       sync.Mutex
	cond     sync.Cond // signalled when the queue grows or stopping is set
	queue    []*commitReq
	started  bool
	stopping bool
	stopped  chan struct{}

	// delay is Options.CommitDelay, and lastGroup the size of the group
	// written before (see gather).
	delay     time.Duration
	lastGroup int
	// writing counts the writers inside the engine that have not queued
	// their transaction yet (see Engine.run).
	writing int
	// gathered counts the groups the committer waited for (for tests).
	gathered atomic.Int64
}

// enqueue adds a finished transaction to the queue, starting the committer
// on first use. It is called under the write lock, so the queue's order is
// the order the transactions ran in.
func (e *Engine) enqueue(req *commitReq) {
	c := &e.commits
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		c.started = true
		c.cond.L = &c.mu
		c.stopped = make(chan struct{})
		go e.runCommitter()
	}
	c.queue = append(c.queue, req)
	c.writing--
	c.cond.Signal()
}

// beginWrite counts a writer entering the engine (see gather); the writer
// leaves by enqueueing its transaction, or else by endWrite.
func (c *committer) beginWrite() {
	c.mu.Lock()
	c.writing++
	c.mu.Unlock()
}

// endWrite counts a writer leaving the engine without a transaction to
// commit.
func (c *committer) endWrite() {
	c.mu.Lock()
	c.writing--
	c.cond.Signal()
	c.mu.Unlock()
}

// stopCommitter lets the committer write what is queued, then waits for it
// to end. Nothing may be enqueued afterwards (the engine is closed first).
func (e *Engine) stopCommitter() {
	c := &e.commits
	c.mu.Lock()
	started := c.started
	c.stopping = true
	if started {
		c.cond.Signal()
	}
	c.mu.Unlock()
	if started {
		<-c.stopped
	}
}

// runCommitter commits the queued transactions, group by group, until the
// engine closes.
func (e *Engine) runCommitter() {
	c := &e.commits
	defer close(c.stopped)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.stopping {
			c.cond.Wait()
		}
		c.gather()
		group := c.queue
		c.queue = nil
		c.lastGroup = len(group)
		c.mu.Unlock()
		if len(group) == 0 {
			return // stopping, and nothing left
		}
		e.commitGroup(group)
	}
}

// gather lets more transactions join the queued ones before they are
// written, for at most the commit delay, when writers are concurrent (the
// queue or the group before holds more than one transaction, or another
// writer is inside the engine) and the group is not full (gatherFull).
// While writers are inside the engine (waiting for the write lock or
// running their transactions), the committer waits for them to queue
// theirs; when none is, it yields the processor to the goroutines ready to
// run (requests being read and decoded on their way to the engine) for as
// long as each turn brings more transactions. So it never waits on an idle
// machine (a processor with nothing else to run hands it straight back),
// and a lone writer, whose groups hold one transaction, does not wait at
// all. c.mu is held.
func (c *committer) gather() {
	n := len(c.queue)
	if c.delay <= 0 || c.stopping || n == 0 || n >= gatherFull || n == 1 && c.lastGroup <= 1 && c.writing == 0 {
		return
	}
	c.gathered.Add(1)
	expired := false
	timer := time.AfterFunc(c.delay, func() {
		c.mu.Lock()
		expired = true
		c.cond.Signal()
		c.mu.Unlock()
	})
	defer timer.Stop()
	for !expired && !c.stopping && len(c.queue) < gatherFull {
		if c.writing > 0 {
			c.cond.Wait() // enqueue, or a writer leaving without a commit, signals
			continue
		}
		n := len(c.queue)
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
		if len(c.queue) == n && c.writing == 0 {
			return
		}
	}
}

// commitGroup writes a group of transactions in one SQLite transaction and,
// once durable, publishes them; or fails them all. The journal records
// each transaction here, in commit order, once it is prepared.
func (e *Engine) commitGroup(group []*commitReq) {
	var cause error
	for _, req := range group {
		<-req.prepared
		if req.prepErr != nil && cause == nil {
			cause = req.prepErr
		}
	}
	if cause != nil {
		e.failGroup(group, cause)
		return
	}
	if e.journal != nil {
		for _, req := range group {
			if len(req.changes) > 0 {
				req.journal.records, req.journal.keepFrom = e.journal.Record(e, req.changes, &View{snap: req.snap})
			}
		}
	}
	if e.replicator != nil {
		if e.fenced.Load() {
			e.failGroup(group, errFenced(e.info.ClientID))
			return
		}
		if err := e.replicateGroup(group); err != nil {
			e.fence(err)
			e.failGroup(group, err)
			return
		}
	}
	start := time.Now()
	err := e.store.writeGroup(context.Background(), group)
	if e.observeCommit != nil {
		e.observeCommit(time.Since(start), len(group))
	}
	if err != nil {
		if e.replicator != nil {
			// The log holds the group, this copy does not: it must be
			// brought up to the log again before it serves.
			e.fence(err)
		}
		e.failGroup(group, err)
		return
	}
	e.snap.Store(group[len(group)-1].snap)
	for _, req := range group {
		e.embedded.commit(req.changes, req.fresh)
		e.json.forget(req.changes)
		for _, c := range req.cached {
			e.json.renew(c.uuid, c.doc, c.json)
		}
	}
	for _, req := range group {
		if e.onCommit != nil && len(req.changes) > 0 {
			e.onCommit(req.changes)
		}
		close(req.done)
	}
}

// failGroup fails a group whose write failed, with every transaction built
// on top of it, and puts the latest state back to the last durable one.
func (e *Engine) failGroup(group []*commitReq, cause error) {
	// Under the write lock nobody runs on the failed state: a writer that
	// was running when the write failed has queued its transaction (or
	// given up) by the time the lock is ours.
	e.writer <- struct{}{}
	c := &e.commits
	c.mu.Lock()
	later := c.queue
	c.queue = nil
	c.mu.Unlock()
	e.latest = e.snap.Load()
	<-e.writer
	if e.journal != nil {
		e.journal.Abandon(e)
	}
	err := Wrapf(ErrUnavailable, cause, "Could not save changes to world %s", e.info.ClientID)
	var said *Error
	if errors.As(cause, &said) && errors.Is(said.Kind, ErrUnavailable) {
		// The replicator says what became of the group (not applied, or
		// unknown): the caller is told that.
		err = cause
	}
	for _, req := range group {
		req.err = err
		if req.prepErr != nil {
			req.err = req.prepErr
		}
		close(req.done)
	}
	for _, req := range later {
		<-req.prepared
		req.err = Errorf(ErrUnavailable, "Could not save changes to world %s: a change it built on could not be saved", e.info.ClientID)
		close(req.done)
	}
}
