package keys

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// AccountUsage is what an account uses of its quotas.
type AccountUsage struct {
	// Keys counts the account's keys that are not revoked.
	Keys int64
}

// Accounts is what the relay needs of an account store. The SQLite [Store]
// and the cluster's replicated store (package cluster/shared) implement
// it with the same rules: names unique ignoring case, the operator's
// account neither suspended nor deleted, a suspension refused by
// Authenticate at once on the node that made it.
type Accounts interface {
	// CreateAccount makes an account and its first admin key (see
	// FirstKeySpec), recording createdBy as the key's creator, and returns
	// the key's plaintext, shown once.
	CreateAccount(ctx context.Context, createdBy, name string, q Quotas) (Account, string, Key, error)
	// ListAccounts lists every account in order of creation, the
	// operator's first.
	ListAccounts(ctx context.Context) ([]Account, error)
	// GetAccount returns one account, or an error wrapping
	// ErrAccountNotFound.
	GetAccount(ctx context.Context, id string) (Account, error)
	// UpdateAccount renames the account (when name is not nil) and
	// replaces its quotas (when q is not nil).
	UpdateAccount(ctx context.Context, id string, name *string, q *Quotas) (Account, error)
	// SuspendAccount suspends (or, with suspend false, resumes) the
	// account; suspending a suspended account keeps its first time.
	SuspendAccount(ctx context.Context, id string, suspend bool) (Account, error)
	// DeleteAccount removes the account and every key of it.
	DeleteAccount(ctx context.Context, id string) (Account, error)
	// AccountUsage counts what the account uses of its quotas.
	AccountUsage(ctx context.Context, id string) (AccountUsage, error)
	// Suspension returns the refusal of the keys of the account id when
	// it is suspended, nil otherwise; it answers from memory, as
	// Authenticate does, for callers that hold a key authenticated
	// earlier (a stream ticket, a call forwarded by another node).
	Suspension(id string) error
	// WorldOwners records the owners of the embedded worlds.
	WorldOwners
}

var _ Accounts = (*Store)(nil)

// accountColumns lists the columns scanAccount reads, in order.
const accountColumns = `id, name, quotas, created_at, suspended_at`

// scanAccount reads one row of accountColumns.
func scanAccount(sc scanner) (Account, error) {
	var (
		a                Account
		quotas, created  string
		suspendedAtField sql.NullString
	)
	if err := sc.Scan(&a.ID, &a.Name, &quotas, &created, &suspendedAtField); err != nil {
		return Account{}, err
	}
	if err := json.Unmarshal([]byte(quotas), &a.Quotas); err != nil {
		return Account{}, fmt.Errorf("account %s: quotas: %w", a.ID, err)
	}
	var err error
	if a.CreatedAt, err = parseTime(created); err != nil {
		return Account{}, fmt.Errorf("account %s: created_at: %w", a.ID, err)
	}
	if suspendedAtField.Valid {
		if a.SuspendedAt, err = parseTime(suspendedAtField.String); err != nil {
			return Account{}, fmt.Errorf("account %s: suspended_at: %w", a.ID, err)
		}
	}
	return a, nil
}

// loadSuspended reads the suspended accounts into memory for Authenticate.
func (s *Store) loadSuspended(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE suspended_at IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("keys: load accounts: %w", err)
	}
	defer rows.Close()
	m := map[string]Account{}
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return fmt.Errorf("keys: load accounts: %w", err)
		}
		m[a.ID] = a
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("keys: load accounts: %w", err)
	}
	s.suspended.Store(&m)
	return nil
}

// Suspension implements [Accounts].
func (s *Store) Suspension(id string) error {
	if a, ok := (*s.suspended.Load())[id]; ok {
		return suspended(a)
	}
	return nil
}

// setSuspended publishes a's suspension state to Authenticate.
func (s *Store) setSuspended(a Account) {
	old := *s.suspended.Load()
	m := make(map[string]Account, len(old)+1)
	for id, v := range old {
		if id != a.ID {
			m[id] = v
		}
	}
	if a.Suspended() {
		m[a.ID] = a
	}
	s.suspended.Store(&m)
}

// isUniqueViolation reports whether err is SQLite's UNIQUE constraint
// failure.
func isUniqueViolation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// CreateAccount makes an account and its first admin key in one
// transaction (see [Accounts]).
func (s *Store) CreateAccount(ctx context.Context, createdBy, name string, q Quotas) (Account, string, Key, error) {
	a, err := NewAccount(name, q, s.clock())
	if err != nil {
		return Account{}, "", Key{}, err
	}
	quotas, err := json.Marshal(a.Quotas)
	if err != nil {
		return Account{}, "", Key{}, fmt.Errorf("keys: create account: %w", err)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Account{}, "", Key{}, fmt.Errorf("keys: create account: %w", err)
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `INSERT INTO accounts (id, name, quotas, created_at) VALUES (?, ?, ?, ?)`,
		a.ID, a.Name, string(quotas), formatTime(a.CreatedAt))
	if isUniqueViolation(err) {
		return Account{}, "", Key{}, AccountExists(a.Name)
	}
	if err != nil {
		return Account{}, "", Key{}, fmt.Errorf("keys: create account: %w", err)
	}
	plaintext, k, h, err := s.insert(ctx, tx, FirstKeySpec(a), createdBy, nil)
	if err != nil {
		return Account{}, "", Key{}, err
	}
	if err := tx.Commit(); err != nil {
		return Account{}, "", Key{}, fmt.Errorf("keys: create account: %w", err)
	}
	s.idx.Store(s.idx.Load().with(h, k))
	return a, plaintext, k.clone(), nil
}

// ListAccounts lists every account in order of creation.
func (s *Store) ListAccounts(ctx context.Context) ([]Account, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+accountColumns+` FROM accounts ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("keys: list accounts: %w", err)
	}
	defer rows.Close()
	var out []Account
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("keys: list accounts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("keys: list accounts: %w", err)
	}
	return out, nil
}

// GetAccount returns the account with the given id.
func (s *Store) GetAccount(ctx context.Context, id string) (Account, error) {
	return getAccount(ctx, s.db, id)
}

// getAccount reads one account.
func getAccount(ctx context.Context, q queryer, id string) (Account, error) {
	a, err := scanAccount(q.QueryRowContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Account{}, AccountNotFound(id)
	}
	if err != nil {
		return Account{}, fmt.Errorf("keys: get account: %w", err)
	}
	return a, nil
}

// UpdateAccount renames the account and replaces its quotas.
func (s *Store) UpdateAccount(ctx context.Context, id string, name *string, q *Quotas) (Account, error) {
	var newName string
	if name != nil {
		n, err := NormalizeAccountName(*name)
		if err != nil {
			return Account{}, err
		}
		newName = n
	}
	if q != nil {
		if err := q.Validate(); err != nil {
			return Account{}, err
		}
	}
	return s.changeAccount(ctx, id, func(a *Account) error {
		if name != nil {
			if a.ID == OperatorAccount && newName != a.Name {
				return fmt.Errorf("%w: it keeps the name %q", ErrOperatorAccount, OperatorAccount)
			}
			a.Name = newName
		}
		if q != nil {
			a.Quotas = *q
		}
		return nil
	})
}

// SuspendAccount suspends or resumes the account. Authenticate refuses its
// keys from the moment the change commits.
func (s *Store) SuspendAccount(ctx context.Context, id string, suspend bool) (Account, error) {
	now := normTime(s.clock())
	return s.changeAccount(ctx, id, func(a *Account) error {
		switch {
		case suspend && a.ID == OperatorAccount:
			return fmt.Errorf("%w: it cannot be suspended", ErrOperatorAccount)
		case suspend && a.SuspendedAt.IsZero():
			a.SuspendedAt = now
		case !suspend:
			a.SuspendedAt = time.Time{}
		}
		return nil
	})
}

// changeAccount reads the account, lets change modify it and writes it
// back, all in one transaction, then publishes its suspension state.
func (s *Store) changeAccount(ctx context.Context, id string, change func(*Account) error) (Account, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Account{}, fmt.Errorf("keys: change account: %w", err)
	}
	defer tx.Rollback()
	a, err := getAccount(ctx, tx, id)
	if err != nil {
		return Account{}, err
	}
	if err := change(&a); err != nil {
		return Account{}, err
	}
	quotas, err := json.Marshal(a.Quotas)
	if err != nil {
		return Account{}, fmt.Errorf("keys: change account: %w", err)
	}
	_, err = tx.ExecContext(ctx, `UPDATE accounts SET name = ?, quotas = ?, suspended_at = ? WHERE id = ?`,
		a.Name, string(quotas), nullTime(a.SuspendedAt), a.ID)
	if isUniqueViolation(err) {
		return Account{}, AccountExists(a.Name)
	}
	if err != nil {
		return Account{}, fmt.Errorf("keys: change account: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Account{}, fmt.Errorf("keys: change account: %w", err)
	}
	s.setSuspended(a)
	return a, nil
}

// DeleteAccount removes the account and every key of it; its keys are
// refused from the moment the change commits.
func (s *Store) DeleteAccount(ctx context.Context, id string) (Account, error) {
	if id == OperatorAccount {
		return Account{}, fmt.Errorf("%w: it cannot be deleted", ErrOperatorAccount)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Account{}, fmt.Errorf("keys: delete account: %w", err)
	}
	defer tx.Rollback()
	a, err := getAccount(ctx, tx, id)
	if err != nil {
		return Account{}, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM api_keys WHERE account_id = ?`, id); err != nil {
		return Account{}, fmt.Errorf("keys: delete account: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM accounts WHERE id = ?`, id); err != nil {
		return Account{}, fmt.Errorf("keys: delete account: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Account{}, fmt.Errorf("keys: delete account: %w", err)
	}
	s.idx.Store(s.idx.Load().without(func(k *Key) bool { return k.Account() == id }))
	a.SuspendedAt = time.Time{}
	s.setSuspended(a)
	return a, nil
}

// AccountUsage counts the account's unrevoked keys.
func (s *Store) AccountUsage(ctx context.Context, id string) (AccountUsage, error) {
	if _, err := s.GetAccount(ctx, id); err != nil {
		return AccountUsage{}, err
	}
	var u AccountUsage
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_keys WHERE account_id = ? AND revoked_at IS NULL`, id).Scan(&u.Keys)
	if err != nil {
		return AccountUsage{}, fmt.Errorf("keys: account usage: %w", err)
	}
	return u, nil
}

// without returns a copy of ix without the keys drop selects.
func (ix *index) without(drop func(*Key) bool) *index {
	n := &index{
		byHash: make(map[[sha256.Size]byte]*Key, len(ix.byHash)),
		byID:   make(map[string][sha256.Size]byte, len(ix.byID)),
	}
	for h, k := range ix.byHash {
		if !drop(k) {
			n.byHash[h] = k
			n.byID[k.ID] = h
		}
	}
	return n
}
