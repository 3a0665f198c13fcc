package sqlitedb

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestMigrations(t *testing.T) {
	for name, files := range map[string]fstest.MapFS{
		"badly named migration": {"m/1_Bad.sql": {}},
		"has version 3, want 2": {"m/0001_a.sql": {}, "m/0003_c.sql": {}},
	} {
		if _, err := Migrations(files, "m"); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	files := fstest.MapFS{
		"m/0002_b.sql": {Data: []byte(`CREATE TABLE b (x)`)},
		"m/0001_a.sql": {Data: []byte(`CREATE TABLE a (x)`)},
	}
	ms, err := Migrations(files, "m")
	if err != nil || len(ms) != 2 || ms[0].Name != "0001_a.sql" || ms[1].SQL != "CREATE TABLE b (x)" {
		t.Fatalf("%+v %v", ms, err)
	}
	db, err := Open(filepath.Join(t.TempDir(), "sub", "x.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v := Versions{Table: "x_schema_version", AppliedAtType: "INTEGER", AppliedAt: func() any { return 1 }}
	ctx := context.Background()
	for range 2 { // applying again changes nothing
		if err := Migrate(ctx, db, v, ms); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM x_schema_version`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d versions recorded, %v", n, err)
	}
	if err := Migrate(ctx, db, v, ms[:1]); err == nil || !strings.Contains(err.Error(), "newer than this program supports") {
		t.Fatalf("an older program's migrate: %v", err)
	}
}
