package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Query selects records. Records come oldest first.
type Query struct {
	// Account selects the records of one account; "" selects every
	// record (the operator's view).
	Account string
	// Since and Until bound the records' times (inclusive); zero is no
	// bound.
	Since, Until time.Time
	// Action selects one action ("key.create") or one class of actions
	// ("key"); "" selects all.
	Action string
	// Limit is how many records at most; the store's own cap applies.
	Limit int
	// Cursor continues a listing where the page that gave it ended.
	Cursor string
}

// Page is one page of records and the cursor of the next page, "" when
// there is none.
type Page struct {
	Records    []Entry
	NextCursor string
}

// Matches reports whether e is selected by q's account, times and action
// (not its cursor).
func (q Query) Matches(e Entry) bool {
	if q.Account != "" && e.Account != q.Account {
		return false
	}
	if !q.Since.IsZero() && e.Time.Before(q.Since) {
		return false
	}
	if !q.Until.IsZero() && e.Time.After(q.Until) {
		return false
	}
	if q.Action != "" && e.Action != q.Action && !strings.HasPrefix(e.Action, q.Action+".") {
		return false
	}
	return true
}

// Store keeps audit records.
type Store interface {
	// Append keeps e and gives it its ID.
	Append(ctx context.Context, e Entry) error
	// List returns the records q selects, oldest first, at most q.Limit
	// (which the caller has bounded).
	List(ctx context.Context, q Query) (Page, error)
	// Prune removes the records older than before and all but the newest
	// keep records; it returns how many it removed. A store that prunes on
	// its own (a JetStream stream with its limits) may do nothing.
	Prune(ctx context.Context, before time.Time, keep int) (int, error)
}

// ErrInvalidCursor is a cursor that no listing gave.
var ErrInvalidCursor = errors.New("'cursor' is not a cursor this relay gave")

// Defaults and caps.
const (
	// DefaultRetention is how long records are kept by default.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultMaxRecords is how many records are kept at most by default.
	DefaultMaxRecords = 100_000
	// DefaultLimit is how many records a page holds when the query does
	// not say.
	DefaultLimit = 100
	// MaxLimit caps the records of one page.
	MaxLimit = 1000
	// pruneEvery is how often the log prunes in the background.
	pruneEvery = time.Minute
)

// Options configure a [Log].
type Options struct {
	// Retention is how long a record is kept; DefaultRetention when 0.
	Retention time.Duration
	// MaxRecords is how many records are kept at most;
	// DefaultMaxRecords when 0.
	MaxRecords int
	// Clock is the time; time.Now when nil.
	Clock func() time.Time
	// Log receives the failures to keep or prune records.
	Log *slog.Logger
}

// Log is the relay's audit log: a [Recorder] over a [Store] that prunes
// in the background what is older than the retention or beyond the count.
type Log struct {
	store Store
	opts  Options

	mu sync.Mutex
	// appended counts the records kept since the last prune; a prune is
	// asked for early when it reaches a tenth of MaxRecords, so that a
	// burst of records cannot outgrow the bound by much between prunes.
	appended int
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

var _ Recorder = (*Log)(nil)

// New returns a log over store and starts its background pruning, which
// Close stops.
func New(store Store, opts Options) *Log {
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxRecords <= 0 {
		opts.MaxRecords = DefaultMaxRecords
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	l := &Log{store: store, opts: opts, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.pruneLoop()
	return l
}

// Retention is how long the log keeps a record.
func (l *Log) Retention() time.Duration { return l.opts.Retention }

// Record keeps e. A failure is logged, never returned: the action it
// records has happened either way.
func (l *Log) Record(ctx context.Context, e Entry) {
	if e.Time.IsZero() {
		e.Time = l.opts.Clock()
	}
	e.Time = e.Time.UTC()
	if e.Outcome == "" {
		e.Outcome = OutcomeOK
	}
	e.Detail = clip(e.Detail, maxDetail)
	// The entry is kept even when the call that made it was cancelled
	// meanwhile: what happened must be on record.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.store.Append(ctx, e); err != nil {
		l.opts.Log.Error("audit record not kept", "action", e.Action, "account", e.Account, "keyId", e.KeyID, "outcome", e.Outcome, "error", err)
		return
	}
	l.mu.Lock()
	l.appended++
	early := l.appended >= max(l.opts.MaxRecords/10, 1)
	l.mu.Unlock()
	if early {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// maxDetail bounds an entry's detail, in bytes.
const maxDetail = 512

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// List returns the records q selects, with q.Limit bounded by MaxLimit.
func (l *Log) List(ctx context.Context, q Query) (Page, error) {
	switch {
	case q.Limit <= 0:
		q.Limit = DefaultLimit
	case q.Limit > MaxLimit:
		q.Limit = MaxLimit
	}
	// Nothing older than the retention is shown, even before it is
	// pruned.
	if oldest := l.opts.Clock().Add(-l.opts.Retention); q.Since.Before(oldest) {
		q.Since = oldest
	}
	return l.store.List(ctx, q)
}

// Prune removes now what is older than the retention or beyond the count.
func (l *Log) Prune(ctx context.Context) (int, error) {
	l.mu.Lock()
	l.appended = 0
	l.mu.Unlock()
	n, err := l.store.Prune(ctx, l.opts.Clock().Add(-l.opts.Retention), l.opts.MaxRecords)
	if err != nil {
		return n, fmt.Errorf("audit: prune: %w", err)
	}
	return n, nil
}

// pruneLoop prunes every pruneEvery, and early when asked, until Close.
func (l *Log) pruneLoop() {
	defer close(l.done)
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-l.wake:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := l.Prune(ctx); err != nil {
			l.opts.Log.Warn("audit records not pruned", "error", err)
		}
		cancel()
	}
}

// Close stops the background pruning. The store stays open: its owner
// closes it.
func (l *Log) Close() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}
