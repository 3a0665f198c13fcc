// Package signin lets people, not only programs, use the relay: an
// account's password (argon2id), the web console's sessions (a cookie
// that stands for the account's admin, with a CSRF token on every write),
// and self-service sign-up, open or by the operator's single-use invites.
//
// Its state (password hashes, sessions, invites) lives in a [KV]: a table
// of relay.db on a relay alone, a JetStream bucket shared by every node in
// a cluster. Secrets are stored only as hashes: a password as argon2id, a
// session's token and an invite's code as SHA-256.
//
// A session reaches the API as an API key would: [Service.Handler] hands
// the cookie's token to the rest of the relay in the x-api-key header once
// a write has shown the session's CSRF token, and [Keys] authenticates
// such a token as a key of the account with the scopes of its first admin
// key (every scope for the operator's account). Everything a session does
// therefore passes the same authorisation as a key's calls.
package signin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/server/keys"
)

// Sign-up modes (--signup).
const (
	SignupClosed = "closed"
	SignupInvite = "invite"
	SignupOpen   = "open"
)

// Limits of sign-in, sessions and invites.
const (
	// DefaultIdleTimeout ends a session unused for this long when the
	// configuration does not say.
	DefaultIdleTimeout = 2 * time.Hour
	// MaxSessionsPerAccount bounds an account's sessions: a new sign-in
	// beyond it ends the account's least recently used session.
	MaxSessionsPerAccount = 10
	// LockoutFailures failed sign-ins for one account name within
	// LockoutWindow lock that name out for LockoutDuration.
	LockoutFailures = 5
	LockoutWindow   = 15 * time.Minute
	LockoutDuration = 15 * time.Minute
	// maxTrackedNames bounds the names whose failures are remembered.
	maxTrackedNames = 10000
	// DefaultInviteTTL is how long an invite lasts when its maker does not
	// say; MaxInviteTTL is the longest it may.
	DefaultInviteTTL = 7 * 24 * time.Hour
	MaxInviteTTL     = 90 * 24 * time.Hour
	// MaxOpenInvites bounds the invites that are neither used, revoked
	// nor expired; MaxKeptInvites all the invites kept, the oldest ended
	// ones being forgotten first.
	MaxOpenInvites = 1000
	MaxKeptInvites = 5000
	// inviteKeepAfter is how long a used, revoked or expired invite stays
	// listed.
	inviteKeepAfter = 30 * 24 * time.Hour
	// touchEvery is how often a session in use records its use: often
	// enough for the idle time, rarely enough to cost no write a call.
	touchEvery = time.Minute
)

// Config configures a [Service].
type Config struct {
	// KV keeps passwords, sessions and invites.
	KV KV
	// Accounts is the relay's account store.
	Accounts keys.Accounts
	// Signup is SignupClosed (when empty), SignupInvite or SignupOpen.
	Signup string
	// IdleTimeout ends a session unused for this long; DefaultIdleTimeout
	// when 0.
	IdleTimeout time.Duration
	// SecureCookies marks the session cookie Secure even on a request
	// that did not come over TLS (the relay's public URL is https, behind
	// a proxy that ends TLS).
	SecureCookies bool
	// SignInAttempts limits sign-ins per client address; nil allows any.
	SignInAttempts Limiter
	// SignupAttempts limits sign-ups per client address; nil allows any.
	SignupAttempts Limiter
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Log receives sign-ins, sign-outs and sign-ups; discarded when nil.
	Log *slog.Logger
}

// Limiter allows a number of attempts per key (a client address) in a
// time, answering how long to wait when none is left: the relay's
// server.RateLimiter.
type Limiter interface {
	Allow(key string) (bool, time.Duration)
}

// Service is the relay's passwords, sessions and invites.
type Service struct {
	cfg Config

	// tracked counts the names with failures that still count, as of the
	// last sweep and the names added since (roughly, in a cluster: each
	// node counts those it added).
	tracked atomic.Int64
	// lastSweep is when failures were last swept (Unix nanoseconds).
	lastSweep atomic.Int64
}

// New returns the service of cfg.
func New(cfg Config) (*Service, error) {
	switch cfg.Signup {
	case "":
		cfg.Signup = SignupClosed
	case SignupClosed, SignupInvite, SignupOpen:
	default:
		return nil, fmt.Errorf("signup must be closed, invite or open, not %q", cfg.Signup)
	}
	if cfg.KV == nil || cfg.Accounts == nil {
		return nil, errors.New("signin: KV and Accounts are required")
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg}, nil
}

// Signup is the sign-up mode.
func (s *Service) Signup() string { return s.cfg.Signup }

// maxAttempts bounds the compare-and-set attempts of one change: only
// changes of the same entry at the same moment make one fail.
const maxAttempts = 10

// errBusy is the answer when an entry changed under every attempt.
var errBusy = refuse(http.StatusServiceUnavailable, codes.Unavailable, "The sign-in state is changing under this request: try again")

// refusal is an answer other than success, with its HTTP and gRPC status.
type refusal struct {
	httpStatus int
	code       codes.Code
	msg        string
}

func (r *refusal) Error() string { return r.msg }

// GRPCStatus lets the server answer a refusal with its own status.
func (r *refusal) GRPCStatus() *status.Status { return status.New(r.code, r.msg) }

func refuse(httpStatus int, code codes.Code, format string, args ...any) error {
	return &refusal{httpStatus: httpStatus, code: code, msg: fmt.Sprintf(format, args...)}
}

// invalidf is a refusal of a bad parameter (400), which the API answers
// as it answers a bad account name.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{keys.ErrAccountInvalid}, args...)...)
}

// ---- passwords ----------------------------------------------------------

// passwordRecord is an account's stored password.
type passwordRecord struct {
	Hash  string    `json:"hash"`
	SetAt time.Time `json:"setAt"`
}

func passwordKey(accountID string) string { return "p." + accountID }

// CheckNewPassword refuses a password that may not be set, naming param.
func (s *Service) CheckNewPassword(param, password string) error {
	return CheckPassword(param, password)
}

// SetPassword sets (or replaces) the account's password. Every session of
// the account ends: a changed password shuts out whoever had it before.
func (s *Service) SetPassword(ctx context.Context, accountID, password string) error {
	if err := CheckPassword("password", password); err != nil {
		return err
	}
	hash, err := hashPassword(ctx, password)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(passwordRecord{Hash: hash, SetAt: s.cfg.Now().UTC()})
	for attempt := 0; ; attempt++ {
		if attempt == maxAttempts {
			return errBusy
		}
		_, rev, err := s.cfg.KV.Get(ctx, passwordKey(accountID))
		switch {
		case errors.Is(err, ErrNoEntry):
			err = s.cfg.KV.Create(ctx, passwordKey(accountID), data)
			if errors.Is(err, ErrEntryExists) {
				continue
			}
		case err == nil:
			err = s.cfg.KV.Update(ctx, passwordKey(accountID), data, rev)
			if errors.Is(err, ErrChanged) {
				continue
			}
		}
		if err != nil {
			return err
		}
		return s.EndSessions(ctx, accountID)
	}
}

// ChangePassword replaces the account's password with next when old is
// its current one. An account without a password sets its first one
// without old.
func (s *Service) ChangePassword(ctx context.Context, accountID, old, next string) error {
	if err := CheckPassword("newPassword", next); err != nil {
		return err
	}
	rec, err := s.password(ctx, accountID)
	switch {
	case errors.Is(err, ErrNoEntry):
	case err != nil:
		return err
	default:
		if old == "" {
			return invalidf("'oldPassword' is required to change a password")
		}
		ok, err := verifyPassword(ctx, rec.Hash, old)
		if err != nil {
			return err
		}
		if !ok {
			return refuse(http.StatusForbidden, codes.PermissionDenied, "'oldPassword' is not the account's password")
		}
	}
	return s.SetPassword(ctx, accountID, next)
}

// HasPassword reports whether the account has a password.
func (s *Service) HasPassword(ctx context.Context, accountID string) (bool, error) {
	_, err := s.password(ctx, accountID)
	if errors.Is(err, ErrNoEntry) {
		return false, nil
	}
	return err == nil, err
}

func (s *Service) password(ctx context.Context, accountID string) (passwordRecord, error) {
	data, _, err := s.cfg.KV.Get(ctx, passwordKey(accountID))
	if err != nil {
		return passwordRecord{}, err
	}
	var rec passwordRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return passwordRecord{}, fmt.Errorf("signin: password of %s: %w", accountID, err)
	}
	return rec, nil
}

// ForgetAccount removes what the service keeps of a deleted account: its
// password and its sessions.
func (s *Service) ForgetAccount(ctx context.Context, accountID string) error {
	if err := s.EndSessions(ctx, accountID); err != nil {
		return err
	}
	return s.cfg.KV.Delete(ctx, passwordKey(accountID))
}

// ---- sign-in ------------------------------------------------------------

// errBadSignIn is the one answer for an unknown name and a wrong
// password alike.
var errBadSignIn = refuse(http.StatusUnauthorized, codes.Unauthenticated, "Wrong account name or password")

// lockedOut is the answer for a name locked out after failed sign-ins,
// whether or not an account has it.
func lockedOut(until, now time.Time) error {
	minutes := max(int(math.Ceil(until.Sub(now).Minutes())), 1)
	return refuse(http.StatusTooManyRequests, codes.ResourceExhausted,
		"Too many failed sign-ins for this account name: it is locked for %d more minute(s)", minutes)
}

// failureRecord is the recent failed sign-ins for one account name,
// kept in the KV so that every node of a cluster counts them together: a
// guesser gains nothing by spreading attempts over the nodes.
type failureRecord struct {
	Count       int       `json:"count"`
	First       time.Time `json:"first"`
	LockedUntil time.Time `json:"lockedUntil,omitzero"`
}

// failureKey is the entry of a name's failures: the SHA-256 of the
// folded name (a name may hold characters a key may not, and the store
// need not keep the names tried).
func failureKey(folded string) string { return "f." + hashHex(folded)[:40] }

// stale reports whether the record no longer counts at now: its window
// and its lock-out are both over.
func (f failureRecord) stale(now time.Time) bool {
	return now.Sub(f.First) > LockoutWindow && !now.Before(f.LockedUntil)
}

// locked reports the lock-out of name, if any.
func (s *Service) locked(ctx context.Context, name string, now time.Time) error {
	data, _, err := s.cfg.KV.Get(ctx, failureKey(name))
	if errors.Is(err, ErrNoEntry) {
		return nil
	}
	if err != nil {
		return err
	}
	var f failureRecord
	if json.Unmarshal(data, &f) == nil && now.Before(f.LockedUntil) {
		return lockedOut(f.LockedUntil, now)
	}
	return nil
}

// failed counts a failed sign-in for name, locking it out after
// LockoutFailures within LockoutWindow. The count is a compare-and-set on
// the name's entry, so that failures on several nodes at once all count.
func (s *Service) failed(ctx context.Context, name string, now time.Time) error {
	key := failureKey(name)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		data, rev, err := s.cfg.KV.Get(ctx, key)
		var f failureRecord
		switch {
		case errors.Is(err, ErrNoEntry):
			if s.tracked.Load() >= maxTrackedNames {
				// Full of recent failures: the name is not tracked, but
				// the per-address limit still holds.
				s.sweepFailures(ctx, now)
				return nil
			}
		case err != nil:
			return err
		default:
			if json.Unmarshal(data, &f) != nil {
				f = failureRecord{}
			}
		}
		if f.Count == 0 || now.Sub(f.First) > LockoutWindow {
			f.Count, f.First = 0, now.UTC()
		}
		f.Count++
		if f.Count >= LockoutFailures {
			f.LockedUntil = now.Add(LockoutDuration).UTC()
			f.Count, f.First = 0, now.UTC()
		}
		next, _ := json.Marshal(f)
		if rev == 0 {
			err = s.cfg.KV.Create(ctx, key, next)
			if errors.Is(err, ErrEntryExists) {
				continue
			}
			if err == nil && s.tracked.Add(1)%sweepFailuresEvery == 0 {
				s.sweepFailures(ctx, now)
			}
		} else {
			err = s.cfg.KV.Update(ctx, key, next, rev)
			if errors.Is(err, ErrChanged) {
				continue
			}
		}
		return err
	}
	return errBusy
}

// sweepFailuresEvery is how many names' first failures pass between
// sweeps of the failures that no longer count; a sweep runs at most once
// every sweepFailuresGap however many names fail.
const (
	sweepFailuresEvery = 256
	sweepFailuresGap   = 10 * time.Second
)

// sweepFailures forgets the names whose failures no longer count, and
// counts those that do.
func (s *Service) sweepFailures(ctx context.Context, now time.Time) {
	last := s.lastSweep.Load()
	if now.UnixNano()-last < int64(sweepFailuresGap) || !s.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	names, err := s.cfg.KV.Keys(ctx, "f.")
	if err != nil {
		return
	}
	kept := int64(0)
	for _, n := range names {
		data, _, err := s.cfg.KV.Get(ctx, n)
		if err != nil {
			continue
		}
		var f failureRecord
		if json.Unmarshal(data, &f) != nil || f.stale(now) {
			_ = s.cfg.KV.Delete(ctx, n)
			continue
		}
		kept++
	}
	s.tracked.Store(kept)
}

// SignIn checks an account name and password and opens a session of the
// account, returning its token (the cookie's value) and the account.
func (s *Service) SignIn(ctx context.Context, name, password, addr string) (string, keys.Account, error) {
	if s.cfg.SignInAttempts != nil {
		if ok, wait := s.cfg.SignInAttempts.Allow(addr); !ok {
			return "", keys.Account{}, retryAfter(wait, "Too many sign-ins from this address")
		}
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return "", keys.Account{}, invalidf("'name' is required")
	}
	if password == "" {
		return "", keys.Account{}, invalidf("'password' is required")
	}
	if len(password) > MaxPasswordBytes || len(name) > 256 {
		return "", keys.Account{}, errBadSignIn
	}
	folded := strings.ToLower(name)
	now := s.cfg.Now()
	if err := s.locked(ctx, folded, now); err != nil {
		return "", keys.Account{}, err
	}
	acct, found, err := s.accountNamed(ctx, name)
	if err != nil {
		return "", keys.Account{}, err
	}
	hash := dummyHash
	if found {
		rec, err := s.password(ctx, acct.ID)
		switch {
		case errors.Is(err, ErrNoEntry):
			found = false
		case err != nil:
			return "", keys.Account{}, err
		default:
			hash = rec.Hash
		}
	}
	// The hash is checked whether or not the name is an account's with a
	// password, so that both answers take the same time.
	ok, err := verifyPassword(ctx, hash, password)
	if err != nil {
		return "", keys.Account{}, err
	}
	if !ok || !found {
		if err := s.failed(ctx, folded, now); err != nil {
			s.cfg.Log.Warn("a failed sign-in could not be counted", "err", err)
		}
		s.cfg.Log.Info("sign-in refused", "addr", addr)
		return "", keys.Account{}, errBadSignIn
	}
	if acct.Suspended() {
		return "", keys.Account{}, keys.SuspendedError(acct)
	}
	token, err := s.openSession(ctx, acct.ID, addr)
	if err != nil {
		return "", keys.Account{}, err
	}
	s.cfg.Log.Info("signed in", "account", acct.ID, "addr", addr)
	return token, acct, nil
}

// accountNamed finds the account with name, ignoring case.
func (s *Service) accountNamed(ctx context.Context, name string) (keys.Account, bool, error) {
	list, err := s.cfg.Accounts.ListAccounts(ctx)
	if err != nil {
		return keys.Account{}, false, err
	}
	for _, a := range list {
		if strings.EqualFold(a.Name, name) {
			return a, true, nil
		}
	}
	return keys.Account{}, false, nil
}

// retryAfter is a 429 refusal that says when to try again.
func retryAfter(wait time.Duration, what string) error {
	seconds := max(int(wait.Seconds()+0.999), 1)
	return &waitRefusal{refusal: refusal{httpStatus: http.StatusTooManyRequests, code: codes.ResourceExhausted,
		msg: fmt.Sprintf("%s; retry in %d s", what, seconds)}, seconds: seconds}
}

// waitRefusal is a 429 with its Retry-After.
type waitRefusal struct {
	refusal
	seconds int
}

// ---- sessions -----------------------------------------------------------

// session is a stored console session. Its token is never stored: Hash
// is its SHA-256.
type session struct {
	ID        string    `json:"id"`
	Account   string    `json:"account"`
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"createdAt"`
	LastSeen  time.Time `json:"lastSeen"`
	Addr      string    `json:"addr,omitempty"`
}

// TokenPrefix starts every session token.
const TokenPrefix = "rs_"

// sessionKeyID is the prefix of the id of the key a session stands for.
const sessionKeyID = "ses_"

// tokenPattern is a session token: the account, the session's id and
// its secret.
var tokenPattern = regexp.MustCompile(`^rs_([a-z0-9_]{1,40})\.([0-9a-f]{16})\.([A-Za-z0-9_-]{43})$`)

// IsToken reports whether s has the shape of a session token.
func IsToken(s string) bool { return strings.HasPrefix(s, TokenPrefix) }

func sessionEntry(accountID, id string) string { return "s." + accountID + "." + id }

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// CSRFToken is the token a session's writes must carry in the
// X-CSRF-Token header: derived from the session's secret token, so that
// only the session's own page (which is told it at sign-in) knows it.
func CSRFToken(token string) string {
	sum := sha256.Sum256([]byte("relay console csrf\x00" + token))
	return base64.RawURLEncoding.EncodeToString(sum[:24])
}

// openSession stores a new session of the account and returns its token.
// The account's least recently used sessions end when it has
// MaxSessionsPerAccount already.
func (s *Service) openSession(ctx context.Context, accountID, addr string) (string, error) {
	existing, err := s.sessions(ctx, accountID)
	if err != nil {
		return "", err
	}
	// Sessions that ended by idling are removed here, if not at their
	// next use.
	now := s.cfg.Now()
	existing = slices.DeleteFunc(existing, func(old session) bool {
		if now.Sub(old.LastSeen) <= s.cfg.IdleTimeout {
			return false
		}
		_ = s.cfg.KV.Delete(ctx, sessionEntry(accountID, old.ID))
		return true
	})
	if len(existing) >= MaxSessionsPerAccount {
		slices.SortFunc(existing, func(a, b session) int { return a.LastSeen.Compare(b.LastSeen) })
		for _, old := range existing[:len(existing)-MaxSessionsPerAccount+1] {
			if err := s.cfg.KV.Delete(ctx, sessionEntry(accountID, old.ID)); err != nil {
				return "", err
			}
		}
	}
	var idb [8]byte
	var secret [32]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(idb[:])
	token := TokenPrefix + accountID + "." + id + "." + base64.RawURLEncoding.EncodeToString(secret[:])
	now = now.UTC()
	data, _ := json.Marshal(session{ID: id, Account: accountID, Hash: hashHex(token), CreatedAt: now, LastSeen: now, Addr: addr})
	if err := s.cfg.KV.Create(ctx, sessionEntry(accountID, id), data); err != nil {
		return "", err
	}
	return token, nil
}

// sessions lists the account's sessions.
func (s *Service) sessions(ctx context.Context, accountID string) ([]session, error) {
	names, err := s.cfg.KV.Keys(ctx, "s."+accountID+".")
	if err != nil {
		return nil, err
	}
	out := make([]session, 0, len(names))
	for _, n := range names {
		data, _, err := s.cfg.KV.Get(ctx, n)
		if errors.Is(err, ErrNoEntry) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var sess session
		if json.Unmarshal(data, &sess) == nil {
			out = append(out, sess)
		}
	}
	return out, nil
}

// EndSessions ends every session of the account.
func (s *Service) EndSessions(ctx context.Context, accountID string) error {
	names, err := s.cfg.KV.Keys(ctx, "s."+accountID+".")
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := s.cfg.KV.Delete(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// SignOut ends the session of token; an unknown or ended one is no error.
func (s *Service) SignOut(ctx context.Context, token string) error {
	m := tokenPattern.FindStringSubmatch(token)
	if m == nil {
		return nil
	}
	sess, _, err := s.readSession(ctx, m[1], m[2])
	if err != nil || subtle.ConstantTimeCompare([]byte(sess.Hash), []byte(hashHex(token))) != 1 {
		return nil
	}
	s.cfg.Log.Info("signed out", "account", sess.Account)
	return s.cfg.KV.Delete(ctx, sessionEntry(m[1], m[2]))
}

func (s *Service) readSession(ctx context.Context, accountID, id string) (session, uint64, error) {
	data, rev, err := s.cfg.KV.Get(ctx, sessionEntry(accountID, id))
	if err != nil {
		return session{}, 0, err
	}
	var sess session
	if err := json.Unmarshal(data, &sess); err != nil {
		return session{}, 0, fmt.Errorf("signin: session: %w", err)
	}
	return sess, rev, nil
}

// sessionEnded is the refusal of a token whose session is over (or never
// was): 401, as an unknown API key.
type sessionEnded struct{ msg string }

func (e sessionEnded) Error() string { return e.msg }

// Is makes the relay answer it as it answers an unknown API key.
func (e sessionEnded) Is(target error) bool { return target == keys.ErrUnknown }

var errSessionEnded = sessionEnded{"Session has ended: sign in again"}

// Authenticate returns the key a session token stands for: the session's
// account acting as its admin. A session unused for the idle time, of a
// deleted account, or signed out is refused with 401; one of a suspended
// account ends, and is refused with the suspension (403).
func (s *Service) Authenticate(ctx context.Context, token string) (keys.Key, error) {
	m := tokenPattern.FindStringSubmatch(token)
	if m == nil {
		return keys.Key{}, errSessionEnded
	}
	sess, rev, err := s.readSession(ctx, m[1], m[2])
	if errors.Is(err, ErrNoEntry) {
		return keys.Key{}, errSessionEnded
	}
	if err != nil {
		return keys.Key{}, err
	}
	if subtle.ConstantTimeCompare([]byte(sess.Hash), []byte(hashHex(token))) != 1 {
		return keys.Key{}, errSessionEnded
	}
	return s.check(ctx, sess, rev)
}

// check decides whether a stored session may still be used, ending it
// when it may not, and records its use.
func (s *Service) check(ctx context.Context, sess session, rev uint64) (keys.Key, error) {
	now := s.cfg.Now()
	entry := sessionEntry(sess.Account, sess.ID)
	if now.Sub(sess.LastSeen) > s.cfg.IdleTimeout {
		_ = s.cfg.KV.Delete(ctx, entry)
		return keys.Key{}, sessionEnded{fmt.Sprintf("Session has ended after %s without use: sign in again", s.cfg.IdleTimeout)}
	}
	acct, err := s.cfg.Accounts.GetAccount(ctx, sess.Account)
	if errors.Is(err, keys.ErrAccountNotFound) {
		_ = s.cfg.KV.Delete(ctx, entry)
		return keys.Key{}, errSessionEnded
	}
	if err != nil {
		return keys.Key{}, err
	}
	if acct.Suspended() {
		_ = s.cfg.KV.Delete(ctx, entry)
		return keys.Key{}, keys.SuspendedError(acct)
	}
	if now.Sub(sess.LastSeen) > touchEvery {
		sess.LastSeen = now.UTC()
		data, _ := json.Marshal(sess)
		// A session used on two nodes at once records one of the uses:
		// either keeps it alive.
		if err := s.cfg.KV.Update(ctx, entry, data, rev); err != nil && !errors.Is(err, ErrChanged) {
			return keys.Key{}, err
		}
	}
	return sessionKey(sess, acct), nil
}

// SessionKeyPrefix starts the key ids of the account's console sessions.
func SessionKeyPrefix(accountID string) string { return sessionKeyID + accountID + "." }

// IsSessionKey reports whether a key id is a console session's (see
// sessionKey).
func IsSessionKey(id string) bool { return strings.HasPrefix(id, sessionKeyID) }

// Ended answers why the session whose key id is id has ended (signed out,
// unused for the idle time, ended with its account's password change or
// deletion), or nil while it lasts or cannot be read (the caller keeps
// what it holds until it can tell). It records no use: an event stream
// held open does not keep its session alive.
func (s *Service) Ended(ctx context.Context, id string) error {
	acct, sid, ok := strings.Cut(strings.TrimPrefix(id, sessionKeyID), ".")
	if !ok {
		return errSessionEnded
	}
	sess, _, err := s.readSession(ctx, acct, sid)
	switch {
	case errors.Is(err, ErrNoEntry):
		return errSessionEnded
	case err != nil:
		return nil
	case s.cfg.Now().Sub(sess.LastSeen) > s.cfg.IdleTimeout:
		return sessionEnded{fmt.Sprintf("Session has ended after %s without use: sign in again", s.cfg.IdleTimeout)}
	}
	return nil
}

// KeyByID returns the key of the session whose key id is id (see
// sessionKey), as Authenticate would.
func (s *Service) KeyByID(ctx context.Context, id string) (keys.Key, error) {
	acct, sid, ok := strings.Cut(strings.TrimPrefix(id, sessionKeyID), ".")
	if !ok {
		return keys.Key{}, keys.NotFound(id)
	}
	sess, rev, err := s.readSession(ctx, acct, sid)
	if errors.Is(err, ErrNoEntry) {
		return keys.Key{}, keys.NotFound(id)
	}
	if err != nil {
		return keys.Key{}, err
	}
	return s.check(ctx, sess, rev)
}

// sessionKey is the key a session stands for: its account's admin, with
// the scopes of the account's first admin key, and every scope for the
// operator's account, whose console manages the accounts.
func sessionKey(sess session, acct keys.Account) keys.Key {
	scopes := keys.FirstKeySpec(acct).Scopes
	if acct.ID == keys.OperatorAccount {
		scopes = slices.Clone(keys.AllScopes)
	}
	return keys.Key{
		ID:        sessionKeyID + sess.Account + "." + sess.ID,
		Name:      "console session",
		Scopes:    scopes,
		Enabled:   true,
		CreatedAt: sess.CreatedAt,
		CreatedBy: "session",
		AccountID: acct.ID,
	}
}

// Keys is a key store that also authenticates session tokens, as the
// keys their sessions stand for.
type Keys struct {
	keys.Backend
	Sessions *Service
}

// Authenticate authenticates an API key or a session token.
func (k Keys) Authenticate(ctx context.Context, plaintext string) (keys.Key, error) {
	if IsToken(plaintext) {
		return k.Sessions.Authenticate(ctx, plaintext)
	}
	return k.Backend.Authenticate(ctx, plaintext)
}

// Check reports what Authenticate would, without copying the key's record
// out when the backing store can judge a key in place (keys.Store and the
// cluster's store): admission runs it on every request, before the
// interceptor chain authenticates the same key again for its call.
func (k Keys) Check(ctx context.Context, plaintext string) error {
	if !IsToken(plaintext) {
		if c, ok := k.Backend.(interface {
			Check(ctx context.Context, plaintext string) error
		}); ok {
			return c.Check(ctx, plaintext)
		}
	}
	_, err := k.Authenticate(ctx, plaintext)
	return err
}

// Get returns a stored key, or the key of a session that is still open.
func (k Keys) Get(ctx context.Context, id string) (keys.Key, error) {
	if strings.HasPrefix(id, sessionKeyID) {
		return k.Sessions.KeyByID(ctx, id)
	}
	return k.Backend.Get(ctx, id)
}
