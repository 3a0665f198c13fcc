package keys

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// BootstrapKeyName is the name of the key created by Bootstrap.
const BootstrapKeyName = "admin"

// Bootstrap gives a fresh installation its first key. When the database holds
// no keys at all (revoked ones count), it creates a key named "admin" with
// every scope, bound to no world and recording CreatedByBootstrap as its
// creator, writes its plaintext followed by a newline to keyFile with mode
// 0600, and returns the plaintext with created set to true. Otherwise it does
// nothing and returns "", false, nil.
//
// The file is written atomically (a temporary file in the same directory is
// written, synced and renamed over keyFile), and the key is committed only
// after the file is in place, so a failure leaves neither a key nobody knows
// nor a file holding a key that does not exist. The check and the creation
// happen in one database transaction, so several processes bootstrapping the
// same database create at most one key.
func (s *Store) Bootstrap(ctx context.Context, keyFile string) (plaintext string, created bool, err error) {
	if keyFile == "" {
		return "", false, errors.New("keys: bootstrap: key file path is empty")
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", false, fmt.Errorf("keys: bootstrap: %w", err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_keys`).Scan(&n); err != nil {
		return "", false, fmt.Errorf("keys: bootstrap: %w", err)
	}
	if n > 0 {
		return "", false, nil
	}
	plaintext, k, h, err := s.insert(ctx, tx, Spec{Name: BootstrapKeyName, Scopes: AllScopes}, CreatedByBootstrap, nil)
	if err != nil {
		return "", false, err
	}
	if err := writeFileAtomic(keyFile, []byte(plaintext+"\n"), 0o600); err != nil {
		return "", false, fmt.Errorf("keys: bootstrap: write key file: %w", err)
	}
	if err := tx.Commit(); err != nil {
		// The key does not exist; do not leave a file that suggests it does.
		_ = os.Remove(keyFile)
		return "", false, fmt.Errorf("keys: bootstrap: %w", err)
	}
	s.idx.Store(s.idx.Load().with(h, k))
	return plaintext, true, nil
}

// writeFileAtomic replaces path with data: it writes a temporary file in the
// same directory with the given mode, syncs it, renames it over path and
// syncs the directory. Missing directories are created with mode 0700.
func writeFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp already uses 0600; Chmod makes the mode explicit and
	// independent of the umask.
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	// Make the rename itself durable. On failure the new file is removed
	// again, so that an error always means the file was not written.
	if err := syncDir(dir); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// syncDir flushes the directory entry changes of dir to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
