package keys

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openTest opens a store in a fresh directory and closes it at the end of the test.
func openTest(t *testing.T, clock *fakeClock) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.db")
	s := openPath(t, path, clock)
	return s, path
}

func openPath(t *testing.T, path string, clock *fakeClock) *Store {
	t.Helper()
	var now func() time.Time
	if clock != nil {
		now = clock.Now
	}
	s, err := Open(path, now)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustCreate(t *testing.T, s *Store, spec Spec) (string, Key) {
	t.Helper()
	p, k, err := s.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create(%+v): %v", spec, err)
	}
	return p, k
}

var plaintextPattern = regexp.MustCompile(`^rk_[A-Za-z0-9_-]{43}$`)

func TestCreateKeyFormat(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, newClock())
	seen := map[string]bool{}
	for i := range 20 {
		p, k := mustCreate(t, s, Spec{Name: fmt.Sprintf("k%d", i), Scopes: []string{"search"}})
		if !plaintextPattern.MatchString(p) {
			t.Fatalf("plaintext %q does not match %s", p, plaintextPattern)
		}
		raw, err := base64.RawURLEncoding.DecodeString(p[3:])
		if err != nil || len(raw) != 32 {
			t.Fatalf("plaintext body decodes to %d bytes, err %v; want 32 bytes", len(raw), err)
		}
		if k.Prefix != p[3:11] {
			t.Fatalf("Prefix = %q, want %q", k.Prefix, p[3:11])
		}
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(k.ID) {
			t.Fatalf("ID = %q, want 16 hex characters", k.ID)
		}
		if seen[p] || seen[k.ID] {
			t.Fatalf("duplicate plaintext or id")
		}
		seen[p], seen[k.ID] = true, true
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newClock()
	s, _ := openTest(t, clock)

	specs := []Spec{
		{Name: "reader", Scopes: []string{"search", "entity:read"}},
		{
			Name:         "  bound  ",
			Scopes:       []string{"dnd5e", "events:subscribe"},
			ClientIDs:    []string{"world-1", "world_2", "world-1"},
			ScopedUserID: "Gamemaster",
			ClientUsers:  map[string]string{"world_2": "abcdEFGH12345678"},
			ExpiresAt:    clock.Now().Add(24 * time.Hour),
		},
		{Name: "per-client only", Scopes: AllScopes, ClientUsers: map[string]string{"w": "player one"}},
	}
	var created []Key
	for _, spec := range specs {
		_, k := mustCreate(t, s, spec)
		clock.Add(time.Second)
		created = append(created, k)
	}

	// Normalisation on create.
	b := created[1]
	if b.Name != "bound" {
		t.Errorf("Name = %q, want trimmed %q", b.Name, "bound")
	}
	if !slices.Equal(b.Scopes, []string{"dnd5e", "events:subscribe"}) {
		t.Errorf("Scopes = %v", b.Scopes)
	}
	if !slices.Equal(b.ClientIDs, []string{"world-1", "world_2"}) {
		t.Errorf("ClientIDs = %v, want deduplicated", b.ClientIDs)
	}
	if !b.Enabled || !b.RevokedAt.IsZero() || !b.CreatedAt.Equal(newClock().Now().Add(time.Second)) {
		t.Errorf("state = enabled %v revoked %v created %v", b.Enabled, b.RevokedAt, b.CreatedAt)
	}
	if got := b.UserFor("world_2"); got != "abcdEFGH12345678" {
		t.Errorf("UserFor(world_2) = %q", got)
	}
	if got := b.UserFor("world-1"); got != "Gamemaster" {
		t.Errorf("UserFor(world-1) = %q", got)
	}

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(list, created) {
		t.Fatalf("List =\n%+v\nwant\n%+v", list, created)
	}
	for _, want := range created {
		got, err := s.Get(ctx, want.ID)
		if err != nil {
			t.Fatalf("Get(%s): %v", want.ID, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Get(%s) = %+v, want %+v", want.ID, got, want)
		}
	}
	if n, err := s.Count(ctx); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}

	revokedAt := clock.Now()
	r, err := s.Revoke(ctx, created[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Enabled || !r.RevokedAt.Equal(revokedAt) || !r.Revoked() {
		t.Fatalf("after Revoke: enabled %v revokedAt %v", r.Enabled, r.RevokedAt)
	}
	clock.Add(time.Hour)
	r2, err := s.Revoke(ctx, created[0].ID)
	if err != nil {
		t.Fatalf("second Revoke: %v", err)
	}
	if !reflect.DeepEqual(r2, r) {
		t.Fatalf("second Revoke = %+v, want unchanged %+v", r2, r)
	}
	if got, _ := s.Get(ctx, created[0].ID); !reflect.DeepEqual(got, r) {
		t.Fatalf("Get after Revoke = %+v, want %+v", got, r)
	}
	if n, _ := s.Count(ctx); n != 3 {
		t.Fatalf("Count after revoke = %d, want 3 (revoked keys count)", n)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, newClock())
	mustCreate(t, s, Spec{Name: "x", Scopes: []string{"search"}})
	tests := []struct {
		id      string
		wantMsg string
	}{
		{"0123456789abcdef", "API key not found: 0123456789abcdef"},
		{"", `API key not found: ""`},
		{"bad\nid", `API key not found: "bad\nid"`},
	}
	for _, tt := range tests {
		if _, err := s.Get(ctx, tt.id); !errors.Is(err, ErrNotFound) || err.Error() != tt.wantMsg {
			t.Errorf("Get(%q) error = %v, want %q", tt.id, err, tt.wantMsg)
		}
		if _, err := s.Revoke(ctx, tt.id); !errors.Is(err, ErrNotFound) || err.Error() != tt.wantMsg {
			t.Errorf("Revoke(%q) error = %v, want %q", tt.id, err, tt.wantMsg)
		}
	}
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	clock := newClock()
	s, _ := openTest(t, clock)
	ok := Spec{Name: "ok", Scopes: []string{"search"}}
	with := func(f func(*Spec)) Spec {
		sp := ok
		f(&sp)
		return sp
	}
	tests := []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{"missing name", with(func(s *Spec) { s.Name = "" }), "name is required"},
		{"blank name", with(func(s *Spec) { s.Name = "   " }), "name is required"},
		{"long name", with(func(s *Spec) { s.Name = strings.Repeat("n", 101) }), "longer than 100"},
		{"control in name", with(func(s *Spec) { s.Name = "a\x00b" }), "control characters"},
		{"invalid utf8 name", with(func(s *Spec) { s.Name = "a\xffb" }), "UTF-8"},
		{"no scopes", with(func(s *Spec) { s.Scopes = nil }), "at least one scope"},
		{"unknown scope", with(func(s *Spec) { s.Scopes = []string{"search", "roll:execute"} }), `unknown scope "roll:execute"`},
		{"all is not a scope name", with(func(s *Spec) { s.Scopes = []string{"all"} }), `unknown scope "all"`},
		{"bad client id", with(func(s *Spec) { s.ClientIDs = []string{"ok", "not ok"} }), `malformed client id "not ok"`},
		{"empty client id", with(func(s *Spec) { s.ClientIDs = []string{""} }), `malformed client id ""`},
		{"client user not bound", with(func(s *Spec) {
			s.ClientIDs = []string{"w1"}
			s.ClientUsers = map[string]string{"w2": "u"}
		}), `client users names client "w2", which is not in the key's client ids`},
		{"client user bad client id", with(func(s *Spec) { s.ClientUsers = map[string]string{"no/pe": "u"} }), "malformed client id"},
		{"client user empty user", with(func(s *Spec) { s.ClientUsers = map[string]string{"w1": ""} }), `user for client "w1": must not be empty`},
		{"scoped user with spaces", with(func(s *Spec) { s.ScopedUserID = " gm" }), "scoped user id: has leading or trailing spaces"},
		{"scoped user too long", with(func(s *Spec) { s.ScopedUserID = strings.Repeat("u", 257) }), "longer than 256"},
		{"expiry in the past", with(func(s *Spec) { s.ExpiresAt = clock.Now().Add(-time.Minute) }), "not in the future"},
		{"expiry now", with(func(s *Spec) { s.ExpiresAt = clock.Now() }), "not in the future"},
		{"expiry too far", with(func(s *Spec) { s.ExpiresAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }), "after year 9999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, k, err := s.Create(context.Background(), tt.spec)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Create error = %v, want ErrInvalid containing %q", err, tt.wantErr)
			}
			if p != "" || !reflect.DeepEqual(k, Key{}) {
				t.Fatalf("Create returned %q, %+v with an error", p, k)
			}
		})
	}
	t.Cleanup(func() {
		if n, err := s.Count(context.Background()); err != nil || n != 0 {
			t.Errorf("Count after invalid creates = %d, %v; want 0", n, err)
		}
	})
}

func TestOnlyHashStored(t *testing.T) {
	t.Parallel()
	s, path := openTest(t, newClock())
	var plaintexts []string
	for i := range 5 {
		p, _ := mustCreate(t, s, Spec{Name: fmt.Sprintf("key %d", i), Scopes: AllScopes, ClientIDs: []string{"w"}})
		plaintexts = append(plaintexts, p)
	}

	// Read every column of every table through a separate connection.
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tables := queryStrings(t, raw, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if !slices.Contains(tables, "api_keys") {
		t.Fatalf("tables = %v, want api_keys", tables)
	}
	var dump bytes.Buffer
	for _, tbl := range tables {
		rows, err := raw.Query(`SELECT * FROM "` + tbl + `"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				fmt.Fprintf(&dump, "%v|%s|", v, v)
			}
		}
		rows.Close()
	}
	for _, p := range plaintexts {
		if strings.Contains(dump.String(), p) || strings.Contains(dump.String(), p[3:]) {
			t.Fatalf("plaintext %s found in database rows", p[:11])
		}
		// The stored hash is the SHA-256 of the full key.
		h := sha256.Sum256([]byte(p))
		var n int
		if err := raw.QueryRow(`SELECT COUNT(*) FROM api_keys WHERE key_hash = ?`, h[:]).Scan(&n); err != nil || n != 1 {
			t.Fatalf("rows with the key's SHA-256 = %d, %v; want 1", n, err)
		}
	}

	// And the raw bytes of the database files, before and after the WAL is
	// checkpointed by Close.
	checkFiles := func(when string) {
		t.Helper()
		files, _ := filepath.Glob(path + "*")
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range plaintexts {
				if bytes.Contains(b, []byte(p[3:])) {
					t.Fatalf("%s: plaintext %s found in %s", when, p[:11], f)
				}
			}
		}
	}
	checkFiles("open")
	raw.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFiles("closed")
}

func queryStrings(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newClock()
	s, _ := openTest(t, clock)

	good, goodKey := mustCreate(t, s, Spec{Name: "good", Scopes: []string{"search"}})
	revoked, rk := mustCreate(t, s, Spec{Name: "revoked", Scopes: []string{"search"}})
	if _, err := s.Revoke(ctx, rk.ID); err != nil {
		t.Fatal(err)
	}
	disabled, dk := mustCreate(t, s, Spec{Name: "disabled", Scopes: []string{"search"}})
	// There is no API to disable without revoking; an operator could do it
	// in the database, which Reload picks up.
	if _, err := s.db.Exec(`UPDATE api_keys SET enabled = 0 WHERE id = ?`, dk.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	expiring, _ := mustCreate(t, s, Spec{Name: "expiring", Scopes: []string{"search"}, ExpiresAt: clock.Now().Add(time.Hour)})
	expired, _ := mustCreate(t, s, Spec{Name: "expired", Scopes: []string{"search"}, ExpiresAt: clock.Now().Add(time.Minute)})
	clock.Add(time.Minute) // "expired" expires exactly now

	unknown := "rk_" + strings.Repeat("A", 43)
	tests := []struct {
		name    string
		key     string
		wantErr error
		wantID  string
	}{
		{"valid", good, nil, goodKey.ID},
		{"missing", "", ErrMissing, ""},
		{"unknown well-formed", unknown, ErrUnknown, ""},
		{"garbage", "hello", ErrUnknown, ""},
		{"wrong prefix", "rx_" + good[3:], ErrUnknown, ""},
		{"truncated", good[:len(good)-1], ErrUnknown, ""},
		{"trailing newline", good + "\n", ErrUnknown, ""},
		{"bad alphabet", good[:10] + "+" + good[11:], ErrUnknown, ""},
		{"huge", strings.Repeat("x", 1<<20), ErrUnknown, ""},
		{"revoked", revoked, ErrRevoked, ""},
		{"disabled", disabled, ErrDisabled, ""},
		{"expired at exactly ExpiresAt", expired, ErrExpired, ""},
		{"not yet expired", expiring, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := s.Authenticate(ctx, tt.key)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Authenticate error = %v, want %v", err, tt.wantErr)
			}
			// Admission's check gives the same verdict.
			if err := s.Check(ctx, tt.key); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Check error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if !reflect.DeepEqual(k, Key{}) {
					t.Fatalf("Authenticate returned %+v with an error", k)
				}
				return
			}
			if tt.wantID != "" && k.ID != tt.wantID {
				t.Fatalf("Authenticate ID = %q, want %q", k.ID, tt.wantID)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{ErrMissing, "API key is required"},
		{ErrUnknown, "Invalid API key"},
		{ErrDisabled, "API key is disabled"},
		{ErrRevoked, "API key has been revoked"},
		{ErrExpired, "API key has expired"},
		{ErrNotFound, "API key not found"},
	}
	for _, tt := range tests {
		if tt.err.Error() != tt.want {
			t.Errorf("error text %q, want %q", tt.err.Error(), tt.want)
		}
	}
}

func TestExpiryFollowsClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newClock()
	s, _ := openTest(t, clock)
	p, _ := mustCreate(t, s, Spec{Name: "e", Scopes: []string{"search"}, ExpiresAt: clock.Now().Add(time.Hour)})
	steps := []struct {
		advance time.Duration
		wantErr error
	}{
		{0, nil},
		{time.Hour - time.Nanosecond, nil},
		{time.Nanosecond, ErrExpired},
		{time.Hour, ErrExpired},
	}
	for i, st := range steps {
		clock.Add(st.advance)
		if _, err := s.Authenticate(ctx, p); !errors.Is(err, st.wantErr) {
			t.Fatalf("step %d: Authenticate error = %v, want %v", i, err, st.wantErr)
		}
	}
}

func TestRevocationIsImmediate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := openTest(t, newClock())
	p, k := mustCreate(t, s, Spec{Name: "r", Scopes: []string{"search"}})
	for range 3 { // warm whatever might cache
		if _, err := s.Authenticate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, p); !errors.Is(err, ErrRevoked) {
		t.Fatalf("Authenticate right after Revoke: %v, want ErrRevoked", err)
	}
	// Also after a restart.
	s.Close()
	s2 := openPath(t, path, newClock())
	if _, err := s2.Authenticate(ctx, p); !errors.Is(err, ErrRevoked) {
		t.Fatalf("Authenticate after reopen: %v, want ErrRevoked", err)
	}
}

func TestReturnedKeysAreCopies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, newClock())
	p, k := mustCreate(t, s, Spec{Name: "c", Scopes: []string{"search"}, ClientIDs: []string{"w"}, ClientUsers: map[string]string{"w": "u"}})
	k.Scopes[0] = "admin"
	k.ClientIDs[0] = "other"
	k.ClientUsers["w"] = "evil"
	a, err := s.Authenticate(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if a.HasScope("admin") || !a.BoundTo("w") || a.UserFor("w") != "u" {
		t.Fatalf("store state changed through a returned Key: %+v", a)
	}
	a.Scopes[0] = "admin"
	if b, _ := s.Authenticate(ctx, p); b.HasScope("admin") {
		t.Fatalf("store state changed through an authenticated Key")
	}
}

func TestPersistenceAcrossReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newClock()
	s, path := openTest(t, clock)
	var plaintexts []string
	for i := range 4 {
		p, _ := mustCreate(t, s, Spec{
			Name:        fmt.Sprintf("k%d", i),
			Scopes:      []string{"entity:read", "dnd5e"},
			ClientIDs:   []string{"w1", "w2"},
			ClientUsers: map[string]string{"w1": "alice"},
			ExpiresAt:   clock.Now().Add(48 * time.Hour),
		})
		plaintexts = append(plaintexts, p)
		clock.Add(time.Millisecond)
	}
	before, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, before[1].ID); err != nil {
		t.Fatal(err)
	}
	before, _ = s.List(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for round := range 2 { // the second reopen must not re-run migrations
		s2 := openPath(t, path, clock)
		after, err := s2.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(after, before) {
			t.Fatalf("round %d: List after reopen =\n%+v\nwant\n%+v", round, after, before)
		}
		for i, p := range plaintexts {
			k, err := s2.Authenticate(ctx, p)
			if i == 1 {
				if !errors.Is(err, ErrRevoked) {
					t.Fatalf("revoked key after reopen: %v", err)
				}
				continue
			}
			if err != nil || !reflect.DeepEqual(k, before[i]) {
				t.Fatalf("Authenticate key %d after reopen = %+v, %v", i, k, err)
			}
		}
		versions := queryStrings(t, s2.db, `SELECT version || ':' || name FROM `+schemaTable+` ORDER BY version`)
		if !slices.Equal(versions, []string{"1:0001_create_api_keys.sql", "2:0002_record_key_creator.sql", "3:0003_accounts.sql"}) {
			t.Fatalf("schema versions = %v", versions)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenSettings(t *testing.T) {
	t.Parallel()
	s, path := openTest(t, nil)
	var mode string
	var sync, busy int
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Errorf("synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
	if err := s.db.QueryRow(`PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 5000 {
		t.Errorf("busy_timeout = %d, %v; want 5000", busy, err)
	}
	if got := s.db.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("MaxOpenConnections = %d, want 1", got)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("database file mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	newer := filepath.Join(dir, "newer.db")
	s := openPath(t, newer, nil)
	if _, err := s.db.Exec(`INSERT INTO ` + schemaTable + ` (version, name, applied_at) VALUES (99, 'future.sql', 'x')`); err != nil {
		t.Fatal(err)
	}
	s.Close()

	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{"empty path", "", "path is empty"},
		{"query in path", filepath.Join(dir, "a.db?mode=ro"), "plain file name"},
		{"uri", "file:" + filepath.Join(dir, "a.db"), "plain file name"},
		{"newer schema", newer, "newer than this program supports"},
		{"parent is a file", filepath.Join(notADir, "relay.db"), "create database file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Open(tt.path, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", tt.path)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Open(%q) error = %v, want it to contain %q", tt.path, err, tt.wantErr)
			}
		})
	}
}

// TestReloadSharedDatabase documents the multi-process behaviour: a second
// Store on the same file sees changes only after Reload.
func TestReloadSharedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, path := openTest(t, newClock())
	b := openPath(t, path, newClock())

	p, k := mustCreate(t, a, Spec{Name: "shared", Scopes: []string{"search"}})
	if _, err := b.Authenticate(ctx, p); !errors.Is(err, ErrUnknown) {
		t.Fatalf("other store before Reload: %v, want ErrUnknown", err)
	}
	if got, err := b.Get(ctx, k.ID); err != nil || got.ID != k.ID {
		t.Fatalf("other store Get reads the database: %+v, %v", got, err)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Authenticate(ctx, p); err != nil {
		t.Fatalf("other store after Reload: %v", err)
	}
	if _, err := a.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Authenticate(ctx, p); err != nil {
		t.Fatalf("other store before second Reload: %v (expected the stale index to accept the key)", err)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Authenticate(ctx, p); !errors.Is(err, ErrRevoked) {
		t.Fatalf("other store after second Reload: %v, want ErrRevoked", err)
	}
}

func TestConcurrentAuthenticateAndCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, newClock())
	stable, _ := mustCreate(t, s, Spec{Name: "stable", Scopes: []string{"search"}})

	const writers, perWriter, readers = 4, 15, 8
	var (
		mu      sync.Mutex
		created []string
		wg      sync.WaitGroup
		done    = make(chan struct{})
	)
	errc := make(chan error, writers*perWriter+readers+1)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				p, k, err := s.Create(ctx, Spec{Name: fmt.Sprintf("w%d-%d", w, i), Scopes: []string{"search"}})
				if err != nil {
					errc <- err
					return
				}
				// A key is usable as soon as Create returns.
				if _, err := s.Authenticate(ctx, p); err != nil {
					errc <- fmt.Errorf("fresh key: %w", err)
					return
				}
				if i%3 == 0 {
					if _, err := s.Revoke(ctx, k.ID); err != nil {
						errc <- err
						return
					}
					if _, err := s.Authenticate(ctx, p); !errors.Is(err, ErrRevoked) {
						errc <- fmt.Errorf("revoked key: %v", err)
						return
					}
				}
				mu.Lock()
				created = append(created, p)
				mu.Unlock()
			}
		}()
	}
	var readersWG sync.WaitGroup
	for range readers {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.Authenticate(ctx, stable); err != nil {
					errc <- fmt.Errorf("stable key: %w", err)
					return
				}
				mu.Lock()
				var p string
				if len(created) > 0 {
					p = created[len(created)-1]
				}
				mu.Unlock()
				if p != "" {
					if _, err := s.Authenticate(ctx, p); err != nil && !errors.Is(err, ErrRevoked) {
						errc <- fmt.Errorf("created key: %w", err)
						return
					}
				}
			}
		}()
	}
	readersWG.Add(1)
	go func() { // a concurrent Reload must not lose anything
		defer readersWG.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := s.Reload(ctx); err != nil {
				errc <- err
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	readersWG.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if n, err := s.Count(ctx); err != nil || n != 1+writers*perWriter {
		t.Fatalf("Count = %d, %v; want %d", n, err, 1+writers*perWriter)
	}
	if got := len(s.idx.Load().byHash); got != 1+writers*perWriter {
		t.Fatalf("in-memory index holds %d keys, want %d", got, 1+writers*perWriter)
	}
}
