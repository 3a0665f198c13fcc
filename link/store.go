package link

import (
	"context"
	"crypto/sha256"
	"time"
)

// Hash is the SHA-256 of a secret: a pairing code or a connection token.
// Only hashes are stored; the secrets are shown once and never kept.
type Hash [sha256.Size]byte

// hashOf hashes a secret.
func hashOf(secret string) Hash { return sha256.Sum256([]byte(secret)) }

// Code is a stored pairing code (its hash, never the code).
type Code struct {
	// Hash is the SHA-256 of the normalised code.
	Hash Hash
	// ClientID is the linked world the code pairs again; "" lets it pair a
	// new world (or a world the module proves it paired before).
	ClientID string
	// CreatedBy is the id of the API key that asked for the code.
	CreatedBy string
	// Account is the account of that key, which the world it links
	// belongs to; "" for the operator's account.
	Account string
	// CreatedAt and ExpiresAt bound the code's life.
	CreatedAt, ExpiresAt time.Time
}

// World is a linked world as pairing recorded it. What the module says of
// itself when it connects (versions, title, users) is not kept here but in
// the connection's [ConnInfo].
type World struct {
	// ClientID is the relay's id of the world.
	ClientID string
	// WorldID and WorldTitle are the tabletop's own id and title of the
	// world, as given at pairing.
	WorldID, WorldTitle string
	// ServerFingerprint is the random id the module keeps in the world's
	// settings; a pairing that presents it with the world's clientId keeps
	// that clientId.
	ServerFingerprint string
	// ServerOrigin is the tabletop's public address, as the module gave it.
	ServerOrigin string
	// PairedAt is when the world was last paired.
	PairedAt time.Time
	// UnpairedAt is when the world was unpaired; zero while it is paired.
	UnpairedAt time.Time
	// Account is the account the world belongs to: that of the pairing
	// code that first linked it; "" for the operator's account.
	Account string `json:",omitempty"`
}

// Paired reports whether the world is paired (has not been unpaired since
// its last pairing).
func (w World) Paired() bool { return w.UnpairedAt.IsZero() }

// Token is a stored connection token (its hash, never the token).
type Token struct {
	Hash      Hash
	ClientID  string
	CreatedAt time.Time
}

// Pairing is what one successful pairing writes: the world's record and its
// new token, which replaces every earlier token of the world.
type Pairing struct {
	World World
	Token Token
	// New is true when the world is new: storing it must fail rather than
	// replace a world with the same clientId.
	New bool
}

// Store keeps pairing codes, linked worlds and connection tokens. It is
// small on purpose: each method is one atomic step, so that a store shared
// by several relays (a key-value store with compare-and-set) can implement
// it. Errors for unknown things are ErrCodeRejected, ErrTokenRejected and
// ErrUnknownWorld (matched with errors.Is).
type Store interface {
	// SaveCode stores a new pairing code.
	SaveCode(ctx context.Context, c Code) error
	// TakeCode removes the code with the given hash and returns it, so that
	// a code works once; a code that is unknown, already taken or expired
	// at now fails with ErrCodeRejected.
	TakeCode(ctx context.Context, h Hash, now time.Time) (Code, error)
	// World returns the linked world with the given clientId, paired or
	// not, or ErrUnknownWorld.
	World(ctx context.Context, clientID string) (World, error)
	// Worlds returns every linked world, paired or not, in clientId order.
	Worlds(ctx context.Context) ([]World, error)
	// Pair stores the world and makes the token its only valid token,
	// revoking the others, in one step.
	Pair(ctx context.Context, p Pairing) error
	// TokenWorld returns the clientId of the valid token with the given
	// hash, or ErrTokenRejected for an unknown or revoked one.
	TokenWorld(ctx context.Context, h Hash) (string, error)
	// Unpair revokes every token of the world and marks it unpaired at now
	// (keeping an earlier time), returning how many tokens it revoked; an
	// unknown world is ErrUnknownWorld.
	Unpair(ctx context.Context, clientID string, now time.Time) (int, error)
}
