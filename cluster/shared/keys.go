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
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/steady"
	"github.com/tabletop-relay/relay/server/keys"
)

// KeysBucket is the bucket of the API keys.
const KeysBucket = "relay_keys"

// Entries of the keys bucket: "k.<hash>" holds a key's record under the
// hex SHA-256 of its plaintext (so a presented key is found with one
// read), "i.<id>" the hash of the key with that id, and bootstrapEntry
// marks that the first admin key was made.
const (
	keyEntryPrefix = "k."
	idEntryPrefix  = "i."
	bootstrapEntry = "bootstrap"
)

// readThroughTimeout bounds the read of a presented key that is not in
// memory yet.
const readThroughTimeout = 2 * time.Second

// KeyStore keeps the API keys in a JetStream key-value bucket shared by
// every node, with an in-memory index that Authenticate answers from. It
// implements keys.Backend with the same rules as the SQLite store (keys
// are minted by keys.Mint and judged by keys.Authorize).
//
// Each node's index is loaded when the store opens and kept fresh by a
// watcher of the bucket; a node's own changes enter its index at once. A
// presented key that is not in the index is read from the bucket (and
// then kept), so a key created on another node works before the watcher
// delivers it. A revocation reaches the other nodes through their
// watchers.
type KeyStore struct {
	kv    jetstream.KeyValue
	clock func() time.Time

	mu  sync.Mutex // serialises index updates
	idx atomic.Pointer[keyIndex]
	// suspended holds the suspended accounts by id, for Authenticate;
	// never modified once published.
	suspended atomic.Pointer[map[string]keys.Account]
	// owners holds the owners of embedded worlds by client id (see
	// keys.WorldOwners); never modified once published.
	owners atomic.Pointer[map[string]string]

	follower *steady.Follower
}

var _ keys.Backend = (*KeyStore)(nil)

// keyIndex is an immutable snapshot of the keys a node knows.
type keyIndex struct {
	byHash map[[sha256.Size]byte]*indexed
	byID   map[string][sha256.Size]byte
}

// indexed is a key and the bucket revision it was read at.
type indexed struct {
	key keys.Key
	rev uint64
}

// keyRecord is a key as the bucket stores it.
type keyRecord struct {
	Key keys.Key `json:"key"`
	// Hash is the hex SHA-256 of the plaintext (also in the entry's name).
	Hash string `json:"hash"`
}

// OpenKeys opens (creating if needed) the keys bucket, loads every key
// into memory and starts watching the bucket. Close stops the watcher.
func OpenKeys(ctx context.Context, js jetstream.JetStream, opts Options) (*KeyStore, error) {
	kv, err := openBucket(ctx, js, opts.Replicas, jetstream.KeyValueConfig{
		Bucket:      KeysBucket,
		Description: "relay API keys (hashes only)",
		History:     1,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	s := &KeyStore{kv: kv, clock: opts.now}
	if opts.Clock != nil {
		s.clock = opts.Clock
	}
	s.idx.Store(&keyIndex{byHash: map[[sha256.Size]byte]*indexed{}, byID: map[string][sha256.Size]byte{}})
	s.suspended.Store(&map[string]keys.Account{})
	s.owners.Store(&map[string]string{})
	// The follower loads every key, then applies each change, replacing
	// its watcher if it ever stops delivering: a node whose watcher went
	// silent would keep accepting keys revoked elsewhere.
	f, err := steady.Follow(ctx, kv, []string{keyEntryPrefix + ">", accountEntryPrefix + ">", ownerEntryPrefix + ">"}, steady.FollowOptions{}, s.apply)
	if err != nil {
		return nil, fmt.Errorf("shared: watch keys: %w", err)
	}
	s.follower = f
	return s, nil
}

// apply puts a watched entry into the index.
func (s *KeyStore) apply(e jetstream.KeyValueEntry) {
	if strings.HasPrefix(e.Key(), accountEntryPrefix) {
		s.applyAccount(e)
		return
	}
	if strings.HasPrefix(e.Key(), ownerEntryPrefix) {
		s.applyOwner(e)
		return
	}
	h, ok := hashOfEntry(e.Key())
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		s.forget(h, e.Revision())
		return
	}
	var rec keyRecord
	if json.Unmarshal(e.Value(), &rec) != nil {
		return
	}
	s.remember(h, rec.Key, e.Revision())
}

// hashOfEntry reads the hash from a "k.<hash>" entry name.
func hashOfEntry(name string) ([sha256.Size]byte, bool) {
	var h [sha256.Size]byte
	hexHash, ok := strings.CutPrefix(name, keyEntryPrefix)
	if !ok || hex.DecodedLen(len(hexHash)) != len(h) {
		return h, false
	}
	if _, err := hex.Decode(h[:], []byte(hexHash)); err != nil {
		return h, false
	}
	return h, true
}

// remember puts k, read at revision rev, into the index unless the index
// holds a later revision of it already (the watcher may deliver an older
// revision after this node's own newer write).
func (s *KeyStore) remember(h [sha256.Size]byte, k keys.Key, rev uint64) keys.Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.idx.Load()
	if cur := old.byHash[h]; cur != nil && cur.rev >= rev {
		return cur.key
	}
	n := &keyIndex{byHash: make(map[[sha256.Size]byte]*indexed, len(old.byHash)+1), byID: make(map[string][sha256.Size]byte, len(old.byID)+1)}
	for hh, v := range old.byHash {
		n.byHash[hh] = v
	}
	for id, hh := range old.byID {
		n.byID[id] = hh
	}
	n.byHash[h] = &indexed{key: k, rev: rev}
	n.byID[k.ID] = h
	s.idx.Store(n)
	return k
}

// forget removes a deleted key from the index.
func (s *KeyStore) forget(h [sha256.Size]byte, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.idx.Load()
	cur := old.byHash[h]
	if cur == nil || cur.rev > rev {
		return
	}
	n := &keyIndex{byHash: make(map[[sha256.Size]byte]*indexed, len(old.byHash)), byID: make(map[string][sha256.Size]byte, len(old.byID))}
	for hh, v := range old.byHash {
		if hh != h {
			n.byHash[hh] = v
		}
	}
	for id, hh := range old.byID {
		if hh != h {
			n.byID[id] = hh
		}
	}
	s.idx.Store(n)
}

// Close stops watching the bucket. Authenticate keeps answering from
// memory.
func (s *KeyStore) Close() error {
	s.follower.Close(stopTimeout)
	return nil
}

// Authenticate returns the key whose plaintext is presented, with the
// errors of keys.Store.Authenticate. It answers from memory; a well-formed
// key that is not there is read from the bucket once (a key just created
// on another node).
func (s *KeyStore) Authenticate(ctx context.Context, plaintext string) (keys.Key, error) {
	k, err := s.usable(ctx, plaintext)
	if err != nil {
		return keys.Key{}, err
	}
	return k.Clone(), nil
}

// Check reports what Authenticate would, without handing out a copy of the
// key: admission needs only the verdict.
func (s *KeyStore) Check(ctx context.Context, plaintext string) error {
	_, err := s.usable(ctx, plaintext)
	return err
}

// usable returns the remembered record of the usable key presented; its
// lists are the store's own, not to be handed out.
func (s *KeyStore) usable(ctx context.Context, plaintext string) (keys.Key, error) {
	h, err := keys.HashPresented(plaintext)
	if err != nil {
		return keys.Key{}, err
	}
	var k keys.Key
	if cur := s.idx.Load().byHash[h]; cur != nil {
		k = cur.key
	} else {
		rctx, cancel := context.WithTimeout(ctx, readThroughTimeout)
		defer cancel()
		got, rev, err := s.read(rctx, h)
		if err != nil {
			return keys.Key{}, keys.ErrUnknown
		}
		k = s.remember(h, got, rev)
	}
	if err := k.Usable(s.clock()); err != nil {
		return keys.Key{}, err
	}
	if a, ok := (*s.suspended.Load())[k.Account()]; ok {
		return keys.Key{}, keys.SuspendedError(a)
	}
	return k, nil
}

// read reads the key with hash h from the bucket.
func (s *KeyStore) read(ctx context.Context, h [sha256.Size]byte) (keys.Key, uint64, error) {
	e, err := s.kv.Get(ctx, keyEntryPrefix+hex.EncodeToString(h[:]))
	if err != nil {
		return keys.Key{}, 0, err
	}
	var rec keyRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return keys.Key{}, 0, fmt.Errorf("shared: key record %s: %w", e.Key(), err)
	}
	return rec.Key, e.Revision(), nil
}

// Create stores a new key, checking no authority (see keys.Store.Create).
func (s *KeyStore) Create(ctx context.Context, spec keys.Spec) (string, keys.Key, error) {
	return s.create(ctx, spec, "", nil)
}

// CreateAs creates a key on the authority of actor (see
// keys.Store.CreateAs).
func (s *KeyStore) CreateAs(ctx context.Context, actor keys.Key, spec keys.Spec) (string, keys.Key, error) {
	check, err := keys.CreateCheck(actor)
	if err != nil {
		return "", keys.Key{}, err
	}
	// A key is always made in the account of the key that creates it.
	spec.AccountID = actor.Account()
	return s.create(ctx, spec, actor.ID, check)
}

// create mints a key and stores it: first the id's entry, then the record,
// so that a key is never usable without being reachable by its id.
func (s *KeyStore) create(ctx context.Context, spec keys.Spec, createdBy string, check func(keys.Key) error) (string, keys.Key, error) {
	m, err := keys.Mint(spec, createdBy, s.clock(), check)
	if err != nil {
		return "", keys.Key{}, err
	}
	if err := s.store(ctx, m); err != nil {
		return "", keys.Key{}, err
	}
	return m.Plaintext, m.Key.Clone(), nil
}

// store writes a minted key's entries and puts it in the index.
func (s *KeyStore) store(ctx context.Context, m keys.Minted) error {
	hexHash := hex.EncodeToString(m.Hash[:])
	data, err := json.Marshal(keyRecord{Key: m.Key, Hash: hexHash})
	if err != nil {
		return fmt.Errorf("shared: create key: %w", err)
	}
	if _, err := s.kv.Create(ctx, idEntryPrefix+m.Key.ID, []byte(hexHash)); err != nil {
		return fmt.Errorf("shared: create key: %w", err)
	}
	rev, err := s.kv.Create(ctx, keyEntryPrefix+hexHash, data)
	if err != nil {
		return fmt.Errorf("shared: create key: %w", err)
	}
	s.remember(m.Hash, m.Key, rev)
	return nil
}

// Import stores the keys of a single node that joins the cluster, with
// their ids, hashes, states and creators, so that they keep working: but
// only into a bucket that holds no key yet (the first node to join brings
// its keys; the keys of the others are theirs alone and are not merged).
// It reports how many keys it stored; the bootstrap entry is claimed
// first, so the cluster bootstraps no admin key of its own after an import.
func (s *KeyStore) Import(ctx context.Context, ks []keys.Exported) (int, error) {
	if len(ks) == 0 {
		return 0, nil
	}
	if n, err := s.Count(ctx); err != nil || n > 0 {
		return 0, err
	}
	if _, err := s.kv.Create(ctx, bootstrapEntry, []byte("imported "+s.clock().UTC().Format(time.RFC3339Nano))); errors.Is(err, jetstream.ErrKeyExists) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("shared: import keys: %w", err)
	}
	for i, e := range ks {
		if err := s.store(ctx, keys.Minted{Key: e.Key, Hash: e.Hash}); err != nil {
			return i, fmt.Errorf("shared: import keys: %w", err)
		}
	}
	return len(ks), nil
}

// List returns every key, revoked ones included, in order of creation.
// It answers from the index, which holds every key the watcher delivered.
func (s *KeyStore) List(ctx context.Context) ([]keys.Key, error) {
	ix := s.idx.Load()
	out := make([]keys.Key, 0, len(ix.byHash))
	for _, v := range ix.byHash {
		out = append(out, v.key.Clone())
	}
	slices.SortFunc(out, func(a, b keys.Key) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// ListAs returns the keys that actor may see (see keys.Store.ListAs).
func (s *KeyStore) ListAs(ctx context.Context, actor keys.Key) ([]keys.Key, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(k keys.Key) bool { return keys.Authorize(actor, keys.ActionList, k) != nil }), nil
}

// Get returns the key with the given id, from memory when the node knows
// it, otherwise from the bucket; an error wrapping keys.ErrNotFound when
// there is none.
func (s *KeyStore) Get(ctx context.Context, id string) (keys.Key, error) {
	ix := s.idx.Load()
	if h, ok := ix.byID[id]; ok {
		return ix.byHash[h].key.Clone(), nil
	}
	k, _, _, err := s.readByID(ctx, id)
	return k, err
}

// readByID reads the key with the given id from the bucket, with its hash
// and revision.
func (s *KeyStore) readByID(ctx context.Context, id string) (keys.Key, [sha256.Size]byte, uint64, error) {
	var h [sha256.Size]byte
	e, err := s.kv.Get(ctx, idEntryPrefix+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return keys.Key{}, h, 0, keys.NotFound(id)
	}
	if err != nil {
		return keys.Key{}, h, 0, fmt.Errorf("shared: get key: %w", err)
	}
	var ok bool
	if h, ok = hashOfEntry(keyEntryPrefix + string(e.Value())); !ok {
		return keys.Key{}, h, 0, fmt.Errorf("shared: get key: bad entry for id %s", id)
	}
	k, rev, err := s.read(ctx, h)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return keys.Key{}, h, 0, keys.NotFound(id)
	}
	if err != nil {
		return keys.Key{}, h, 0, fmt.Errorf("shared: get key: %w", err)
	}
	return k, h, rev, nil
}

// Revoke revokes the key with the given id, checking no authority (see
// keys.Store.Revoke).
func (s *KeyStore) Revoke(ctx context.Context, id string) (keys.Key, error) {
	return s.revoke(ctx, id, nil)
}

// RevokeAs revokes the key with the given id on the authority of actor
// (see keys.Store.RevokeAs).
func (s *KeyStore) RevokeAs(ctx context.Context, actor keys.Key, id string) (keys.Key, error) {
	return s.revoke(ctx, id, func(k keys.Key) error { return keys.Authorize(actor, keys.ActionRevoke, k) })
}

// revoke reads the key from the bucket, lets check judge it, and writes
// it back revoked if nobody changed it in between (compare and set),
// reading again when someone did.
func (s *KeyStore) revoke(ctx context.Context, id string, check func(keys.Key) error) (keys.Key, error) {
	for {
		k, h, rev, err := s.readByID(ctx, id)
		if err != nil {
			return keys.Key{}, err
		}
		if check != nil {
			if err := check(k); err != nil {
				return keys.Key{}, err
			}
		}
		k = k.RevokedNow(s.clock())
		data, err := json.Marshal(keyRecord{Key: k, Hash: hex.EncodeToString(h[:])})
		if err != nil {
			return keys.Key{}, fmt.Errorf("shared: revoke key: %w", err)
		}
		newRev, err := s.kv.Update(ctx, keyEntryPrefix+hex.EncodeToString(h[:]), data, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return keys.Key{}, fmt.Errorf("shared: revoke key: %w", err)
		}
		s.remember(h, k, newRev)
		return k.Clone(), nil
	}
}

// Count returns the number of stored keys, revoked ones included, as the
// bucket has them.
func (s *KeyStore) Count(ctx context.Context) (int, error) {
	l, err := s.kv.ListKeysFiltered(ctx, keyEntryPrefix+">")
	if err != nil {
		return 0, fmt.Errorf("shared: count keys: %w", err)
	}
	n := 0
	for range l.Keys() {
		n++
	}
	return n, nil
}

// Bootstrap gives a fresh cluster its first key, as keys.Store.Bootstrap
// does for one node: when the bucket holds no key, the first node to claim
// the bootstrap entry creates the admin key and writes it to keyFile; the
// other nodes, and later starts, do nothing.
func (s *KeyStore) Bootstrap(ctx context.Context, keyFile string) (string, bool, error) {
	if keyFile == "" {
		return "", false, errors.New("shared: bootstrap: key file path is empty")
	}
	if n, err := s.Count(ctx); err != nil || n > 0 {
		return "", false, err
	}
	rev, err := s.kv.Create(ctx, bootstrapEntry, []byte(s.clock().UTC().Format(time.RFC3339Nano)))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("shared: bootstrap: %w", err)
	}
	m, err := keys.Mint(keys.Spec{Name: keys.BootstrapKeyName, Scopes: keys.AllScopes}, keys.CreatedByBootstrap, s.clock(), nil)
	if err == nil {
		if err = keys.WriteKeyFile(keyFile, m.Plaintext); err != nil {
			err = fmt.Errorf("write key file: %w", err)
		} else if err = s.store(ctx, m); err != nil {
			_ = removeFile(keyFile)
		}
	}
	if err != nil {
		// Let a later start try again.
		dctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_ = steady.DeleteAt(dctx, s.kv, bootstrapEntry, rev)
		return "", false, fmt.Errorf("shared: bootstrap: %w", err)
	}
	return m.Plaintext, true, nil
}
