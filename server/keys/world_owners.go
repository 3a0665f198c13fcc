package keys

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// ErrWorldClaimed is wrapped when an embedded world already has an owner.
var ErrWorldClaimed = errors.New("World already exists")

// WorldOwners records which account owns each embedded world that an
// account other than the operator's made. A world without a record belongs
// to the operator's account. The records live beside the accounts (in
// relay.db, or in the cluster's shared state), so that every node knows
// the owner of every embedded world, whichever node holds it.
type WorldOwners interface {
	// ClaimWorld records accountID as the owner of the world clientID; a
	// world that has an owner already is an error wrapping
	// ErrWorldClaimed.
	ClaimWorld(ctx context.Context, clientID, accountID string) error
	// ReleaseWorld forgets the owner of the world clientID; a world
	// without a record is no error.
	ReleaseWorld(ctx context.Context, clientID string) error
	// WorldOwner returns the account that owns the world clientID, from
	// memory, and whether the world has a record at all.
	WorldOwner(clientID string) (string, bool)
	// OwnedWorlds lists, sorted, the worlds with a record naming
	// accountID, from memory.
	OwnedWorlds(accountID string) []string
}

// WorldClaimed returns the error, wrapping ErrWorldClaimed, for clientID.
func WorldClaimed(clientID string) error {
	return fmt.Errorf("%w: %s", ErrWorldClaimed, quoteShortBare(clientID))
}

// OwnedBy lists, sorted, the worlds that owners (client id to account id)
// gives to accountID.
func OwnedBy(owners map[string]string, accountID string) []string {
	var out []string
	for c, a := range owners {
		if a == accountID {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

var _ WorldOwners = (*Store)(nil)

// loadOwners reads the world owners into memory.
func (s *Store) loadOwners(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT client_id, account_id FROM world_owners`)
	if err != nil {
		return fmt.Errorf("keys: load world owners: %w", err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var c, a string
		if err := rows.Scan(&c, &a); err != nil {
			return fmt.Errorf("keys: load world owners: %w", err)
		}
		m[c] = a
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("keys: load world owners: %w", err)
	}
	s.owners.Store(&m)
	return nil
}

// ClaimWorld implements [WorldOwners].
func (s *Store) ClaimWorld(ctx context.Context, clientID, accountID string) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_, err := s.db.ExecContext(ctx, `INSERT INTO world_owners (client_id, account_id) VALUES (?, ?)`, clientID, accountID)
	if isUniqueViolation(err) {
		return WorldClaimed(clientID)
	}
	if err != nil {
		return fmt.Errorf("keys: claim world: %w", err)
	}
	s.setOwner(clientID, accountID)
	return nil
}

// ReleaseWorld implements [WorldOwners].
func (s *Store) ReleaseWorld(ctx context.Context, clientID string) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM world_owners WHERE client_id = ?`, clientID); err != nil {
		return fmt.Errorf("keys: release world: %w", err)
	}
	s.setOwner(clientID, "")
	return nil
}

// WorldOwner implements [WorldOwners].
func (s *Store) WorldOwner(clientID string) (string, bool) {
	a, ok := (*s.owners.Load())[clientID]
	return a, ok
}

// OwnedWorlds implements [WorldOwners].
func (s *Store) OwnedWorlds(accountID string) []string {
	return OwnedBy(*s.owners.Load(), accountID)
}

// setOwner publishes the owner of clientID ("" for none); the caller
// holds writeMu.
func (s *Store) setOwner(clientID, accountID string) {
	old := *s.owners.Load()
	m := make(map[string]string, len(old)+1)
	for c, a := range old {
		if c != clientID {
			m[c] = a
		}
	}
	if accountID != "" {
		m[clientID] = accountID
	}
	s.owners.Store(&m)
}
