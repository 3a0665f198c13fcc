// Package keys stores the relay's API keys and authenticates the x-api-key
// presented with every request.
//
// A key is "rk_" followed by 43 characters of unpadded base64url (32 random
// bytes). Its plaintext is returned once, by Store.Create or Store.Bootstrap,
// and is never stored or logged: the database (the relay's embedded SQLite
// file, normally <data>/relay.db) keeps only the SHA-256 of the key, a short
// display prefix and a random key id. A fast hash is appropriate because keys
// carry 256 bits of entropy, so they cannot be guessed from their hash.
//
// Store.Authenticate runs on every request. It answers from an in-memory
// index of all keys (one hash and one map lookup, no lock, no database
// access); Create, Revoke and Bootstrap update the index right after their
// database transaction commits, so a revocation is effective for the very
// next request handled by the same process. There is no time-based cache.
//
// Key administration is bounded by the administering key: CreateAs, ListAs
// and RevokeAs act on the authority of a key, and Authorize decides, in one
// place, what that key may create, see and revoke, so that no key can create
// or manage a key more powerful than itself. Every key records what created
// it (Key.CreatedBy). Create and Revoke, which check no authority, are for
// the relay's own set-up and for tests.
//
// Several relay processes sharing one relay.db do not see each other's
// changes automatically: each must call Store.Reload (periodically or when
// told) to pick up keys created or revoked by the others. The nodes of a
// cluster do not share a file: they keep their keys in the cluster's
// replicated store (package cluster/shared), another [Backend] that mints,
// authenticates and authorises keys with this package's own functions
// ([Mint], [HashPresented], [Key.Usable], [Authorize]).
//
// Compared with the existing relay this package removes the plaintext
// fallback (no plaintext column exists), the cache that ignored revocation
// and expiry, and the user-scoping bug: Key.UserFor falls back to the global
// scoped user when a key has per-client users but none for the world asked
// about.
package keys
