package keys

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMigrationGivesKeysToOperator opens a relay.db written before the
// relay had accounts: its keys keep working and belong to the operator's
// account, which exists, and keys they create belong to it too.
func TestMigrationGivesKeysToOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "relay.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Mint(Spec{Name: "admin", Scopes: []string{ScopeAdmin, ScopeEntityRead}}, CreatedByBootstrap, newClock().Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`CREATE TABLE ` + schemaTable + ` (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`}
	for i, name := range []string{"0001_create_api_keys.sql", "0002_record_key_creator.sql"} {
		b, err := migrationFS.ReadFile("migrations/" + name)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, string(b), `INSERT INTO `+schemaTable+` VALUES (`+string(rune('1'+i))+`, '`+name+`', '2030-01-01T00:00:00Z')`)
	}
	for _, q := range stmts {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := old.Exec(`INSERT INTO api_keys (id, key_hash, prefix, name, scopes, created_at, created_by)
		VALUES (?, ?, ?, 'admin', '["entity:read","admin"]', '2030-01-01T00:00:00Z', 'bootstrap')`, m.Key.ID, m.Hash[:], m.Key.Prefix); err != nil {
		t.Fatal(err)
	}
	old.Close()

	s := openPath(t, path, newClock())
	k, err := s.Authenticate(ctx, m.Plaintext)
	if err != nil {
		t.Fatalf("old key after migration: %v", err)
	}
	if k.AccountID != OperatorAccount || !k.ManagesAccounts() {
		t.Fatalf("old key after migration = %+v, want the operator's account and account management", k)
	}
	accounts, err := s.ListAccounts(ctx)
	if err != nil || len(accounts) != 1 || accounts[0].ID != OperatorAccount || accounts[0].Name != OperatorAccount {
		t.Fatalf("accounts after migration = %+v, %v", accounts, err)
	}
	_, made, err := s.CreateAs(ctx, k, Spec{Name: "bot", Scopes: []string{ScopeEntityRead}})
	if err != nil || made.AccountID != OperatorAccount || made.ManagesAccounts() {
		t.Fatalf("key made by the old key = %+v, %v", made, err)
	}
}

// TestAccountsIsolateKeys walks an account through its life: its first
// key, keys made from it, what it sees of the operator's keys and what the
// operator sees of it, suspension and deletion.
func TestAccountsIsolateKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, newClock())
	opPlain, created, err := s.Bootstrap(ctx, filepath.Join(t.TempDir(), "admin.key"))
	if err != nil || !created {
		t.Fatal(err)
	}
	op, _ := s.Authenticate(ctx, opPlain)
	if !op.ManagesAccounts() || !op.HasScope(ScopeAccounts) {
		t.Fatalf("bootstrap key = %+v", op)
	}

	acct, plain, first, err := s.CreateAccount(ctx, op.ID, "  Guild  ", Quotas{Keys: 5})
	if err != nil {
		t.Fatal(err)
	}
	if acct.Name != "Guild" || acct.Quotas.Keys != 5 || !strings.HasPrefix(acct.ID, "acc_") {
		t.Fatalf("account = %+v", acct)
	}
	if first.AccountID != acct.ID || first.HasScope(ScopeAccounts) || !first.HasScope(ScopeAdmin) || first.CreatedBy != op.ID {
		t.Fatalf("first key = %+v", first)
	}
	gm, err := s.Authenticate(ctx, plain)
	if err != nil || gm.ManagesAccounts() {
		t.Fatalf("first key authenticates as %+v, %v", gm, err)
	}
	// Keys inherit the account of the key that makes them.
	_, bot, err := s.CreateAs(ctx, gm, Spec{Name: "bot", Scopes: []string{ScopeEntityRead}, AccountID: OperatorAccount})
	if err != nil || bot.AccountID != acct.ID {
		t.Fatalf("key made by the account's key = %+v, %v", bot, err)
	}
	// The account's key sees and revokes only its own account's keys; the
	// operator's are answered as unknown.
	seen, _ := s.ListAs(ctx, gm)
	if ids := keyIDs(seen); !slices.Equal(ids, []string{first.ID, bot.ID}) {
		t.Fatalf("account key lists %v", ids)
	}
	if _, err := s.RevokeAs(ctx, gm, op.ID); !errors.Is(err, ErrNotFound) || err.Error() != NotFound(op.ID).Error() {
		t.Fatalf("revoking the operator's key: %v", err)
	}
	if k, _ := s.Get(ctx, op.ID); k.Revoked() {
		t.Fatal("the operator's key was revoked")
	}
	// The operator sees every key.
	seen, _ = s.ListAs(ctx, op)
	if len(seen) != 3 {
		t.Fatalf("operator lists %v", keyIDs(seen))
	}

	// Names are unique ignoring case, and checked.
	for name, want := range map[string]error{"guild": ErrAccountExists, "OPERATOR": ErrAccountExists, "": ErrAccountInvalid, strings.Repeat("x", 65): ErrAccountInvalid} {
		if _, _, _, err := s.CreateAccount(ctx, op.ID, name, Quotas{}); !errors.Is(err, want) {
			t.Errorf("CreateAccount(%q) = %v, want %v", name, err, want)
		}
	}
	if _, _, _, err := s.CreateAccount(ctx, op.ID, "x", Quotas{Worlds: -1}); err == nil || !strings.Contains(err.Error(), "'quotas.worlds'") {
		t.Errorf("negative quota: %v", err)
	}

	// Suspension refuses every key of the account at once, and only those.
	if _, err := s.SuspendAccount(ctx, acct.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, plain); !errors.Is(err, ErrSuspended) || !strings.Contains(err.Error(), `"Guild"`) {
		t.Fatalf("suspended account's key: %v", err)
	}
	if _, err := s.Authenticate(ctx, opPlain); err != nil {
		t.Fatalf("operator's key during another account's suspension: %v", err)
	}
	if _, err := s.SuspendAccount(ctx, OperatorAccount, true); !errors.Is(err, ErrOperatorAccount) {
		t.Fatalf("suspending the operator: %v", err)
	}
	// A reopened store keeps the suspension.
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, plain); !errors.Is(err, ErrSuspended) {
		t.Fatalf("suspended account's key after reload: %v", err)
	}
	if _, err := s.SuspendAccount(ctx, acct.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, plain); err != nil {
		t.Fatalf("resumed account's key: %v", err)
	}

	if u, err := s.AccountUsage(ctx, acct.ID); err != nil || u.Keys != 2 {
		t.Fatalf("usage = %+v, %v", u, err)
	}
	// Deletion removes the account's keys.
	if _, err := s.DeleteAccount(ctx, acct.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, plain); !errors.Is(err, ErrUnknown) {
		t.Fatalf("deleted account's key: %v", err)
	}
	if _, err := s.Get(ctx, bot.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted account's bot key: %v", err)
	}
	if _, err := s.GetAccount(ctx, acct.ID); !errors.Is(err, ErrAccountNotFound) {
		t.Fatalf("deleted account: %v", err)
	}
	if _, err := s.DeleteAccount(ctx, OperatorAccount); !errors.Is(err, ErrOperatorAccount) {
		t.Fatalf("deleting the operator: %v", err)
	}
}

func keyIDs(ks []Key) []string {
	var out []string
	for _, k := range ks {
		out = append(out, k.ID)
	}
	return out
}
