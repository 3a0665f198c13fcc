package link

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tabletop-relay/relay/world"
)

// EventJournal keeps the retained events of linked worlds across restarts,
// so that a stream resumes after a restart of the relay as it does within
// one run, and sequence numbers keep increasing. [SQLiteStore] is one.
type EventJournal interface {
	// AppendEvents stores events of a world (in sequence order, encoded)
	// and forgets those of its events at or below forget.
	AppendEvents(ctx context.Context, clientID string, events []JournalEvent, forget uint64) error
	// LoadEvents returns the stored events of a world, oldest first.
	LoadEvents(ctx context.Context, clientID string) ([]JournalEvent, error)
}

// JournalEvent is one stored event: its sequence number and its encoding.
type JournalEvent struct {
	Seq  uint64
	Data []byte
}

// storedEvent is a linkedEvent as the journal keeps it.
type storedEvent struct {
	Name       string             `json:"name"`
	Channel    world.EventChannel `json:"ch"`
	Filter     string             `json:"f,omitempty"`
	Data       json.RawMessage    `json:"full"`
	Player     json.RawMessage    `json:"player,omitempty"`
	Limited    json.RawMessage    `json:"limited,omitempty"`
	GMOnly     bool               `json:"gm,omitempty"`
	NoPlayer   bool               `json:"np,omitempty"`
	AccessType string             `json:"at,omitempty"`
	Access     world.Document     `json:"acc,omitempty"`
	Parts      []storedPart       `json:"parts,omitempty"`
}

// storedPart is a part as the journal keeps it.
type storedPart struct {
	Owner    world.Document `json:"owner,omitempty"`
	Path     []string       `json:"path"`
	Keys     []string       `json:"keys"`
	Required bool           `json:"req,omitempty"`
}

// encode writes le for the journal.
func (le *linkedEvent) encode() ([]byte, error) {
	st := storedEvent{Name: le.Name, Channel: le.channel, Filter: le.filter, Data: le.Data, Player: le.player, Limited: le.limited,
		GMOnly: le.gmOnly, NoPlayer: le.noPlayerView, AccessType: le.accessType, Access: le.access}
	for _, p := range le.parts {
		st.Parts = append(st.Parts, storedPart{Owner: p.owner, Path: p.path, Keys: p.keys, Required: p.required})
	}
	return json.Marshal(st)
}

// decodeEvent reads an event from the journal.
func decodeEvent(je JournalEvent) (linkedEvent, error) {
	var st storedEvent
	if err := json.Unmarshal(je.Data, &st); err != nil {
		return linkedEvent{}, fmt.Errorf("link: stored event %d: %w", je.Seq, err)
	}
	le := linkedEvent{channel: st.Channel, filter: st.Filter, player: st.Player, limited: st.Limited,
		gmOnly: st.GMOnly, noPlayerView: st.NoPlayer, accessType: st.AccessType, access: st.Access}
	le.Seq, le.Name, le.Data = je.Seq, st.Name, st.Data
	for _, p := range st.Parts {
		le.parts = append(le.parts, part{owner: p.Owner, path: p.Path, keys: p.Keys, required: p.Required})
	}
	return le, nil
}

// AppendEvents implements [EventJournal].
func (s *SQLiteStore) AppendEvents(ctx context.Context, clientID string, events []JournalEvent, forget uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("link: store events: %w", err)
	}
	defer tx.Rollback()
	for _, ev := range events {
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO link_events (client_id, seq, event) VALUES (?, ?, ?)`, clientID, int64(ev.Seq), ev.Data); err != nil {
			return fmt.Errorf("link: store events: %w", err)
		}
	}
	if forget > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM link_events WHERE client_id = ? AND seq <= ?`, clientID, int64(forget)); err != nil {
			return fmt.Errorf("link: store events: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("link: store events: %w", err)
	}
	return nil
}

// LoadEvents implements [EventJournal].
func (s *SQLiteStore) LoadEvents(ctx context.Context, clientID string) ([]JournalEvent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, event FROM link_events WHERE client_id = ? ORDER BY seq`, clientID)
	if err != nil {
		return nil, fmt.Errorf("link: load events: %w", err)
	}
	defer rows.Close()
	var out []JournalEvent
	for rows.Next() {
		var seq int64
		var data []byte
		if err := rows.Scan(&seq, &data); err != nil {
			return nil, fmt.Errorf("link: load events: %w", err)
		}
		out = append(out, JournalEvent{Seq: uint64(seq), Data: data})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("link: load events: %w", err)
	}
	return out, nil
}
