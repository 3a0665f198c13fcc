package shared

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/steady"
	"github.com/tabletop-relay/relay/link"
)

// Buckets of the linked worlds: pairing codes expire, so they have their
// own bucket whose entries JetStream forgets after codesMaxAge; worlds and
// connection tokens stay until unpaired.
const (
	CodesBucket = "relay_pairing_codes"
	LinksBucket = "relay_links"
)

// codesMaxAge is how long the codes bucket keeps an entry: a code lapses
// after link.CodeTTL (checked from its record); the margin covers clocks
// that differ a little between nodes.
const codesMaxAge = link.CodeTTL + time.Minute

// LinkStore keeps pairing codes, linked worlds and connection tokens in
// JetStream key-value buckets shared by every node, so that a tabletop may
// pair and connect through any node. It implements link.Store.
//
// Entries: "c.<hash>" a pairing code (codes bucket); "w.<clientId>" a
// world with the hash of its one valid token, "t.<hash>" a token's world
// (links bucket). A token is valid when its world's record names it and
// the world is paired: the world's record is the authority, so a pairing
// that replaces a token, or an unpairing, takes effect with the one
// compare-and-set write of that record.
type LinkStore struct {
	codes jetstream.KeyValue
	links jetstream.KeyValue
}

var _ link.Store = (*LinkStore)(nil)

// codeRecord is a pairing code as the bucket stores it.
type codeRecord struct {
	ClientID  string    `json:"clientId,omitempty"`
	CreatedBy string    `json:"createdBy"`
	Account   string    `json:"account,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// worldRecord is a linked world as the bucket stores it.
type worldRecord struct {
	World link.World `json:"world"`
	// Token is the hex hash of the world's valid token; empty when it has
	// none (unpaired).
	Token string `json:"token,omitempty"`
}

// tokenRecord is a connection token as the bucket stores it.
type tokenRecord struct {
	ClientID  string    `json:"clientId"`
	CreatedAt time.Time `json:"createdAt"`
}

// OpenLinks opens (creating if needed) the buckets of the linked worlds.
func OpenLinks(ctx context.Context, js jetstream.JetStream, opts Options) (*LinkStore, error) {
	codes, err := openBucket(ctx, js, opts.Replicas, jetstream.KeyValueConfig{
		Bucket:      CodesBucket,
		Description: "relay pairing codes (hashes only)",
		History:     1,
		TTL:         codesMaxAge,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	links, err := openBucket(ctx, js, opts.Replicas, jetstream.KeyValueConfig{
		Bucket:      LinksBucket,
		Description: "relay linked worlds and connection tokens (hashes only)",
		History:     1,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	return &LinkStore{codes: codes, links: links}, nil
}

func hexOf(h link.Hash) string { return hex.EncodeToString(h[:]) }

// SaveCode implements link.Store.
func (s *LinkStore) SaveCode(ctx context.Context, c link.Code) error {
	data, err := json.Marshal(codeRecord{ClientID: c.ClientID, CreatedBy: c.CreatedBy, Account: c.Account, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt})
	if err != nil {
		return err
	}
	if _, err := s.codes.Create(ctx, "c."+hexOf(c.Hash), data); err != nil {
		return fmt.Errorf("shared: save pairing code: %w", err)
	}
	return nil
}

// TakeCode implements link.Store: the code's entry is deleted on the
// condition that nobody changed it since it was read, so that of two
// nodes taking one code at once only one succeeds.
func (s *LinkStore) TakeCode(ctx context.Context, h link.Hash, now time.Time) (link.Code, error) {
	name := "c." + hexOf(h)
	e, err := s.codes.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return link.Code{}, link.ErrCodeRejected
	}
	if err != nil {
		return link.Code{}, fmt.Errorf("shared: take pairing code: %w", err)
	}
	if err := s.codes.Delete(ctx, name, jetstream.LastRevision(e.Revision())); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			return link.Code{}, link.ErrCodeRejected
		}
		return link.Code{}, fmt.Errorf("shared: take pairing code: %w", err)
	}
	var rec codeRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return link.Code{}, fmt.Errorf("shared: take pairing code: %w", err)
	}
	if !now.Before(rec.ExpiresAt) {
		return link.Code{}, link.ErrCodeRejected
	}
	return link.Code{Hash: h, ClientID: rec.ClientID, CreatedBy: rec.CreatedBy, Account: rec.Account, CreatedAt: rec.CreatedAt.UTC(), ExpiresAt: rec.ExpiresAt.UTC()}, nil
}

// worldEntry reads a world's record and revision.
func (s *LinkStore) worldEntry(ctx context.Context, clientID string) (worldRecord, uint64, error) {
	if !validSubjectToken(clientID) {
		return worldRecord{}, 0, link.UnknownWorld(clientID)
	}
	e, err := s.links.Get(ctx, "w."+clientID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return worldRecord{}, 0, link.UnknownWorld(clientID)
	}
	if err != nil {
		return worldRecord{}, 0, fmt.Errorf("shared: read linked world: %w", err)
	}
	var rec worldRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return worldRecord{}, 0, fmt.Errorf("shared: read linked world: %w", err)
	}
	return rec, e.Revision(), nil
}

// validSubjectToken reports whether s may be used in an entry's name (a
// clientId comes from callers; only well-formed ones name entries).
func validSubjectToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, c := range s {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// World implements link.Store.
func (s *LinkStore) World(ctx context.Context, clientID string) (link.World, error) {
	rec, _, err := s.worldEntry(ctx, clientID)
	return rec.World, err
}

// Worlds implements link.Store.
func (s *LinkStore) Worlds(ctx context.Context) ([]link.World, error) {
	l, err := s.links.ListKeysFiltered(ctx, "w.>")
	if err != nil {
		return nil, fmt.Errorf("shared: list linked worlds: %w", err)
	}
	var ids []string
	for name := range l.Keys() {
		ids = append(ids, strings.TrimPrefix(name, "w."))
	}
	slices.Sort(ids)
	out := make([]link.World, 0, len(ids))
	for _, id := range ids {
		w, err := s.World(ctx, id)
		if errors.Is(err, link.ErrUnknownWorld) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// Pair implements link.Store: the new token's entry is written first, then
// the world's record naming it (created for a new world, so that a
// clientId is never taken twice; replaced with compare and set
// otherwise), then the entry of the token it replaced is removed. Until
// the world's record is written the new token is not valid; from then on
// the old one is not.
func (s *LinkStore) Pair(ctx context.Context, p link.Pairing) error {
	w := p.World
	if !validSubjectToken(w.ClientID) {
		return fmt.Errorf("shared: pair: malformed clientId %q", w.ClientID)
	}
	tok := hexOf(p.Token.Hash)
	data, err := json.Marshal(tokenRecord{ClientID: w.ClientID, CreatedAt: p.Token.CreatedAt})
	if err != nil {
		return err
	}
	if _, err := s.links.Put(ctx, "t."+tok, data); err != nil {
		return fmt.Errorf("shared: pair: %w", err)
	}
	w.UnpairedAt = time.Time{}
	rec := worldRecord{World: w, Token: tok}
	data, err = json.Marshal(rec)
	if err != nil {
		return err
	}
	var previous string
	if p.New {
		if _, err := s.links.Create(ctx, "w."+w.ClientID, data); err != nil {
			return fmt.Errorf("shared: pair: %w", err)
		}
	} else {
		for {
			old, rev, err := s.worldEntry(ctx, w.ClientID)
			switch {
			case errors.Is(err, link.ErrUnknownWorld):
				_, err = s.links.Create(ctx, "w."+w.ClientID, data)
			case err == nil:
				previous = old.Token
				_, err = s.links.Update(ctx, "w."+w.ClientID, data, rev)
			}
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			if err != nil {
				return fmt.Errorf("shared: pair: %w", err)
			}
			break
		}
	}
	if previous != "" && previous != tok {
		_ = s.links.Delete(ctx, "t."+previous)
	}
	return nil
}

// TokenWorld implements link.Store: a token is valid when its world's
// record names it.
func (s *LinkStore) TokenWorld(ctx context.Context, h link.Hash) (string, error) {
	tok := hexOf(h)
	e, err := s.links.Get(ctx, "t."+tok)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", link.ErrTokenRejected
	}
	if err != nil {
		return "", fmt.Errorf("shared: read token: %w", err)
	}
	var t tokenRecord
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return "", fmt.Errorf("shared: read token: %w", err)
	}
	rec, _, err := s.worldEntry(ctx, t.ClientID)
	if errors.Is(err, link.ErrUnknownWorld) {
		return "", link.ErrTokenRejected
	}
	if err != nil {
		return "", err
	}
	if rec.Token != tok || !rec.World.Paired() {
		return "", link.ErrTokenRejected
	}
	return t.ClientID, nil
}

// Unpair implements link.Store.
func (s *LinkStore) Unpair(ctx context.Context, clientID string, now time.Time) (int, error) {
	for {
		rec, rev, err := s.worldEntry(ctx, clientID)
		if err != nil {
			return 0, err
		}
		revoked := 0
		tok := rec.Token
		if tok != "" {
			revoked = 1
		}
		rec.Token = ""
		if rec.World.UnpairedAt.IsZero() {
			rec.World.UnpairedAt = now.UTC()
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return 0, err
		}
		_, err = s.links.Update(ctx, "w."+clientID, data, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("shared: unpair: %w", err)
		}
		if tok != "" {
			_ = s.links.Delete(ctx, "t."+tok)
		}
		return revoked, nil
	}
}

// Import stores the linked worlds of a single node that joins the
// cluster, each with its valid token (link.SQLiteStore.Export), so that
// their tabletops keep their clientIds and tokens: but only into a store
// that holds no linked world yet (the first node to join brings its own).
// It reports how many worlds it stored.
func (s *LinkStore) Import(ctx context.Context, ps []link.Pairing) (int, error) {
	if len(ps) == 0 {
		return 0, nil
	}
	if ws, err := s.Worlds(ctx); err != nil || len(ws) > 0 {
		return 0, err
	}
	for i, p := range ps {
		if !validSubjectToken(p.World.ClientID) {
			return i, fmt.Errorf("shared: import linked worlds: malformed clientId %q", p.World.ClientID)
		}
		rec := worldRecord{World: p.World}
		if p.Token.Hash != (link.Hash{}) {
			data, err := json.Marshal(tokenRecord{ClientID: p.World.ClientID, CreatedAt: p.Token.CreatedAt})
			if err != nil {
				return i, err
			}
			if _, err := s.links.Put(ctx, "t."+hexOf(p.Token.Hash), data); err != nil {
				return i, fmt.Errorf("shared: import linked worlds: %w", err)
			}
			rec.Token = hexOf(p.Token.Hash)
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return i, err
		}
		if _, err := s.links.Create(ctx, "w."+p.World.ClientID, data); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				return i, nil // another node is importing at the same time
			}
			return i, fmt.Errorf("shared: import linked worlds: %w", err)
		}
	}
	return len(ps), nil
}

// WatchUnpaired calls fn with the clientId of every linked world that is
// unpaired on any node, so that the node holding the world's socket closes
// it (on a single node, the unpairing closes it directly): each world
// unpaired when the watch starts, then each one unpaired later. fn runs on
// the watcher's goroutine, and may be called again for a world it was
// called for (after the watcher was replaced). Stop the watcher with the
// returned function.
func (s *LinkStore) WatchUnpaired(ctx context.Context, fn func(clientID string)) (stop func(), err error) {
	// A follower replaces a watcher that stops delivering: a node whose
	// watcher went silent would keep the socket of a world unpaired
	// elsewhere.
	f, err := steady.Follow(ctx, s.links, []string{"w.>"}, steady.FollowOptions{}, func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			return
		}
		var rec worldRecord
		if json.Unmarshal(e.Value(), &rec) == nil && !rec.World.Paired() {
			fn(rec.World.ClientID)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("shared: watch linked worlds: %w", err)
	}
	return func() { f.Close(stopTimeout) }, nil
}
