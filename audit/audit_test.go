package audit_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/audit"
)

// clock is a settable time for the log.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func openLog(t *testing.T, opts audit.Options) (*audit.Log, *clock) {
	l, c, _ := openLogStore(t, opts)
	return l, c
}

func openLogStore(t *testing.T, opts audit.Options) (*audit.Log, *clock, *audit.SQLiteStore) {
	t.Helper()
	store, err := audit.OpenSQLite(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	c := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	opts.Clock = c.Now
	l := audit.New(store, opts)
	t.Cleanup(l.Close)
	return l, c, store
}

// TestRecordFromContext records through the context: the address comes
// from it, the time from the log's clock; a context without a recorder
// records nothing.
func TestRecordFromContext(t *testing.T) {
	t.Parallel()
	l, c := openLog(t, audit.Options{})
	audit.Record(context.Background(), audit.Entry{Action: audit.ActionKeyCreate}) // nowhere to go
	ctx := audit.WithAddress(audit.WithRecorder(context.Background(), l), "192.0.2.7:5123")
	audit.Record(ctx, audit.Entry{Action: audit.ActionKeyCreate, Account: "acc_a", KeyID: "k1", Target: "k2"})
	page, err := l.List(context.Background(), audit.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 1 {
		t.Fatalf("records: %+v", page.Records)
	}
	got := page.Records[0]
	want := audit.Entry{ID: got.ID, Time: c.Now(), Account: "acc_a", KeyID: "k1", Address: "192.0.2.7",
		Action: audit.ActionKeyCreate, Target: "k2", Outcome: audit.OutcomeOK}
	if got != want || got.ID == "" {
		t.Fatalf("record:\n got %+v\nwant %+v", got, want)
	}
}

// TestListFilters selects by account, action and its class, and time, and
// pages with the cursor.
func TestListFilters(t *testing.T) {
	t.Parallel()
	l, c := openLog(t, audit.Options{})
	ctx := context.Background()
	start := c.Now()
	for i, e := range []audit.Entry{
		{Account: "a", Action: audit.ActionKeyCreate},
		{Account: "b", Action: audit.ActionKeyRevoke},
		{Account: "a", Action: audit.ActionKeyRequestApprove, Outcome: audit.OutcomeRefused},
		{Account: "a", Action: audit.ActionKeyRevoke},
		{Account: "", Action: audit.ActionKeyList, Outcome: audit.OutcomeRefused},
	} {
		e.Target = string(rune('0' + i))
		l.Record(ctx, e)
		c.Advance(time.Minute)
	}
	targets := func(q audit.Query) (string, string) {
		t.Helper()
		page, err := l.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		for _, e := range page.Records {
			s += e.Target
		}
		return s, page.NextCursor
	}
	for _, tc := range []struct {
		name string
		q    audit.Query
		want string
	}{
		{"all", audit.Query{}, "01234"},
		{"account a", audit.Query{Account: "a"}, "023"},
		{"account b", audit.Query{Account: "b"}, "1"},
		{"action", audit.Query{Action: audit.ActionKeyRevoke}, "13"},
		{"class", audit.Query{Action: "key"}, "0134"},
		{"class is no prefix of another class", audit.Query{Action: "key-request"}, "2"},
		{"since", audit.Query{Since: start.Add(2 * time.Minute)}, "234"},
		{"until", audit.Query{Until: start.Add(time.Minute)}, "01"},
	} {
		if got, _ := targets(tc.q); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	got, cursor := targets(audit.Query{Limit: 2})
	if got != "01" || cursor == "" {
		t.Fatalf("first page %q, cursor %q", got, cursor)
	}
	got, cursor = targets(audit.Query{Limit: 2, Cursor: cursor})
	if got != "23" || cursor == "" {
		t.Fatalf("second page %q, cursor %q", got, cursor)
	}
	if got, cursor = targets(audit.Query{Limit: 2, Cursor: cursor}); got != "4" || cursor != "" {
		t.Fatalf("last page %q, cursor %q", got, cursor)
	}
	if _, err := l.List(ctx, audit.Query{Cursor: "x"}); err != audit.ErrInvalidCursor {
		t.Fatalf("bad cursor: %v", err)
	}
}

// TestPruneRetentionAndCount prunes what is older than the retention and
// all but the newest MaxRecords.
func TestPruneRetentionAndCount(t *testing.T) {
	t.Parallel()
	l, c, store := openLogStore(t, audit.Options{Retention: time.Hour, MaxRecords: 3})
	ctx := context.Background()
	l.Record(ctx, audit.Entry{Action: audit.ActionKeyCreate, Target: "old"})
	c.Advance(2 * time.Hour)
	for _, target := range []string{"a", "b", "c", "d"} {
		l.Record(ctx, audit.Entry{Action: audit.ActionKeyCreate, Target: target})
	}
	// The log prunes in the background too (early, with so small a
	// bound): whatever it removed already, this prune finishes the job.
	if _, err := l.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	// The store itself, which the log's listing would not show an old
	// record from anyway.
	page, err := store.List(ctx, audit.Query{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, e := range page.Records {
		got += e.Target
	}
	if got != "bcd" {
		t.Fatalf("kept %q, want bcd", got)
	}
}
