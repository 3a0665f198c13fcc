package world

import (
	"context"
	"math"
)

// This file lets a listener of committed changes (the event hub) keep its
// own records in the world's database, atomically with the changes they
// describe, and judge who may read a document as it was at the time.

// Journal keeps records about committed changes in the world's database.
// Its records are written in the same SQLite transaction as the documents
// they describe: a change is durable exactly when its records are.
//
// Several transactions may be recorded before the first of them is
// committed (see [Engine.Mutate]): Record numbers each one after the last
// one recorded, the transactions then commit in the order they were
// recorded (Options.OnCommit and Host.Watch see them in that order), or,
// when a commit fails, Abandon withdraws every recorded transaction not
// committed yet.
type Journal interface {
	// Record is called by the world's committer for every transaction
	// that changed something, one at a time and in commit order, just
	// before the SQLite transaction that writes it, with the changes
	// Options.OnCommit will receive once it is committed (the same slice),
	// and a view of the world as the transaction leaves it (after, which
	// includes every transaction recorded before it), so that the records
	// can describe the documents the changes refer to as they are at that
	// moment. It returns the records to insert and the lowest sequence
	// number to keep: older records are deleted in the same SQLite
	// transaction, or, a few hundred at a time, in a later one (0 keeps
	// them all). Record must not block on writers of
	// this world; it may read the journal with [Engine.ReadJournal].
	Record(e *Engine, changes []Change, after *View) (records []JournalRecord, keepFrom uint64)
	// Abandon is called by the committer when a commit failed: every
	// transaction recorded and not yet committed is lost (none of its
	// records were written), and the next one recorded should take the
	// numbers they held.
	Abandon(e *Engine)
}

// JournalRecord is one journal entry: a sequence number, unique and
// increasing, and opaque data.
type JournalRecord struct {
	Seq  uint64
	Data []byte
}

// journalBatch is what one commit adds to the journal.
type journalBatch struct {
	records  []JournalRecord
	keepFrom uint64
}

// ReadJournal calls fn with every journal record whose sequence is at
// least from, in sequence order, until fn returns an error.
func (e *Engine) ReadJournal(ctx context.Context, from uint64, fn func(JournalRecord) error) error {
	if err := e.ready(); err != nil {
		return err
	}
	rows, err := e.store.db.QueryContext(ctx, "SELECT seq, data FROM journal WHERE seq >= ? ORDER BY seq", clampSeq(from))
	if err != nil {
		return Wrapf(ErrUnavailable, err, "Could not read the journal of world %s", e.info.ClientID)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var data []byte
		if err := rows.Scan(&seq, &data); err != nil {
			return Wrapf(ErrUnavailable, err, "Could not read the journal of world %s", e.info.ClientID)
		}
		if err := fn(JournalRecord{Seq: uint64(seq), Data: data}); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return Wrapf(ErrUnavailable, err, "Could not read the journal of world %s", e.info.ClientID)
	}
	return nil
}

// clampSeq converts a sequence number to SQLite's signed integers.
func clampSeq(seq uint64) int64 {
	if seq > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(seq)
}

// LevelOf returns user's permission level on a top-level document of the
// named type, as the document is given (not as the world holds it now):
// listeners of changes use it to apply the read rules to a document's
// version before or after a change. Embedded documents have their
// top-level document's level. An unknown type is NONE for non-GMs.
func LevelOf(user *User, documentName string, top Document) Level {
	if user.IsGM() {
		return LevelOwner
	}
	t := docTypes[documentName]
	if t == nil || !t.topLevel {
		return LevelNone
	}
	return levelOf(user, t, top)
}
