package signin

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/server/keys"
)

// clock is a time the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// newService opens a service over a fresh relay.db with the account
// "Guild" and its password.
func newService(t *testing.T) (*Service, *SQLiteKV, *clock, keys.Account) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.db")
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	store, err := keys.Open(path, c.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	kv, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	s, err := New(Config{KV: kv, Accounts: store, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	a, _, _, err := store.CreateAccount(context.Background(), "test", "Guild", keys.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPassword(context.Background(), a.ID, "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	return s, kv, c, a
}

// TestSQLiteKV: entries are created once, changed only at their
// revision, and listed by an exact prefix ('_' is no wildcard).
func TestSQLiteKV(t *testing.T) {
	t.Parallel()
	kv, err := OpenSQLite(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	ctx := context.Background()
	if err := kv.Create(ctx, "s.acc_1.a", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Create(ctx, "s.acc_1.a", []byte("two")); !errors.Is(err, ErrEntryExists) {
		t.Fatalf("a second create: %v", err)
	}
	_, rev, err := kv.Get(ctx, "s.acc_1.a")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Update(ctx, "s.acc_1.a", []byte("two"), rev); err != nil {
		t.Fatal(err)
	}
	if err := kv.Update(ctx, "s.acc_1.a", []byte("three"), rev); !errors.Is(err, ErrChanged) {
		t.Fatalf("an update at an old revision: %v", err)
	}
	if v, _, _ := kv.Get(ctx, "s.acc_1.a"); string(v) != "two" {
		t.Fatalf("the entry holds %q", v)
	}
	_ = kv.Create(ctx, "s.accX1.b", []byte("other"))
	if got, _ := kv.Keys(ctx, "s.acc_1."); !slices.Equal(got, []string{"s.acc_1.a"}) {
		t.Fatalf("keys of s.acc_1.: %v", got)
	}
	if err := kv.Delete(ctx, "s.acc_1.a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kv.Get(ctx, "s.acc_1.a"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("a deleted entry: %v", err)
	}
}

// TestLockoutLifts: a name locked out after LockoutFailures failures
// signs in again once LockoutDuration has passed; failures older than
// LockoutWindow do not add up.
func TestLockoutLifts(t *testing.T) {
	t.Parallel()
	s, _, c, _ := newService(t)
	ctx := context.Background()
	for range LockoutFailures - 1 {
		if _, _, err := s.SignIn(ctx, "Guild", "a wrong password", "192.0.2.1"); !errors.Is(err, errBadSignIn) {
			t.Fatalf("a failure: %v", err)
		}
	}
	c.advance(LockoutWindow + time.Second)
	if _, _, err := s.SignIn(ctx, "Guild", "a wrong password", "192.0.2.1"); !errors.Is(err, errBadSignIn) {
		t.Fatalf("a failure after the window: %v", err)
	}
	if _, _, err := s.SignIn(ctx, "Guild", "correct horse battery", "192.0.2.1"); err != nil {
		t.Fatalf("old failures locked the name: %v", err)
	}
	for range LockoutFailures {
		_, _, _ = s.SignIn(ctx, "guild", "a wrong password", "192.0.2.1")
	}
	if _, _, err := s.SignIn(ctx, "Guild", "correct horse battery", "192.0.2.1"); err == nil || !strings.Contains(err.Error(), "locked for 15 more minute(s)") {
		t.Fatalf("locked out: %v", err)
	}
	c.advance(LockoutDuration)
	if _, _, err := s.SignIn(ctx, "Guild", "correct horse battery", "192.0.2.1"); err != nil {
		t.Fatalf("after the lock-out: %v", err)
	}
}

// TestSessionsIdleAndPruned: a session unused for the idle time is
// refused, and a sign-in removes the account's idle sessions from the
// store.
func TestSessionsIdleAndPruned(t *testing.T) {
	t.Parallel()
	s, kv, c, a := newService(t)
	ctx := context.Background()
	var tokens []string
	for range 3 {
		token, _, err := s.SignIn(ctx, "Guild", "correct horse battery", "192.0.2.1")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, token)
	}
	// A use within the idle time keeps the last one alive.
	c.advance(DefaultIdleTimeout - time.Minute)
	if k, err := s.Authenticate(ctx, tokens[2]); err != nil || k.Account() != a.ID || !k.HasScope(keys.ScopeAdmin) || k.HasScope(keys.ScopeAccounts) {
		t.Fatalf("a session in use: %+v %v", k, err)
	}
	c.advance(2 * time.Minute)
	if _, err := s.Authenticate(ctx, tokens[0]); !errors.Is(err, keys.ErrUnknown) || !strings.Contains(err.Error(), "without use") {
		t.Fatalf("an idle session: %v", err)
	}
	if _, err := s.Authenticate(ctx, tokens[2]); err != nil {
		t.Fatalf("the session in use: %v", err)
	}
	if _, _, err := s.SignIn(ctx, "Guild", "correct horse battery", "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if names, _ := kv.Keys(ctx, "s."+a.ID+"."); len(names) != 2 {
		t.Fatalf("after a sign-in the account's sessions are %v, want the one in use and the new one", names)
	}
	// A token of the right shape but another secret is refused.
	forged := tokens[2][:len(tokens[2])-4] + "AAAA"
	if _, err := s.Authenticate(ctx, forged); !errors.Is(err, keys.ErrUnknown) {
		t.Fatalf("a forged token: %v", err)
	}
}

// TestVerifyPasswordRefusesMalformedHashes: a stored hash that is not
// argon2id with sane parameters is an error, not a match.
func TestVerifyPasswordRefusesMalformedHashes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, h := range []string{"", "plain", "$argon2i$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA",
		"$argon2id$v=19$m=999999999,t=2,p=1$c2FsdA$aGFzaA", "$argon2id$v=19$m=19456,t=2,p=1$!!$aGFzaA"} {
		if ok, err := verifyPassword(ctx, h, "x"); ok || err == nil {
			t.Fatalf("hash %q: %v %v", h, ok, err)
		}
	}
	h, err := hashPassword(ctx, "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := verifyPassword(ctx, h, "correct horse battery"); !ok || err != nil {
		t.Fatalf("the right password: %v %v", ok, err)
	}
	if ok, _ := verifyPassword(ctx, h, "correct horse batterY"); ok {
		t.Fatal("a wrong password matched")
	}
}

// TestKeysCheck: Keys.Check gives Authenticate's verdict for an API key, a
// revoked one, an unknown one and a session token, and judges a stored key
// without copying its record (admission checks every request's key).
func TestKeysCheck(t *testing.T) {
	// Not parallel: AllocsPerRun counts the whole process's allocations.
	path := filepath.Join(t.TempDir(), "relay.db")
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	store, err := keys.Open(path, c.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	kv, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	s, err := New(Config{KV: kv, Accounts: store, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, _, _, err := store.CreateAccount(ctx, "test", "Guild", keys.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPassword(ctx, a.ID, "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	token, _, err := s.SignIn(ctx, "Guild", "correct horse battery", "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	live, _, err := store.Create(ctx, keys.Spec{Name: "reader", Scopes: []string{"entity:read"}, ClientIDs: []string{"w1", "w2"}})
	if err != nil {
		t.Fatal(err)
	}
	revoked, k, err := store.Create(ctx, keys.Spec{Name: "gone", Scopes: []string{"entity:read"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	unknown := live[:len(live)-4] + "AAAA"
	if unknown == live {
		unknown = live[:len(live)-4] + "BBBB"
	}
	ks := Keys{Backend: store, Sessions: s}
	for _, presented := range []string{live, revoked, unknown, token, "not a key"} {
		_, authErr := ks.Authenticate(ctx, presented)
		checkErr := ks.Check(ctx, presented)
		if (authErr == nil) != (checkErr == nil) || authErr != nil && authErr.Error() != checkErr.Error() {
			t.Errorf("%.12s...: Authenticate says %v, Check says %v", presented, authErr, checkErr)
		}
	}
	if err := ks.Check(ctx, live); err != nil {
		t.Fatalf("a live key: %v", err)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = ks.Check(ctx, live) }); allocs > 0 {
		t.Errorf("Check of a stored key allocates %.0f times a call, want none (no copy of its record)", allocs)
	}
}
