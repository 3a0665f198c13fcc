package keys

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// TestStoreActsOnAuthority checks that CreateAs, ListAs and RevokeAs apply
// Authorize, record the creator, and change nothing when they refuse.
func TestStoreActsOnAuthority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, newClock())
	_, root := mustCreate(t, s, Spec{Name: "root", Scopes: AllScopes})
	_, demo := mustCreate(t, s, Spec{Name: "demo", Scopes: AllScopes, ClientIDs: []string{"demo"}})
	_, other := mustCreate(t, s, Spec{Name: "other", Scopes: AllScopes, ClientIDs: []string{"other"}})

	// A creation records its creator.
	_, child, err := s.CreateAs(ctx, demo, Spec{Name: "child", Scopes: []string{ScopeEntityRead}, ClientIDs: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	if child.CreatedBy != demo.ID {
		t.Fatalf("CreatedBy = %q, want %q", child.CreatedBy, demo.ID)
	}
	if got, _ := s.Get(ctx, child.ID); got.CreatedBy != demo.ID {
		t.Fatalf("stored CreatedBy = %q, want %q", got.CreatedBy, demo.ID)
	}
	if root.CreatedBy != "" {
		t.Fatalf("Create recorded creator %q", root.CreatedBy)
	}

	before, _ := s.List(ctx)
	// Refusals: forbidden, invalid before forbidden, unknown before forbidden.
	if _, _, err := s.CreateAs(ctx, demo, Spec{Name: "escape", Scopes: AllScopes}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("bound key created an unbound key: %v", err)
	}
	if _, _, err := s.CreateAs(ctx, demo, Spec{Name: "", Scopes: AllScopes}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid spec: %v, want ErrInvalid", err)
	}
	if _, _, err := s.CreateAs(ctx, Key{}, Spec{Name: "anonymous", Scopes: AllScopes}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("creation without a creating key: %v", err)
	}
	if _, err := s.RevokeAs(ctx, demo, root.ID); !errors.Is(err, ErrForbidden) {
		t.Fatalf("bound key revoked the unbound key: %v", err)
	}
	if _, err := s.RevokeAs(ctx, demo, other.ID); !errors.Is(err, ErrForbidden) {
		t.Fatalf("bound key revoked another world's key: %v", err)
	}
	if _, err := s.RevokeAs(ctx, demo, "0123456789abcdef"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v, want ErrNotFound", err)
	}
	if after, _ := s.List(ctx); !reflect.DeepEqual(after, before) {
		t.Fatal("refused calls changed the store")
	}

	// Listing shows what is inside the actor's bindings, itself included.
	names := func(ks []Key) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.Name)
		}
		return out
	}
	for _, tt := range []struct {
		actor Key
		want  []string
	}{
		{root, []string{"root", "demo", "other", "child"}},
		{demo, []string{"demo", "child"}},
		{other, []string{"other"}},
		{child, []string{"demo", "child"}},
	} {
		got, err := s.ListAs(ctx, tt.actor)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(got), tt.want) {
			t.Errorf("ListAs(%s) = %v, want %v", tt.actor.Name, names(got), tt.want)
		}
	}

	// A key may revoke itself and the keys inside its bindings.
	if k, err := s.RevokeAs(ctx, child, child.ID); err != nil || !k.Revoked() {
		t.Fatalf("key revoking itself: %+v, %v", k, err)
	}
	if k, err := s.RevokeAs(ctx, root, other.ID); err != nil || !k.Revoked() {
		t.Fatalf("unbound key revoking a bound key: %+v, %v", k, err)
	}
}

// TestMigrationRecordsCreator opens a relay.db written before keys recorded
// their creator: its keys survive, with an empty creator, and new keys
// record theirs.
func TestMigrationRecordsCreator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "relay.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := migrationFS.ReadFile("migrations/0001_create_api_keys.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE ` + schemaTable + ` (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`,
		string(v1),
		`INSERT INTO ` + schemaTable + ` VALUES (1, '0001_create_api_keys.sql', '2030-01-01T00:00:00Z')`,
		`INSERT INTO api_keys (id, key_hash, prefix, name, scopes, created_at)
		 VALUES ('00000000000000aa', zeroblob(32), 'abcdefgh', 'admin', '["admin"]', '2030-01-01T00:00:00Z')`,
	} {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old.Close()

	s := openPath(t, path, newClock())
	legacy, err := s.Get(ctx, "00000000000000aa")
	if err != nil {
		t.Fatal(err)
	}
	if legacy.Name != "admin" || legacy.CreatedBy != "" {
		t.Fatalf("legacy key after migration = %+v", legacy)
	}
	_, k, err := s.CreateAs(ctx, legacy, Spec{Name: "new", Scopes: []string{ScopeAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, k.ID); got.CreatedBy != legacy.ID {
		t.Fatalf("new key's creator = %q, want %q", got.CreatedBy, legacy.ID)
	}
}
