package shared

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/server/keys"
)

// Entries of the keys bucket that hold accounts: "a.<id>" an account's
// record, "n.<hash>" the id of the account whose name, in lower case,
// has that SHA-256 (so that names stay unique across nodes).
const (
	accountEntryPrefix = "a."
	nameEntryPrefix    = "n."
)

var _ keys.Accounts = (*KeyStore)(nil)

// nameEntry is the entry that reserves an account name.
func nameEntry(name string) string {
	h := sha256.Sum256([]byte(strings.ToLower(name)))
	return nameEntryPrefix + hex.EncodeToString(h[:16])
}

// operatorAccount is the operator's account before anyone changed it: it
// exists in every cluster without an entry.
func operatorAccount() keys.Account {
	return keys.Account{ID: keys.OperatorAccount, Name: keys.OperatorAccount}
}

// applyAccount takes a watched account entry into the suspension index.
func (s *KeyStore) applyAccount(e jetstream.KeyValueEntry) {
	id, _ := strings.CutPrefix(e.Key(), accountEntryPrefix)
	if e.Operation() != jetstream.KeyValuePut {
		s.setSuspended(keys.Account{ID: id})
		return
	}
	var a keys.Account
	if json.Unmarshal(e.Value(), &a) != nil {
		return
	}
	s.setSuspended(a)
}

// Suspension implements keys.Accounts.
func (s *KeyStore) Suspension(id string) error {
	if a, ok := (*s.suspended.Load())[id]; ok {
		return keys.SuspendedError(a)
	}
	return nil
}

// setSuspended publishes a's suspension state to Authenticate.
func (s *KeyStore) setSuspended(a keys.Account) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.suspended.Load()
	m := make(map[string]keys.Account, len(old)+1)
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

// CreateAccount makes an account and its first admin key (see
// keys.Accounts): the name is reserved first, so two nodes cannot make
// two accounts of one name.
func (s *KeyStore) CreateAccount(ctx context.Context, createdBy, name string, q keys.Quotas) (keys.Account, string, keys.Key, error) {
	a, err := keys.NewAccount(name, q, s.clock())
	if err != nil {
		return keys.Account{}, "", keys.Key{}, err
	}
	if strings.EqualFold(a.Name, keys.OperatorAccount) {
		return keys.Account{}, "", keys.Key{}, keys.AccountExists(a.Name)
	}
	data, err := json.Marshal(a)
	if err != nil {
		return keys.Account{}, "", keys.Key{}, fmt.Errorf("shared: create account: %w", err)
	}
	if _, err := s.kv.Create(ctx, nameEntry(a.Name), []byte(a.ID)); errors.Is(err, jetstream.ErrKeyExists) {
		return keys.Account{}, "", keys.Key{}, keys.AccountExists(a.Name)
	} else if err != nil {
		return keys.Account{}, "", keys.Key{}, fmt.Errorf("shared: create account: %w", err)
	}
	if _, err := s.kv.Create(ctx, accountEntryPrefix+a.ID, data); err != nil {
		_ = s.kv.Delete(ctx, nameEntry(a.Name))
		return keys.Account{}, "", keys.Key{}, fmt.Errorf("shared: create account: %w", err)
	}
	plaintext, k, err := s.create(ctx, keys.FirstKeySpec(a), createdBy, nil)
	if err != nil {
		return keys.Account{}, "", keys.Key{}, err
	}
	return a, plaintext, k, nil
}

// ListAccounts lists every account, the operator's first, then in order
// of creation.
func (s *KeyStore) ListAccounts(ctx context.Context) ([]keys.Account, error) {
	l, err := s.kv.ListKeysFiltered(ctx, accountEntryPrefix+">")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("shared: list accounts: %w", err)
	}
	out := []keys.Account{}
	haveOperator := false
	if l != nil {
		for name := range l.Keys() {
			a, _, err := s.readAccount(ctx, strings.TrimPrefix(name, accountEntryPrefix))
			if errors.Is(err, keys.ErrAccountNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, err
			}
			haveOperator = haveOperator || a.ID == keys.OperatorAccount
			out = append(out, a)
		}
	}
	if !haveOperator {
		out = append(out, operatorAccount())
	}
	slices.SortFunc(out, func(a, b keys.Account) int {
		if (a.ID == keys.OperatorAccount) != (b.ID == keys.OperatorAccount) {
			if a.ID == keys.OperatorAccount {
				return -1
			}
			return 1
		}
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// readAccount reads one account and its revision (0 for the operator's
// account that has no entry yet).
func (s *KeyStore) readAccount(ctx context.Context, id string) (keys.Account, uint64, error) {
	e, err := s.kv.Get(ctx, accountEntryPrefix+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		if id == keys.OperatorAccount {
			return operatorAccount(), 0, nil
		}
		return keys.Account{}, 0, keys.AccountNotFound(id)
	}
	if err != nil {
		return keys.Account{}, 0, fmt.Errorf("shared: get account: %w", err)
	}
	var a keys.Account
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return keys.Account{}, 0, fmt.Errorf("shared: account record %s: %w", e.Key(), err)
	}
	return a, e.Revision(), nil
}

// GetAccount returns the account with the given id.
func (s *KeyStore) GetAccount(ctx context.Context, id string) (keys.Account, error) {
	if !validEntryToken(id) {
		return keys.Account{}, keys.AccountNotFound(id)
	}
	a, _, err := s.readAccount(ctx, id)
	return a, err
}

// validEntryToken reports whether id can be part of an entry's name;
// anything else names no account.
func validEntryToken(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// UpdateAccount renames the account and replaces its quotas.
func (s *KeyStore) UpdateAccount(ctx context.Context, id string, name *string, q *keys.Quotas) (keys.Account, error) {
	var newName string
	if name != nil {
		n, err := keys.NormalizeAccountName(*name)
		if err != nil {
			return keys.Account{}, err
		}
		newName = n
	}
	if q != nil {
		if err := q.Validate(); err != nil {
			return keys.Account{}, err
		}
	}
	return s.changeAccount(ctx, id, func(a *keys.Account) error {
		if name != nil {
			if a.ID == keys.OperatorAccount && newName != a.Name {
				return fmt.Errorf("%w: it keeps the name %q", keys.ErrOperatorAccount, keys.OperatorAccount)
			}
			a.Name = newName
		}
		if q != nil {
			a.Quotas = *q
		}
		return nil
	})
}

// SuspendAccount suspends or resumes the account; the other nodes refuse
// its keys as soon as their watchers deliver the change.
func (s *KeyStore) SuspendAccount(ctx context.Context, id string, suspend bool) (keys.Account, error) {
	now := s.clock().UTC().Round(0)
	return s.changeAccount(ctx, id, func(a *keys.Account) error {
		switch {
		case suspend && a.ID == keys.OperatorAccount:
			return fmt.Errorf("%w: it cannot be suspended", keys.ErrOperatorAccount)
		case suspend && a.SuspendedAt.IsZero():
			a.SuspendedAt = now
		case !suspend:
			a.SuspendedAt = time.Time{}
		}
		return nil
	})
}

// changeAccount reads the account, lets change modify it and writes it
// back if nobody changed it in between (compare and set), reading again
// when someone did. A new name is reserved before the write and the old
// one released after it.
func (s *KeyStore) changeAccount(ctx context.Context, id string, change func(*keys.Account) error) (keys.Account, error) {
	if !validEntryToken(id) {
		return keys.Account{}, keys.AccountNotFound(id)
	}
	for {
		a, rev, err := s.readAccount(ctx, id)
		if err != nil {
			return keys.Account{}, err
		}
		oldName := a.Name
		if err := change(&a); err != nil {
			return keys.Account{}, err
		}
		renamed := !strings.EqualFold(oldName, a.Name)
		if renamed {
			if strings.EqualFold(a.Name, keys.OperatorAccount) {
				return keys.Account{}, keys.AccountExists(a.Name)
			}
			if _, err := s.kv.Create(ctx, nameEntry(a.Name), []byte(a.ID)); errors.Is(err, jetstream.ErrKeyExists) {
				return keys.Account{}, keys.AccountExists(a.Name)
			} else if err != nil {
				return keys.Account{}, fmt.Errorf("shared: change account: %w", err)
			}
		}
		data, err := json.Marshal(a)
		if err != nil {
			return keys.Account{}, fmt.Errorf("shared: change account: %w", err)
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, accountEntryPrefix+id, data)
		} else {
			_, err = s.kv.Update(ctx, accountEntryPrefix+id, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			if renamed {
				_ = s.kv.Delete(ctx, nameEntry(a.Name))
			}
			continue
		}
		if err != nil {
			return keys.Account{}, fmt.Errorf("shared: change account: %w", err)
		}
		if renamed {
			_ = s.kv.Delete(ctx, nameEntry(oldName))
		}
		s.setSuspended(a)
		return a, nil
	}
}

// DeleteAccount removes the account and every key of it.
func (s *KeyStore) DeleteAccount(ctx context.Context, id string) (keys.Account, error) {
	if id == keys.OperatorAccount {
		return keys.Account{}, fmt.Errorf("%w: it cannot be deleted", keys.ErrOperatorAccount)
	}
	a, err := s.GetAccount(ctx, id)
	if err != nil {
		return keys.Account{}, err
	}
	// The account is suspended first, so that its keys are refused on
	// every node while their entries are being removed.
	if _, err := s.SuspendAccount(ctx, id, true); err != nil {
		return keys.Account{}, err
	}
	ix := s.idx.Load()
	for h, v := range ix.byHash {
		if v.key.Account() != id {
			continue
		}
		if err := s.kv.Delete(ctx, keyEntryPrefix+hex.EncodeToString(h[:])); err != nil {
			return keys.Account{}, fmt.Errorf("shared: delete account: %w", err)
		}
		_ = s.kv.Delete(ctx, idEntryPrefix+v.key.ID)
		s.forget(h, v.rev)
	}
	if err := s.kv.Delete(ctx, accountEntryPrefix+id); err != nil {
		return keys.Account{}, fmt.Errorf("shared: delete account: %w", err)
	}
	_ = s.kv.Delete(ctx, nameEntry(a.Name))
	s.setSuspended(keys.Account{ID: id})
	return a, nil
}

// AccountUsage counts the account's unrevoked keys.
func (s *KeyStore) AccountUsage(ctx context.Context, id string) (keys.AccountUsage, error) {
	if _, err := s.GetAccount(ctx, id); err != nil {
		return keys.AccountUsage{}, err
	}
	var u keys.AccountUsage
	for _, v := range s.idx.Load().byHash {
		if v.key.Account() == id && !v.key.Revoked() {
			u.Keys++
		}
	}
	return u, nil
}
