package signin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tabletop-relay/relay/server/keys"
)

// Invite is a single-use invitation to sign up. Its code is shown once,
// when it is made; the store keeps only its hash.
type Invite struct {
	ID        string    `json:"id"`
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"createdAt"`
	CreatedBy string    `json:"createdBy"`
	ExpiresAt time.Time `json:"expiresAt"`
	UsedAt    time.Time `json:"usedAt,omitzero"`
	// Account is the account the invite made.
	Account   string    `json:"account,omitempty"`
	RevokedAt time.Time `json:"revokedAt,omitzero"`
}

// Invite statuses.
const (
	InviteOpen    = "open"
	InviteUsed    = "used"
	InviteRevoked = "revoked"
	InviteExpired = "expired"
)

// Status is the invite's status at now.
func (i Invite) Status(now time.Time) string {
	switch {
	case !i.UsedAt.IsZero():
		return InviteUsed
	case !i.RevokedAt.IsZero():
		return InviteRevoked
	case !now.Before(i.ExpiresAt):
		return InviteExpired
	}
	return InviteOpen
}

// ended is when the invite stopped being open; zero for an open one.
func (i Invite) ended(now time.Time) time.Time {
	switch i.Status(now) {
	case InviteUsed:
		return i.UsedAt
	case InviteRevoked:
		return i.RevokedAt
	case InviteExpired:
		return i.ExpiresAt
	}
	return time.Time{}
}

func inviteEntry(id string) string { return "i." + id }

// inviteIDPattern is an invite's id; inviteCodePattern its code: the id
// and its secret.
var (
	inviteIDPattern   = regexp.MustCompile(`^inv_[0-9a-f]{16}$`)
	inviteCodePattern = regexp.MustCompile(`^(inv_[0-9a-f]{16})\.([A-Za-z0-9_-]{32})$`)
)

// errInviteNotFound is the answer for an unknown invite id.
func errInviteNotFound(id string) error {
	if len(id) > 80 {
		id = id[:80] + "..."
	}
	return refuse(http.StatusNotFound, codes.NotFound, "Invite not found: %s", id)
}

// CreateInvite makes an invite that lasts ttl (DefaultInviteTTL when 0)
// and returns its code, shown only this once.
func (s *Service) CreateInvite(ctx context.Context, createdBy string, ttl time.Duration) (string, Invite, error) {
	switch {
	case ttl == 0:
		ttl = DefaultInviteTTL
	case ttl < time.Minute || ttl > MaxInviteTTL:
		return "", Invite{}, invalidf("'expiresInSeconds' must be from 60 to %d", int64(MaxInviteTTL/time.Second))
	}
	list, err := s.ListInvites(ctx)
	if err != nil {
		return "", Invite{}, err
	}
	now := s.cfg.Now()
	open := 0
	for _, inv := range list {
		if inv.Status(now) == InviteOpen {
			open++
		}
	}
	if open >= MaxOpenInvites {
		return "", Invite{}, refuse(http.StatusTooManyRequests, codes.ResourceExhausted,
			"There are %d open invites, as many as the relay keeps: revoke some first", open)
	}
	// The list is newest first: the oldest ended invites go first.
	for i := len(list) - 1; i >= 0 && len(list) >= MaxKeptInvites; i-- {
		if list[i].Status(now) == InviteOpen {
			continue
		}
		if err := s.cfg.KV.Delete(ctx, inviteEntry(list[i].ID)); err != nil {
			return "", Invite{}, err
		}
		list = slices.Delete(list, i, i+1)
	}
	var idb [8]byte
	var secret [24]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", Invite{}, err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", Invite{}, err
	}
	inv := Invite{ID: "inv_" + hex.EncodeToString(idb[:]), CreatedAt: now.UTC(), CreatedBy: createdBy, ExpiresAt: now.UTC().Add(ttl)}
	code := inv.ID + "." + base64.RawURLEncoding.EncodeToString(secret[:])
	inv.Hash = hashHex(code)
	data, _ := json.Marshal(inv)
	if err := s.cfg.KV.Create(ctx, inviteEntry(inv.ID), data); err != nil {
		return "", Invite{}, err
	}
	return code, inv, nil
}

// ListInvites lists the invites, newest first. Invites that stopped
// being open more than 30 days ago are forgotten.
func (s *Service) ListInvites(ctx context.Context) ([]Invite, error) {
	names, err := s.cfg.KV.Keys(ctx, "i.")
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	out := make([]Invite, 0, len(names))
	for _, n := range names {
		inv, _, err := s.readInvite(ctx, n)
		if errors.Is(err, ErrNoEntry) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if end := inv.ended(now); !end.IsZero() && now.Sub(end) > inviteKeepAfter {
			_ = s.cfg.KV.Delete(ctx, n)
			continue
		}
		out = append(out, inv)
	}
	slices.SortFunc(out, func(a, b Invite) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

func (s *Service) readInvite(ctx context.Context, entry string) (Invite, uint64, error) {
	data, rev, err := s.cfg.KV.Get(ctx, entry)
	if err != nil {
		return Invite{}, 0, err
	}
	var inv Invite
	if err := json.Unmarshal(data, &inv); err != nil {
		return Invite{}, 0, fmt.Errorf("signin: invite: %w", err)
	}
	return inv, rev, nil
}

// RevokeInvite revokes an open invite; revoking one that is not open
// changes nothing.
func (s *Service) RevokeInvite(ctx context.Context, id string) (Invite, error) {
	if !inviteIDPattern.MatchString(id) {
		return Invite{}, errInviteNotFound(id)
	}
	for attempt := 0; ; attempt++ {
		if attempt == maxAttempts {
			return Invite{}, errBusy
		}
		inv, rev, err := s.readInvite(ctx, inviteEntry(id))
		if errors.Is(err, ErrNoEntry) {
			return Invite{}, errInviteNotFound(id)
		}
		if err != nil {
			return Invite{}, err
		}
		if inv.Status(s.cfg.Now()) != InviteOpen {
			return inv, nil
		}
		inv.RevokedAt = s.cfg.Now().UTC()
		data, _ := json.Marshal(inv)
		err = s.cfg.KV.Update(ctx, inviteEntry(id), data, rev)
		if errors.Is(err, ErrChanged) {
			continue
		}
		return inv, err
	}
}

// errBadInvite is the one answer for an invite that is unknown, used,
// revoked or expired.
var errBadInvite = refuse(http.StatusForbidden, codes.PermissionDenied, "The invite is unknown, used, revoked or expired")

// claimInvite marks the invite of code used (by nobody yet) and returns a
// function that records the account it made, or, given "", gives the
// invite back.
func (s *Service) claimInvite(ctx context.Context, code string) (func(accountID string), error) {
	m := inviteCodePattern.FindStringSubmatch(code)
	if m == nil {
		return nil, errBadInvite
	}
	entry := inviteEntry(m[1])
	for attempt := 0; ; attempt++ {
		if attempt == maxAttempts {
			return nil, errBusy
		}
		inv, rev, err := s.readInvite(ctx, entry)
		if errors.Is(err, ErrNoEntry) {
			return nil, errBadInvite
		}
		if err != nil {
			return nil, err
		}
		if subtle.ConstantTimeCompare([]byte(inv.Hash), []byte(hashHex(code))) != 1 || inv.Status(s.cfg.Now()) != InviteOpen {
			return nil, errBadInvite
		}
		inv.UsedAt = s.cfg.Now().UTC()
		data, _ := json.Marshal(inv)
		err = s.cfg.KV.Update(ctx, entry, data, rev)
		if errors.Is(err, ErrChanged) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return func(accountID string) {
			// The outcome is recorded on a context of its own: the
			// account exists (or does not) whatever the caller's does.
			ctx := context.WithoutCancel(ctx)
			for range 5 {
				cur, rev, err := s.readInvite(ctx, entry)
				if err != nil {
					return
				}
				if accountID == "" {
					cur.UsedAt = time.Time{}
				} else {
					cur.Account = accountID
				}
				data, _ := json.Marshal(cur)
				if err := s.cfg.KV.Update(ctx, entry, data, rev); !errors.Is(err, ErrChanged) {
					return
				}
			}
		}, nil
	}
}

// SignupResult is a new account made by a sign-up, with its first admin
// key, shown only this once.
type SignupResult struct {
	Account keys.Account
	Key     string
}

// SignUp makes an account for a visitor, as --signup allows: with an
// invite (SignupInvite) or without (SignupOpen). The account gets the
// relay's default quotas, its first admin key and, when given, its
// password. Nothing is made when anything is refused.
func (s *Service) SignUp(ctx context.Context, name, password, invite, addr string) (SignupResult, error) {
	if s.cfg.Signup == SignupClosed {
		return SignupResult{}, refuse(http.StatusForbidden, codes.PermissionDenied, "Sign-up is closed on this relay: ask its operator for an account")
	}
	if s.cfg.SignupAttempts != nil {
		if ok, wait := s.cfg.SignupAttempts.Allow(addr); !ok {
			return SignupResult{}, retryAfter(wait, "Too many sign-ups from this address")
		}
	}
	if _, err := keys.NormalizeAccountName(name); err != nil {
		return SignupResult{}, err
	}
	if password != "" {
		if err := CheckPassword("password", password); err != nil {
			return SignupResult{}, err
		}
	}
	var done func(string)
	if s.cfg.Signup == SignupInvite {
		if invite == "" {
			return SignupResult{}, invalidf("'invite' is required: sign-up on this relay is by invite")
		}
		var err error
		if done, err = s.claimInvite(ctx, invite); err != nil {
			return SignupResult{}, err
		}
	}
	a, key, _, err := s.cfg.Accounts.CreateAccount(ctx, "signup", name, keys.Quotas{})
	if err == nil && password != "" {
		if err = s.SetPassword(ctx, a.ID, password); err != nil {
			_, _ = s.cfg.Accounts.DeleteAccount(context.WithoutCancel(ctx), a.ID)
		}
	}
	if done != nil {
		if err != nil {
			done("")
		} else {
			done(a.ID)
		}
	}
	if err != nil {
		return SignupResult{}, err
	}
	s.cfg.Log.Info("signed up", "account", a.ID, "addr", addr, "mode", s.cfg.Signup)
	return SignupResult{Account: a, Key: key}, nil
}
