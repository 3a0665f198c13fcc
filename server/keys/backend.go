package keys

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"time"
)

// Backend is what the relay needs of a key store, whichever keeps the
// keys: the single node's SQLite [Store], or the cluster's replicated
// key-value store (package cluster/shared). Every implementation mints keys
// with [Mint], authenticates with [HashPresented] and [Key.Usable] and
// judges authority with [Authorize], so the rules are the same whatever
// the store.
type Backend interface {
	// Authenticate returns the usable key whose plaintext is presented (see
	// Store.Authenticate for the errors).
	Authenticate(ctx context.Context, plaintext string) (Key, error)
	// Create and CreateAs store a new key (see Store.Create and
	// Store.CreateAs).
	Create(ctx context.Context, spec Spec) (string, Key, error)
	CreateAs(ctx context.Context, actor Key, spec Spec) (string, Key, error)
	// List and ListAs describe the stored keys in order of creation.
	List(ctx context.Context) ([]Key, error)
	ListAs(ctx context.Context, actor Key) ([]Key, error)
	// Get returns one key by id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (Key, error)
	// Revoke and RevokeAs revoke a key by id (see Store.Revoke and
	// Store.RevokeAs).
	Revoke(ctx context.Context, id string) (Key, error)
	RevokeAs(ctx context.Context, actor Key, id string) (Key, error)
	// Count counts the stored keys, revoked ones included.
	Count(ctx context.Context) (int, error)
	// Bootstrap creates the first admin key of an empty store (see
	// Store.Bootstrap).
	Bootstrap(ctx context.Context, keyFile string) (plaintext string, created bool, err error)
	// Close releases the store.
	Close() error
	// Accounts keeps the accounts the keys belong to.
	Accounts
}

var _ Backend = (*Store)(nil)

// Minted is a key drawn by [Mint], not stored yet.
type Minted struct {
	// Plaintext is the key itself, to be shown once and never stored.
	Plaintext string
	// Key describes the key: its fields from the spec, a new ID and
	// Prefix, Enabled, CreatedAt and CreatedBy.
	Key Key
	// Hash is the SHA-256 of Plaintext, under which the key is found.
	Hash [sha256.Size]byte
}

// Mint validates spec at now, lets check (when not nil) refuse the
// validated key, and draws a new key with a new id, recording createdBy as
// its creator. An invalid spec yields an error wrapping ErrInvalid; a
// refusal is check's error. Every store creates its keys through Mint.
func Mint(spec Spec, createdBy string, now time.Time, check func(Key) error) (Minted, error) {
	now = normTime(now)
	k, err := spec.validate(now)
	if err != nil {
		return Minted{}, err
	}
	k.CreatedBy = createdBy
	if check != nil {
		if err := check(k); err != nil {
			return Minted{}, err
		}
	}
	plaintext, err := newPlaintext()
	if err != nil {
		return Minted{}, err
	}
	id, err := newID()
	if err != nil {
		return Minted{}, err
	}
	k.ID = id
	k.Prefix = plaintext[len(keyPrefix) : len(keyPrefix)+displayLen]
	k.Enabled = true
	k.CreatedAt = now
	return Minted{Plaintext: plaintext, Key: k, Hash: sha256.Sum256([]byte(plaintext))}, nil
}

// CreateCheck returns the authority check of a key created on the
// authority of actor (see [Authorize]), or an error matching ErrForbidden
// when actor is no stored key.
func CreateCheck(actor Key) (func(Key) error, error) {
	if actor.ID == "" {
		return nil, forbidden("API key creation needs a creating key")
	}
	return func(k Key) error { return Authorize(actor, ActionCreate, k) }, nil
}

// HashPresented returns the hash under which a presented key is stored. It
// fails with ErrMissing for an empty string and ErrUnknown for one that
// does not have the shape of a key, before hashing anything.
func HashPresented(plaintext string) ([sha256.Size]byte, error) {
	if plaintext == "" {
		return [sha256.Size]byte{}, ErrMissing
	}
	// The format check depends only on the public shape of keys, not on any
	// stored secret, and bounds the work done for garbage input.
	if !wellFormed(plaintext) {
		return [sha256.Size]byte{}, ErrUnknown
	}
	if last := lastPresented.Load(); last != nil && sameKey(last.plaintext, plaintext) {
		return last.hash, nil
	}
	// A well-formed key has keyLen bytes: copied to the stack, hashing it
	// allocates nothing (converting it to a slice would).
	var b [keyLen]byte
	h := sha256.Sum256(b[:copy(b[:], plaintext)])
	lastPresented.Store(&presentedHash{plaintext: plaintext, hash: h})
	return h, nil
}

// presentedHash is a presented key with its hash.
type presentedHash struct {
	plaintext string
	hash      [sha256.Size]byte
}

// lastPresented is the key HashPresented hashed last. A call's key is
// hashed at admission and again by the interceptor chain, and a busy
// client sends the same key call after call: the second hash of the same
// key costs a comparison instead of SHA-256. Only the hash is reused;
// whether the key exists and may be used is looked up on every call.
var lastPresented atomic.Pointer[presentedHash]

// sameKey reports whether two well-formed keys are equal, in a time that
// does not depend on where they differ: the key kept in lastPresented may
// be another caller's.
func sameKey(a, b string) bool {
	if len(a) != keyLen || len(b) != keyLen {
		return false
	}
	// Eight bytes a step: the loop runs for every call.
	var diff uint64
	i := 0
	for ; i+8 <= keyLen; i += 8 {
		x, y := a[i:i+8], b[i:i+8]
		diff |= (uint64(x[0]) | uint64(x[1])<<8 | uint64(x[2])<<16 | uint64(x[3])<<24 |
			uint64(x[4])<<32 | uint64(x[5])<<40 | uint64(x[6])<<48 | uint64(x[7])<<56) ^
			(uint64(y[0]) | uint64(y[1])<<8 | uint64(y[2])<<16 | uint64(y[3])<<24 |
				uint64(y[4])<<32 | uint64(y[5])<<40 | uint64(y[6])<<48 | uint64(y[7])<<56)
	}
	for ; i < keyLen; i++ {
		diff |= uint64(a[i] ^ b[i])
	}
	return diff == 0
}

// Usable reports why the key may not be used at now: ErrRevoked,
// ErrDisabled or ErrExpired, checked in that order; nil when it may.
func (k *Key) Usable(now time.Time) error {
	switch {
	case k.Revoked():
		return ErrRevoked
	case !k.Enabled:
		return ErrDisabled
	case k.Expired(now):
		return ErrExpired
	}
	return nil
}

// Clone returns a deep copy of k, so that a store's shared copy cannot be
// changed through the slices and the map of the copy it hands out.
func (k Key) Clone() Key { return k.clone() }

// NotFound returns the error, wrapping ErrNotFound, for the key id.
func NotFound(id string) error { return notFound(id) }

// RevokedNow returns k revoked at now: disabled, with its first revocation
// time kept when it was revoked already.
func (k Key) RevokedNow(now time.Time) Key {
	k.Enabled = false
	if k.RevokedAt.IsZero() {
		k.RevokedAt = normTime(now)
	}
	return k
}

// WriteKeyFile writes a new key followed by a newline to path, atomically
// and with mode 0600 (see Store.Bootstrap).
func WriteKeyFile(path, plaintext string) error {
	return writeFileAtomic(path, []byte(plaintext+"\n"), 0o600)
}

// Exported is a stored key with its hash, as [Store.Export] gives it to
// another store that takes the keys over.
type Exported struct {
	Key  Key
	Hash [sha256.Size]byte
}

// Export returns every key with its hash, revoked ones included, in order
// of creation: a single node that joins a cluster hands its keys to the
// cluster's store with it, so that they keep working.
func (s *Store) Export(ctx context.Context) ([]Exported, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("keys: export keys: %w", err)
	}
	defer rows.Close()
	var out []Exported
	for rows.Next() {
		k, h, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("keys: export keys: %w", err)
		}
		out = append(out, Exported{Key: k, Hash: h})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("keys: export keys: %w", err)
	}
	return out, nil
}
