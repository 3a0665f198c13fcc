package shared

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/server/keys"
)

// ownerEntryPrefix starts the entries of the keys bucket that record the
// owner of an embedded world: "w.<clientId>" holds the account's id.
const ownerEntryPrefix = "w."

var _ keys.WorldOwners = (*KeyStore)(nil)

// applyOwner takes a watched owner entry into memory.
func (s *KeyStore) applyOwner(e jetstream.KeyValueEntry) {
	clientID, _ := strings.CutPrefix(e.Key(), ownerEntryPrefix)
	if e.Operation() != jetstream.KeyValuePut {
		s.setOwner(clientID, "")
		return
	}
	s.setOwner(clientID, string(e.Value()))
}

// setOwner publishes the owner of clientID ("" for none).
func (s *KeyStore) setOwner(clientID, accountID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// ClaimWorld implements keys.WorldOwners: the entry is created only if
// no node made it first.
func (s *KeyStore) ClaimWorld(ctx context.Context, clientID, accountID string) error {
	if !validEntryToken(clientID) {
		return fmt.Errorf("shared: claim world: invalid client id %q", clientID)
	}
	if _, err := s.kv.Create(ctx, ownerEntryPrefix+clientID, []byte(accountID)); errors.Is(err, jetstream.ErrKeyExists) {
		return keys.WorldClaimed(clientID)
	} else if err != nil {
		return fmt.Errorf("shared: claim world: %w", err)
	}
	s.setOwner(clientID, accountID)
	return nil
}

// ReleaseWorld implements keys.WorldOwners.
func (s *KeyStore) ReleaseWorld(ctx context.Context, clientID string) error {
	if !validEntryToken(clientID) {
		return nil
	}
	if err := s.kv.Delete(ctx, ownerEntryPrefix+clientID); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("shared: release world: %w", err)
	}
	s.setOwner(clientID, "")
	return nil
}

// WorldOwner implements keys.WorldOwners.
func (s *KeyStore) WorldOwner(clientID string) (string, bool) {
	a, ok := (*s.owners.Load())[clientID]
	return a, ok
}

// OwnedWorlds implements keys.WorldOwners.
func (s *KeyStore) OwnedWorlds(accountID string) []string {
	return keys.OwnedBy(*s.owners.Load(), accountID)
}
