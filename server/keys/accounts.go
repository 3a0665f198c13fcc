package keys

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// OperatorAccount is the id (and the name) of the operator's account. It
// exists in every relay: the bootstrap admin key and every key that existed
// before the relay had accounts belong to it, so a relay with one operator
// works as it always did. Its keys see and manage every account's keys
// within their bindings; with the scope `accounts` (or as the bootstrap
// key) they manage the accounts themselves. It cannot be suspended or
// deleted.
const OperatorAccount = "operator"

// Errors of account administration.
var (
	// ErrAccountNotFound is wrapped when no account has the given id; the
	// message reads "Account not found: <id>".
	ErrAccountNotFound = errors.New("Account not found")
	// ErrAccountExists is wrapped when another account has the name.
	ErrAccountExists = errors.New("Account name is taken")
	// ErrAccountInvalid is wrapped, with the parameter named, by every
	// refusal of a bad account name or quota.
	ErrAccountInvalid = errors.New("invalid account")
	// ErrSuspended is wrapped by Authenticate for a key whose account is
	// suspended; the message names the account.
	ErrSuspended = errors.New("Account is suspended")
	// ErrOperatorAccount is wrapped when an action may not apply to the
	// operator's account (suspending or deleting it).
	ErrOperatorAccount = errors.New("The operator's account cannot be changed that way")
)

// Quotas are the limits of one account. Zero in a field means the relay's
// default for it (set by flags); a limit is never negative.
type Quotas struct {
	// Worlds is how many worlds (embedded and linked) the account may own.
	Worlds int64 `json:"worlds,omitempty"`
	// Keys is how many unrevoked keys the account may hold.
	Keys int64 `json:"keys,omitempty"`
	// Streams is how many event streams the account's keys may hold open.
	Streams int64 `json:"streams,omitempty"`
	// RequestsPerMinute is how many calls the account's keys may make in a
	// minute, together.
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`
	// UploadBytes is the largest file the account's keys may upload.
	UploadBytes int64 `json:"uploadBytes,omitempty"`
	// StoredBytes is how many bytes the account's embedded worlds may
	// hold on disk together.
	StoredBytes int64 `json:"storedBytes,omitempty"`
}

// maxQuota bounds every count quota, and maxBytesQuota every size quota,
// so that sums of quotas cannot overflow.
const (
	maxQuota      = 1<<31 - 1
	maxBytesQuota = 1 << 50
)

// Validate checks that no quota is negative or absurdly large, naming the
// quota at fault as `quotas.<name>`.
func (q Quotas) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
		max  int64
	}{{"worlds", q.Worlds, maxQuota}, {"keys", q.Keys, maxQuota}, {"streams", q.Streams, maxQuota}, {"requestsPerMinute", q.RequestsPerMinute, maxQuota},
		{"uploadBytes", q.UploadBytes, maxBytesQuota}, {"storedBytes", q.StoredBytes, maxBytesQuota}} {
		if f.v < 0 || f.v > f.max {
			return fmt.Errorf("%w: 'quotas.%s' must be a number from 0 (the relay's default) to %d, not %d", ErrAccountInvalid, f.name, f.max, f.v)
		}
	}
	return nil
}

// Account is a tenant of the relay: it owns keys, worlds and pairing
// codes, isolated from every other account's.
type Account struct {
	// ID is the account's fixed id: OperatorAccount or "acc_" and 16 hex
	// characters.
	ID string `json:"id"`
	// Name is a unique label of 1 to 64 characters (unique ignoring case).
	Name string `json:"name"`
	// Quotas are the account's own limits; zero fields take the defaults.
	Quotas Quotas `json:"quotas"`
	// CreatedAt is when the account was made.
	CreatedAt time.Time `json:"createdAt"`
	// SuspendedAt is when the account was suspended; zero when it is not.
	SuspendedAt time.Time `json:"suspendedAt,omitzero"`
}

// Suspended reports whether the account is suspended.
func (a Account) Suspended() bool { return !a.SuspendedAt.IsZero() }

// maxAccountNameLen bounds an account's name.
const maxAccountNameLen = 64

// NormalizeAccountName trims name and checks it: 1 to 64 characters, valid
// UTF-8, no control characters. The error wraps ErrAccountInvalid and
// names the parameter `name`.
func NormalizeAccountName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", fmt.Errorf("%w: 'name' is required", ErrAccountInvalid)
	case !utf8.ValidString(name):
		return "", fmt.Errorf("%w: 'name' is not valid UTF-8", ErrAccountInvalid)
	case utf8.RuneCountInString(name) > maxAccountNameLen:
		return "", fmt.Errorf("%w: 'name' is longer than %d characters", ErrAccountInvalid, maxAccountNameLen)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "", fmt.Errorf("%w: 'name' contains control characters", ErrAccountInvalid)
	}
	return name, nil
}

// NewAccount validates name and quotas and returns a new account (not
// stored) created at now.
func NewAccount(name string, q Quotas, now time.Time) (Account, error) {
	name, err := NormalizeAccountName(name)
	if err != nil {
		return Account{}, err
	}
	if err := q.Validate(); err != nil {
		return Account{}, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Account{}, fmt.Errorf("keys: account id: %w", err)
	}
	return Account{ID: "acc_" + hex.EncodeToString(b[:]), Name: name, Quotas: q, CreatedAt: normTime(now)}, nil
}

// AccountNotFound returns the error, wrapping ErrAccountNotFound, for id.
func AccountNotFound(id string) error {
	return fmt.Errorf("%w: %s", ErrAccountNotFound, quoteShortBare(id))
}

// AccountExists returns the error, wrapping ErrAccountExists, for name.
func AccountExists(name string) error {
	return fmt.Errorf("%w: %q", ErrAccountExists, name)
}

// suspended returns the error of a key of the suspended account a.
func suspended(a Account) error {
	return fmt.Errorf("%w: %q (since %s); its keys are refused until it is resumed", ErrSuspended, a.Name, a.SuspendedAt.UTC().Format(time.RFC3339))
}

// SuspendedError is the refusal of a key of the suspended account a.
func SuspendedError(a Account) error { return suspended(a) }

// quoteShortBare shortens s for a message without quoting it, so that
// user input cannot flood logs.
func quoteShortBare(s string) string {
	const limit = 80
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}

// FirstKeySpec is the spec of an account's first admin key: every scope
// but `accounts`, bound to no world (which, for an account other than the
// operator's, means every world the account owns).
func FirstKeySpec(a Account) Spec {
	scopes := make([]string, 0, len(AllScopes))
	for _, s := range AllScopes {
		if s != ScopeAccounts {
			scopes = append(scopes, s)
		}
	}
	return Spec{Name: "admin", Scopes: scopes, AccountID: a.ID}
}

// ManagesAccounts reports whether k may manage accounts: the bootstrap
// admin key, or a key of the operator's account with the scope
// `accounts`.
func (k Key) ManagesAccounts() bool {
	if k.Account() != OperatorAccount {
		return false
	}
	return k.CreatedBy == CreatedByBootstrap || k.HasScope(ScopeAccounts)
}

// Account returns the id of the account the key belongs to: its AccountID,
// or the operator's account for a key stored before accounts existed.
func (k Key) Account() string {
	if k.AccountID == "" {
		return OperatorAccount
	}
	return k.AccountID
}

// Operator reports whether the key belongs to the operator's account,
// whose keys are not limited to one account's worlds and keys.
func (k Key) Operator() bool { return k.Account() == OperatorAccount }
