package shared

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
//
// The list of linked worlds (Worlds), which the relay reads on every call
// that names no world, is answered from memory: the store loads every
// world's record when it opens and a follower of the bucket keeps them
// current (a node's own pairings enter at once, other nodes' within the
// watcher's delay, typically milliseconds). Listing the bucket would
// create and delete a JetStream consumer on each call. One world's record
// (World) and a token (TokenWorld) are still read from the bucket, so
// authentication and a call naming a world just paired elsewhere see the
// bucket's latest state.
type LinkStore struct {
	codes jetstream.KeyValue
	links jetstream.KeyValue

	follower *steady.Follower

	// mu guards known, list and watchers. known holds each linked world's
	// record as last read or written, with the bucket revision it was at;
	// list is the same records sorted by clientId, made again when the
	// first caller needs it after a change (nil until then).
	mu       sync.Mutex
	known    map[string]knownWorld
	list     []link.World
	watchers map[*unpairedWatcher]struct{}
}

// knownWorld is a linked world's record and the revision it was read at.
type knownWorld struct {
	world link.World
	rev   uint64
}

// unpairedWatcher is one caller of WatchUnpaired.
type unpairedWatcher struct{ fn func(clientID string) }

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
	s := &LinkStore{codes: codes, links: links, known: map[string]knownWorld{}, watchers: map[*unpairedWatcher]struct{}{}}
	// The follower loads every world's record, then applies each change;
	// it replaces its watcher when the watcher goes silent, since a node
	// whose list stopped following would neither see new pairings nor
	// close the sockets of worlds unpaired elsewhere.
	if s.follower, err = steady.Follow(ctx, links, []string{"w.>"}, steady.FollowOptions{}, s.apply); err != nil {
		return nil, fmt.Errorf("shared: watch linked worlds: %w", err)
	}
	return s, nil
}

// Close stops following the bucket. The store must not be used after.
func (s *LinkStore) Close() {
	s.follower.Close(stopTimeout)
}

// apply takes a watched world's record into memory and tells the
// watchers of WatchUnpaired when it is unpaired.
func (s *LinkStore) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var rec worldRecord
	if json.Unmarshal(e.Value(), &rec) != nil || rec.World.ClientID == "" {
		return
	}
	s.remember(rec.World, e.Revision())
	if rec.World.Paired() {
		return
	}
	s.mu.Lock()
	fns := make([]func(string), 0, len(s.watchers))
	for w := range s.watchers {
		fns = append(fns, w.fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(rec.World.ClientID)
	}
}

// remember keeps w, read or written at revision rev, unless a later
// revision of its record is known already (the watcher may deliver a
// node's own write after the write itself was remembered).
func (s *LinkStore) remember(w link.World, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.known[w.ClientID]; ok && k.rev >= rev {
		return
	}
	s.known[w.ClientID] = knownWorld{world: w, rev: rev}
	s.list = nil
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
	if err := steady.DeleteAt(ctx, s.codes, name, e.Revision()); err != nil {
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

// Worlds implements link.Store, from memory (see [LinkStore]).
func (s *LinkStore) Worlds(context.Context) ([]link.World, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.list == nil {
		s.list = make([]link.World, 0, len(s.known))
		for _, k := range s.known {
			s.list = append(s.list, k.world)
		}
		slices.SortFunc(s.list, func(a, b link.World) int { return strings.Compare(a.ClientID, b.ClientID) })
	}
	return slices.Clone(s.list), nil
}

// anyWorld reports whether the bucket holds a linked world, reading the
// bucket itself (not memory): Import must not add to a cluster whose
// worlds this node has not seen yet.
func (s *LinkStore) anyWorld(ctx context.Context) (bool, error) {
	l, err := s.links.ListKeysFiltered(ctx, "w.>")
	if err != nil {
		return false, fmt.Errorf("shared: list linked worlds: %w", err)
	}
	found := false
	for range l.Keys() {
		found = true
	}
	return found, nil
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
	var written uint64
	if p.New {
		if written, err = s.links.Create(ctx, "w."+w.ClientID, data); err != nil {
			return fmt.Errorf("shared: pair: %w", err)
		}
	} else {
		for {
			old, rev, err := s.worldEntry(ctx, w.ClientID)
			switch {
			case errors.Is(err, link.ErrUnknownWorld):
				written, err = s.links.Create(ctx, "w."+w.ClientID, data)
			case err == nil:
				previous = old.Token
				written, err = s.links.Update(ctx, "w."+w.ClientID, data, rev)
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
	s.remember(w, written)
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
		written, err := s.links.Update(ctx, "w."+clientID, data, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("shared: unpair: %w", err)
		}
		s.remember(rec.World, written)
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
	if found, err := s.anyWorld(ctx); err != nil || found {
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
		written, err := s.links.Create(ctx, "w."+p.World.ClientID, data)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				return i, nil // another node is importing at the same time
			}
			return i, fmt.Errorf("shared: import linked worlds: %w", err)
		}
		s.remember(p.World, written)
	}
	return len(ps), nil
}

// WatchUnpaired calls fn with the clientId of every linked world that is
// unpaired on any node, so that the node holding the world's socket closes
// it (on a single node, the unpairing closes it directly): each world
// unpaired when the watch starts (on the caller's goroutine), then each
// one unpaired later (on the store's follower's goroutine). fn may be
// called again for a world it was called for (after the follower replaced
// its watcher). Stop the watch with the returned function.
func (s *LinkStore) WatchUnpaired(_ context.Context, fn func(clientID string)) (stop func(), err error) {
	w := &unpairedWatcher{fn: fn}
	s.mu.Lock()
	s.watchers[w] = struct{}{}
	var unpaired []string
	for id, k := range s.known {
		if !k.world.Paired() {
			unpaired = append(unpaired, id)
		}
	}
	s.mu.Unlock()
	for _, id := range unpaired {
		fn(id)
	}
	return func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	}, nil
}
