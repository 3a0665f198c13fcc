package keys

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBootstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := openTest(t, newClock())
	keyFile := filepath.Join(t.TempDir(), "secrets", "admin.key")

	p, created, err := s.Bootstrap(ctx, keyFile)
	if err != nil || !created {
		t.Fatalf("first Bootstrap = %v, %v; want created", created, err)
	}
	if !plaintextPattern.MatchString(p) {
		t.Fatalf("plaintext %q is not a key", p)
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != p+"\n" {
		t.Fatalf("key file holds %d bytes, want the plaintext and a newline", len(b))
	}
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, want 0600", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(filepath.Dir(keyFile)); len(entries) != 1 {
		t.Fatalf("key file directory holds %d entries, want 1 (no temp files left)", len(entries))
	}
	k, err := s.Authenticate(ctx, p)
	if err != nil {
		t.Fatalf("Authenticate bootstrap key: %v", err)
	}
	if k.Name != "admin" || !slices.Equal(k.Scopes, AllScopes) || len(k.ClientIDs) != 0 || !k.ExpiresAt.IsZero() || k.CreatedBy != CreatedByBootstrap {
		t.Fatalf("bootstrap key = %+v", k)
	}

	tests := []struct {
		name string
		file string
	}{
		{"same file", keyFile},
		{"other file", filepath.Join(t.TempDir(), "other.key")},
	}
	for _, tt := range tests {
		p2, created, err := s.Bootstrap(ctx, tt.file)
		if err != nil || created || p2 != "" {
			t.Fatalf("%s: second Bootstrap = %q, %v, %v; want nothing", tt.name, p2, created, err)
		}
	}
	if b2, _ := os.ReadFile(keyFile); string(b2) != string(b) {
		t.Fatal("second Bootstrap changed the key file")
	}
	if _, err := os.Stat(tests[1].file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("second Bootstrap wrote a file: %v", err)
	}
	if n, _ := s.Count(ctx); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}

	// A restart does not bootstrap again, even once the admin key is revoked.
	if _, err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := openPath(t, path, newClock())
	if _, created, err := s2.Bootstrap(ctx, keyFile); err != nil || created {
		t.Fatalf("Bootstrap after restart = %v, %v; want nothing", created, err)
	}
}

func TestBootstrapFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		keyFile string
		wantErr string
	}{
		{"empty path", "", "key file path is empty"},
		{"parent is a file", filepath.Join(notADir, "admin.key"), "write key file"},
		{"key file is a directory", dir, "write key file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := openTest(t, newClock())
			p, created, err := s.Bootstrap(ctx, tt.keyFile)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || created || p != "" {
				t.Fatalf("Bootstrap = %q, %v, %v; want error containing %q", p, created, err, tt.wantErr)
			}
			// Nothing was committed, so a later attempt can still bootstrap.
			if n, err := s.Count(ctx); err != nil || n != 0 {
				t.Fatalf("Count after failed Bootstrap = %d, %v; want 0", n, err)
			}
			if len(s.idx.Load().byHash) != 0 {
				t.Fatal("failed Bootstrap left a key in memory")
			}
			good := filepath.Join(t.TempDir(), "admin.key")
			if _, created, err := s.Bootstrap(ctx, good); err != nil || !created {
				t.Fatalf("Bootstrap after failure = %v, %v; want created", created, err)
			}
		})
	}
}
