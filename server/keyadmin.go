package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/server/signin"
)

// KeyAdmin is what the key service needs of the key store. Every method acts
// on the authority of the calling key, which the store checks with
// keys.Authorize: no key can create, see or revoke a key beyond its own
// bindings. The service has no way to skip that check.
type KeyAdmin interface {
	CreateAs(ctx context.Context, actor keys.Key, spec keys.Spec) (string, keys.Key, error)
	ListAs(ctx context.Context, actor keys.Key) ([]keys.Key, error)
	RevokeAs(ctx context.Context, actor keys.Key, id string) (keys.Key, error)
}

// keyService implements relayv1.KeyServiceServer.
type keyService struct {
	relayv1.UnimplementedKeyServiceServer
	store KeyAdmin
	// accounts, when set, holds the quotas that bound each account's
	// keys; defaultMaxKeys applies where an account's quota is 0.
	accounts       keys.Accounts
	defaultMaxKeys int64
	// maxPerCreator bounds the unrevoked keys any one key has created,
	// so that no key (the operator's included) can mint keys without
	// end; 0 sets no bound.
	maxPerCreator int
	// chain tells which worlds the calling key's account owns.
	chain *Chain
}

// DefaultAccountMaxKeys is how many unrevoked keys an account other than
// the operator's may hold when neither its quota nor the relay's
// configuration says otherwise.
const DefaultAccountMaxKeys = 1000

// DefaultMaxKeysPerCreator is how many unrevoked keys one key may have
// created when the relay's configuration does not say.
const DefaultMaxKeysPerCreator = 1000

// checkCreatorQuota refuses a new key to a key that has already created
// as many unrevoked keys as the relay allows one key. Revoking some of
// them makes room again.
func (s keyService) checkCreatorQuota(ctx context.Context, actor keys.Key) error {
	if s.maxPerCreator <= 0 {
		return nil
	}
	// Every key an actor created lies within its own bindings, so the
	// actor's own listing holds them all.
	list, err := s.store.ListAs(ctx, actor)
	if err != nil {
		return err
	}
	made := 0
	for _, k := range list {
		if k.CreatedBy == actor.ID && !k.Revoked() {
			made++
		}
	}
	if made >= s.maxPerCreator {
		return status.Errorf(codes.PermissionDenied, "Key quota reached: one API key may have created at most %d unrevoked keys (--max-keys-per-creator); revoke some of them first", s.maxPerCreator)
	}
	return nil
}

// checkOwnWorlds refuses a key of an account other than the operator's
// bound to a world its account does not own. A world of another account
// and a world that does not exist get the same answer, which reveals
// nothing.
func (s keyService) checkOwnWorlds(ctx context.Context, actor keys.Key, clientIDs []string) error {
	if actor.Operator() || s.chain == nil {
		return nil
	}
	for _, c := range clientIDs {
		ok, err := s.chain.reaches(ctx, actor, c)
		if err != nil {
			return err
		}
		if !ok {
			return status.Errorf(codes.PermissionDenied, "API key may only be bound to its account's worlds: %q is not one of them", c)
		}
	}
	return nil
}

// checkKeyQuota refuses a new key of an account that holds as many
// unrevoked keys as its quota allows. The operator's account is bound
// only by a quota of its own.
func (s keyService) checkKeyQuota(ctx context.Context, actor keys.Key) error {
	if s.accounts == nil {
		return nil
	}
	a, err := s.accounts.GetAccount(ctx, actor.Account())
	if err != nil {
		return err
	}
	limit := a.Quotas.Keys
	if limit == 0 && !actor.Operator() {
		limit = s.defaultMaxKeys
	}
	if limit <= 0 {
		return nil
	}
	u, err := s.accounts.AccountUsage(ctx, a.ID)
	if err != nil {
		return err
	}
	if u.Keys >= limit {
		return status.Errorf(codes.PermissionDenied, "Account quota reached: 'keys' allows %d unrevoked keys; revoke one first", limit)
	}
	return nil
}

func (s keyService) CreateKey(ctx context.Context, req *relayv1.CreateKeyRequest) (*relayv1.CreateKeyResponse, error) {
	var scopes []string
	for _, sc := range req.GetScopes() {
		parsed, err := keys.ParseScopes(sc)
		if err != nil {
			return nil, err
		}
		scopes = append(scopes, parsed...)
	}
	spec := keys.Spec{
		Name:         req.GetName(),
		Scopes:       scopes,
		ClientIDs:    req.GetClientIds(),
		ScopedUserID: req.GetScopedUserId(),
		ClientUsers:  req.GetClientUsers(),
	}
	if v := req.GetExpiresAt(); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, fmt.Errorf("%w: 'expiresAt' must be an RFC 3339 time: %q", keys.ErrInvalid, v)
		}
		spec.ExpiresAt = t
	}
	if err := s.checkKeyQuota(ctx, CallFrom(ctx).Key); err != nil {
		return nil, err
	}
	if err := s.checkCreatorQuota(ctx, CallFrom(ctx).Key); err != nil {
		return nil, err
	}
	if err := s.checkOwnWorlds(ctx, CallFrom(ctx).Key, req.GetClientIds()); err != nil {
		return nil, err
	}
	plaintext, key, err := s.store.CreateAs(ctx, CallFrom(ctx).Key, spec)
	if err != nil {
		return nil, err
	}
	return &relayv1.CreateKeyResponse{Key: plaintext, ApiKey: keyToProto(key)}, nil
}

func (s keyService) ListKeys(ctx context.Context, _ *relayv1.ListKeysRequest) (*relayv1.ListKeysResponse, error) {
	list, err := s.store.ListAs(ctx, CallFrom(ctx).Key)
	if err != nil {
		return nil, err
	}
	caller := CallFrom(ctx).Key
	out := make([]*relayv1.ApiKey, 0, len(list))
	for _, k := range list {
		out = append(out, keyToProto(k))
	}
	hideForeignCreators(caller, out, list)
	return &relayv1.ListKeysResponse{Keys: out}, nil
}

// hideForeignCreators blanks, for a caller of an account other than the
// operator's, the creator of each described key that is not one of own
// (the account's keys) nor one of the account's console sessions: the
// operator's key that made an account's first key is the operator's
// business, and its id is not shown to the account.
func hideForeignCreators(caller keys.Key, described []*relayv1.ApiKey, own []keys.Key) {
	if caller.Operator() {
		return
	}
	ids := make(map[string]bool, len(own))
	for _, k := range own {
		ids[k.ID] = true
	}
	sessions := signin.SessionKeyPrefix(caller.Account())
	for _, d := range described {
		if by := d.GetCreatedBy(); by != "" && !ids[by] && !strings.HasPrefix(by, sessions) {
			d.CreatedBy = ""
		}
	}
}

func (s keyService) RevokeKey(ctx context.Context, req *relayv1.RevokeKeyRequest) (*relayv1.RevokeKeyResponse, error) {
	if req.GetId() == "" {
		return nil, fmt.Errorf("%w: 'id' is required", keys.ErrInvalid)
	}
	caller := CallFrom(ctx).Key
	k, err := s.store.RevokeAs(ctx, caller, req.GetId())
	if err != nil {
		return nil, err
	}
	described := keyToProto(k)
	if !caller.Operator() && k.CreatedBy != caller.ID {
		own, err := s.store.ListAs(ctx, caller)
		if err != nil {
			own = nil // the key is revoked: at worst its creator is not shown
		}
		hideForeignCreators(caller, []*relayv1.ApiKey{described}, own)
	}
	return &relayv1.RevokeKeyResponse{ApiKey: described}, nil
}

// keyToProto describes a key without its secret.
func keyToProto(k keys.Key) *relayv1.ApiKey {
	return &relayv1.ApiKey{
		Id:           k.ID,
		Name:         k.Name,
		Prefix:       k.Prefix,
		Scopes:       k.Scopes,
		ClientIds:    k.ClientIDs,
		ScopedUserId: k.ScopedUserID,
		ClientUsers:  k.ClientUsers,
		ExpiresAt:    formatOptionalTime(k.ExpiresAt),
		Enabled:      k.Enabled,
		CreatedAt:    formatOptionalTime(k.CreatedAt),
		RevokedAt:    formatOptionalTime(k.RevokedAt),
		CreatedBy:    k.CreatedBy,
	}
}

// formatOptionalTime renders a time as RFC 3339, or "" for the zero time.
func formatOptionalTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
