package keys

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tabletop-relay/relay/internal/clientid"
)

// Errors returned by Authenticate. Their texts are the messages the relay
// returns to callers, so they never contain any part of the presented key.
var (
	// ErrMissing reports that no API key was presented.
	ErrMissing = errors.New("API key is required")
	// ErrUnknown reports that the presented key is malformed or matches no stored key.
	ErrUnknown = errors.New("Invalid API key")
	// ErrDisabled reports that the presented key exists but is disabled.
	ErrDisabled = errors.New("API key is disabled")
	// ErrRevoked reports that the presented key exists but has been revoked.
	ErrRevoked = errors.New("API key has been revoked")
	// ErrExpired reports that the presented key exists but its expiry time has passed.
	ErrExpired = errors.New("API key has expired")
)

// ErrNotFound is wrapped by Get and Revoke when no key has the given id; the
// wrapped message reads "API key not found: <id>".
var ErrNotFound = errors.New("API key not found")

// ErrInvalid is wrapped, together with a description of the problem, by every
// error that reports an invalid Spec or scope list, for example
// "invalid API key spec: unknown scope \"foo\"".
var ErrInvalid = errors.New("invalid API key spec")

// Scope names. Each names a permission that a key may carry.
const (
	// ScopeEntityRead allows reading documents.
	ScopeEntityRead = "entity:read"
	// ScopeEntityWrite allows creating, updating and deleting documents.
	ScopeEntityWrite = "entity:write"
	// ScopeSearch allows searching a world.
	ScopeSearch = "search"
	// ScopeStructureRead allows reading the folder and compendium structure.
	ScopeStructureRead = "structure:read"
	// ScopeStructureWrite allows creating and deleting folders.
	ScopeStructureWrite = "structure:write"
	// ScopeEncounterRead allows reading encounters.
	ScopeEncounterRead = "encounter:read"
	// ScopeEncounterManage allows starting, advancing and ending encounters.
	ScopeEncounterManage = "encounter:manage"
	// ScopeExecuteJS allows running JavaScript in a world.
	ScopeExecuteJS = "execute-js"
	// ScopeFileRead allows browsing and downloading files.
	ScopeFileRead = "file:read"
	// ScopeFileWrite allows uploading files.
	ScopeFileWrite = "file:write"
	// ScopeClientsRead allows listing connected worlds.
	ScopeClientsRead = "clients:read"
	// ScopeDnd5e is required by every /dnd5e/* endpoint.
	ScopeDnd5e = "dnd5e"
	// ScopeEventsSubscribe is required by every subscribe (event stream) endpoint.
	ScopeEventsSubscribe = "events:subscribe"
	// ScopeAdmin allows administering the relay itself, such as managing keys.
	// It is a scope like any other: it does not imply the other scopes.
	ScopeAdmin = "admin"
	// ScopeAccounts allows a key of the operator's account to manage
	// accounts. It grants nothing on the keys of any other account.
	ScopeAccounts = "accounts"
)

// AllScopes lists every scope name the relay knows, in canonical order.
// Scope lists stored in keys are normalised to this order. Callers must not
// modify it.
var AllScopes = []string{
	ScopeEntityRead,
	ScopeEntityWrite,
	ScopeSearch,
	ScopeStructureRead,
	ScopeStructureWrite,
	ScopeEncounterRead,
	ScopeEncounterManage,
	ScopeExecuteJS,
	ScopeFileRead,
	ScopeFileWrite,
	ScopeClientsRead,
	ScopeDnd5e,
	ScopeEventsSubscribe,
	ScopeAdmin,
	ScopeAccounts,
}

// scopeRank maps each known scope to its position in AllScopes.
var scopeRank = func() map[string]int {
	m := make(map[string]int, len(AllScopes))
	for i, s := range AllScopes {
		m[s] = i
	}
	return m
}()

// ValidScope reports whether s is one of AllScopes.
func ValidScope(s string) bool {
	_, ok := scopeRank[s]
	return ok
}

// ParseScopes parses a comma-separated list of scope names, such as a
// command-line flag value. Spaces around names and empty entries are ignored;
// the name "all" stands for every scope. The result is deduplicated and in
// the order of AllScopes. An unknown name or a list without any scope yields
// an error wrapping ErrInvalid.
func ParseScopes(s string) ([]string, error) {
	var names []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		switch part {
		case "":
			continue
		case "all":
			names = append(names, AllScopes...)
		default:
			names = append(names, part)
		}
	}
	return normalizeScopes(names)
}

// normalizeScopes checks every name, removes duplicates and sorts the list
// into the order of AllScopes.
func normalizeScopes(names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: at least one scope is required", ErrInvalid)
	}
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !ValidScope(n) {
			// The valid names are listed, so that a caller who guessed
			// (roll:execute, Read) sees at once what to write instead.
			return nil, fmt.Errorf("%w: unknown scope %q (the scopes are %s, or all for every one)", ErrInvalid, n, strings.Join(AllScopes, ", "))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return scopeRank[a] - scopeRank[b] })
	return out, nil
}

// Key describes a stored API key. It never contains the key itself.
type Key struct {
	// ID is the random public identifier used to list, get and revoke the key.
	ID string
	// Name is the human-readable label given when the key was created.
	Name string
	// Prefix is the first 8 characters after "rk_" of the key, for display only.
	Prefix string
	// Scopes lists the scopes the key carries, in the order of AllScopes.
	Scopes []string
	// ClientIDs lists the worlds the key is bound to; empty means any world.
	ClientIDs []string
	// ScopedUserID is the tabletop user (id or name) injected for every world
	// that has no entry in ClientUsers; empty means none.
	ScopedUserID string
	// ClientUsers maps a client id to the tabletop user injected for that world.
	ClientUsers map[string]string
	// ExpiresAt is the time from which the key is rejected; zero means never.
	ExpiresAt time.Time
	// Enabled is false for a disabled key, including every revoked key.
	Enabled bool
	// CreatedAt is the time the key was created.
	CreatedAt time.Time
	// RevokedAt is the time the key was first revoked; zero means not revoked.
	RevokedAt time.Time
	// CreatedBy records what created the key: the ID of the key that created
	// it through the key service, CreatedByBootstrap for the first admin key,
	// or "" when nothing was recorded (keys stored before the relay recorded
	// creators, and keys made with Store.Create directly).
	CreatedBy string
	// AccountID is the account the key belongs to (see [Key.Account]): the
	// creating key's account for a key created through the key service.
	// Empty on keys stored before the relay had accounts, which belong to
	// the operator's account.
	AccountID string `json:",omitempty"`
}

// CreatedByBootstrap is the CreatedBy of the key made by Store.Bootstrap.
const CreatedByBootstrap = "bootstrap"

// HasScope reports whether the key carries scope s. Scopes do not imply one
// another; in particular "admin" does not grant the other scopes.
func (k Key) HasScope(s string) bool {
	return slices.Contains(k.Scopes, s)
}

// BoundTo reports whether the key may be used for the world clientID: true
// when the key is bound to no client at all or clientID is one of its
// ClientIDs.
func (k Key) BoundTo(clientID string) bool {
	return len(k.ClientIDs) == 0 || slices.Contains(k.ClientIDs, clientID)
}

// UserFor returns the tabletop user to inject for requests to the world
// clientID: the per-client user for that world if one is set, otherwise
// ScopedUserID, otherwise "" (no user scoping, GM-level access). Unlike the
// existing relay, the global ScopedUserID is the fallback when per-client
// users exist but none is set for clientID.
func (k Key) UserFor(clientID string) string {
	if u := k.ClientUsers[clientID]; u != "" {
		return u
	}
	return k.ScopedUserID
}

// Revoked reports whether the key has been revoked.
func (k Key) Revoked() bool { return !k.RevokedAt.IsZero() }

// Expired reports whether the key has an expiry time that is not after now.
func (k Key) Expired(now time.Time) bool {
	return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)
}

// clone returns a deep copy of k, so that callers cannot modify the
// store's shared copy through the slices and map.
func (k Key) clone() Key {
	k.Scopes = slices.Clone(k.Scopes)
	k.ClientIDs = slices.Clone(k.ClientIDs)
	if k.ClientUsers != nil {
		m := make(map[string]string, len(k.ClientUsers))
		for c, u := range k.ClientUsers {
			m[c] = u
		}
		k.ClientUsers = m
	}
	return k
}

// Spec holds the caller-chosen properties of a key to create.
type Spec struct {
	// Name is a label of 1 to 100 characters; surrounding spaces are removed.
	Name string
	// Scopes lists the scopes to grant; at least one, each from AllScopes.
	Scopes []string
	// ClientIDs optionally binds the key to these worlds.
	ClientIDs []string
	// ScopedUserID optionally injects this tabletop user for every world.
	ScopedUserID string
	// ClientUsers optionally injects a tabletop user per world. When ClientIDs
	// is not empty, every world named here must also be in ClientIDs.
	ClientUsers map[string]string
	// ExpiresAt optionally sets an expiry time, which must be in the future;
	// zero means the key never expires.
	ExpiresAt time.Time
	// AccountID is the account the key is made in; empty means the
	// operator's. CreateAs ignores it: a key created on the authority of
	// another key is always in that key's account.
	AccountID string
}

// Limits on the fields of a Spec.
const (
	maxNameLen   = 100
	maxUserIDLen = 256
)

// ValidClientID reports whether id is a well-formed client (world) id: 1 to
// 64 characters from A-Z, a-z, 0-9, '_' and '-', starting with a letter or
// digit.
func ValidClientID(id string) bool { return clientid.Valid(id) }

// validate checks spec against the rules documented on Spec and returns the
// normalised key fields (trimmed name, canonical scopes, deduplicated client
// ids, UTC expiry). now is the current time for the expiry check.
func (spec Spec) validate(now time.Time) (Key, error) {
	var k Key

	name := strings.TrimSpace(spec.Name)
	switch {
	case name == "":
		return Key{}, fmt.Errorf("%w: name is required", ErrInvalid)
	case !utf8.ValidString(name):
		return Key{}, fmt.Errorf("%w: name is not valid UTF-8", ErrInvalid)
	case utf8.RuneCountInString(name) > maxNameLen:
		return Key{}, fmt.Errorf("%w: name is longer than %d characters", ErrInvalid, maxNameLen)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return Key{}, fmt.Errorf("%w: name contains control characters", ErrInvalid)
	}
	k.Name = name
	k.AccountID = spec.AccountID
	if k.AccountID == "" {
		k.AccountID = OperatorAccount
	}

	scopes, err := normalizeScopes(spec.Scopes)
	if err != nil {
		return Key{}, err
	}
	k.Scopes = scopes

	for _, c := range spec.ClientIDs {
		if !ValidClientID(c) {
			return Key{}, fmt.Errorf("%w: malformed client id %s", ErrInvalid, quoteShort(c))
		}
		if !slices.Contains(k.ClientIDs, c) {
			k.ClientIDs = append(k.ClientIDs, c)
		}
	}

	if spec.ScopedUserID != "" {
		if err := checkUserID(spec.ScopedUserID); err != nil {
			return Key{}, fmt.Errorf("%w: scoped user id: %s", ErrInvalid, err)
		}
		k.ScopedUserID = spec.ScopedUserID
	}

	if len(spec.ClientUsers) > 0 {
		cs := make([]string, 0, len(spec.ClientUsers))
		for c := range spec.ClientUsers {
			cs = append(cs, c)
		}
		slices.Sort(cs) // deterministic error messages
		k.ClientUsers = make(map[string]string, len(cs))
		for _, c := range cs {
			u := spec.ClientUsers[c]
			if !ValidClientID(c) {
				return Key{}, fmt.Errorf("%w: malformed client id %s in client users", ErrInvalid, quoteShort(c))
			}
			if len(k.ClientIDs) > 0 && !slices.Contains(k.ClientIDs, c) {
				return Key{}, fmt.Errorf("%w: client users names client %q, which is not in the key's client ids", ErrInvalid, c)
			}
			if err := checkUserID(u); err != nil {
				return Key{}, fmt.Errorf("%w: user for client %q: %s", ErrInvalid, c, err)
			}
			k.ClientUsers[c] = u
		}
	}

	if !spec.ExpiresAt.IsZero() {
		exp := normTime(spec.ExpiresAt)
		if !exp.After(now) {
			return Key{}, fmt.Errorf("%w: expiry time %s is not in the future", ErrInvalid, exp.Format(time.RFC3339))
		}
		if exp.Year() > 9999 {
			return Key{}, fmt.Errorf("%w: expiry time is after year 9999", ErrInvalid)
		}
		k.ExpiresAt = exp
	}
	return k, nil
}

// checkUserID checks a tabletop user id or user name to inject.
func checkUserID(u string) error {
	switch {
	case u == "":
		return errors.New("must not be empty")
	case !utf8.ValidString(u):
		return errors.New("is not valid UTF-8")
	case len(u) > maxUserIDLen:
		return fmt.Errorf("is longer than %d bytes", maxUserIDLen)
	case strings.TrimSpace(u) != u:
		return errors.New("has leading or trailing spaces")
	case strings.IndexFunc(u, unicode.IsControl) >= 0:
		return errors.New("contains control characters")
	}
	return nil
}

// quoteShort quotes s for an error message, shortening long values so that
// user input cannot flood logs.
func quoteShort(s string) string {
	const limit = 80
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}

// normTime returns t in UTC without a monotonic clock reading, the form in
// which times are stored and returned.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

// MissingMessage is the refusal text of a request that presented no API
// key. A caller that sent its key as `Authorization: Bearer ...` (its
// Authorization header), as many HTTP clients do by habit, is told which
// header the relay reads instead.
func MissingMessage(authorization string) string {
	scheme, _, _ := strings.Cut(strings.TrimSpace(authorization), " ")
	if strings.EqualFold(scheme, "bearer") {
		return ErrMissing.Error() + ": send it in the x-api-key header; the relay does not read Authorization: Bearer"
	}
	return ErrMissing.Error()
}
