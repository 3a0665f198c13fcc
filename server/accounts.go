package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/server/signin"
	"github.com/tabletop-relay/relay/world"
)

// accountService implements relayv1.AccountServiceServer. The policy of
// every method names the scope `accounts`, which checkScope grants only to
// the operator (keys.Key.ManagesAccounts), so no other key reaches it.
type accountService struct {
	relayv1.UnimplementedAccountServiceServer
	store keys.Accounts
	// release, when set, lets go of what an account owns besides its
	// keys (its linked worlds' tokens) before the account is deleted.
	release func(ctx context.Context, accountID string) error
	// chain resolves the account's embedded worlds to their hosts, which
	// remove them when the account is deleted.
	chain *Chain
	// quotas applies the relay's defaults to the accounts' quotas.
	quotas *quotaPolicy
	// worlds counts the worlds each account owns; nil counts none.
	worlds EmbeddedWorlds
	// streams counts the open event streams of each account.
	streams *streamLimits
	// signin keeps the accounts' passwords and console sessions; nil
	// refuses a password.
	signin *signin.Service
}

func (s accountService) CreateAccount(ctx context.Context, req *relayv1.CreateAccountRequest) (*relayv1.CreateAccountResponse, error) {
	if err := s.checkPassword(req.GetPassword()); err != nil {
		return nil, err
	}
	a, plaintext, _, err := s.store.CreateAccount(ctx, CallFrom(ctx).Key.ID, req.GetName(), quotasFromProto(req.GetQuotas()))
	if err != nil {
		return nil, err
	}
	if req.GetPassword() != "" {
		if err := s.signin.SetPassword(ctx, a.ID, req.GetPassword()); err != nil {
			// No account without the password it was made with.
			_, _ = s.store.DeleteAccount(context.WithoutCancel(ctx), a.ID)
			return nil, err
		}
	}
	return &relayv1.CreateAccountResponse{Account: s.describe(ctx, a), Key: plaintext}, nil
}

func (s accountService) ListAccounts(ctx context.Context, _ *relayv1.ListAccountsRequest) (*relayv1.ListAccountsResponse, error) {
	list, err := s.store.ListAccounts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*relayv1.Account, 0, len(list))
	for _, a := range list {
		out = append(out, s.describe(ctx, a))
	}
	return &relayv1.ListAccountsResponse{Accounts: out}, nil
}

func (s accountService) GetAccount(ctx context.Context, req *relayv1.GetAccountRequest) (*relayv1.GetAccountResponse, error) {
	id, err := accountID(req.GetId())
	if err != nil {
		return nil, err
	}
	a, err := s.store.GetAccount(ctx, id)
	if err != nil {
		return nil, err
	}
	return &relayv1.GetAccountResponse{Account: s.describe(ctx, a)}, nil
}

func (s accountService) UpdateAccount(ctx context.Context, req *relayv1.UpdateAccountRequest) (*relayv1.UpdateAccountResponse, error) {
	id, err := accountID(req.GetId())
	if err != nil {
		return nil, err
	}
	var name *string
	if n := req.GetName(); n != "" {
		name = &n
	}
	var q *keys.Quotas
	if req.GetQuotas() != nil {
		qq := quotasFromProto(req.GetQuotas())
		q = &qq
	}
	if err := s.checkPassword(req.GetPassword()); err != nil {
		return nil, err
	}
	a, err := s.store.UpdateAccount(ctx, id, name, q)
	if err != nil {
		return nil, err
	}
	if s.quotas != nil {
		s.quotas.forget(id)
	}
	if req.GetPassword() != "" {
		if err := s.signin.SetPassword(ctx, a.ID, req.GetPassword()); err != nil {
			return nil, err
		}
	}
	return &relayv1.UpdateAccountResponse{Account: s.describe(ctx, a)}, nil
}

func (s accountService) SuspendAccount(ctx context.Context, req *relayv1.SuspendAccountRequest) (*relayv1.SuspendAccountResponse, error) {
	id, err := accountID(req.GetId())
	if err != nil {
		return nil, err
	}
	a, err := s.store.SuspendAccount(ctx, id, true)
	if err != nil {
		return nil, err
	}
	if s.signin != nil {
		// The account's console sessions end now, on every node; any
		// other session would end at its next use anyway.
		if err := s.signin.EndSessions(ctx, id); err != nil {
			return nil, err
		}
	}
	return &relayv1.SuspendAccountResponse{Account: s.describe(ctx, a)}, nil
}

func (s accountService) ResumeAccount(ctx context.Context, req *relayv1.ResumeAccountRequest) (*relayv1.ResumeAccountResponse, error) {
	id, err := accountID(req.GetId())
	if err != nil {
		return nil, err
	}
	a, err := s.store.SuspendAccount(ctx, id, false)
	if err != nil {
		return nil, err
	}
	return &relayv1.ResumeAccountResponse{Account: s.describe(ctx, a)}, nil
}

func (s accountService) DeleteAccount(ctx context.Context, req *relayv1.DeleteAccountRequest) (*relayv1.DeleteAccountResponse, error) {
	id, err := accountID(req.GetId())
	if err != nil {
		return nil, err
	}
	if _, err := s.store.GetAccount(ctx, id); err != nil {
		return nil, err
	}
	if id != keys.OperatorAccount {
		// Its worlds go first: should that fail, the account is still
		// there to delete again.
		if err := s.removeEmbeddedWorlds(ctx, id); err != nil {
			return nil, err
		}
		if s.release != nil {
			if err := s.release(ctx, id); err != nil {
				return nil, err
			}
		}
	}
	a, err := s.store.DeleteAccount(ctx, id)
	if err != nil {
		return nil, err
	}
	if s.signin != nil {
		if err := s.signin.ForgetAccount(ctx, id); err != nil {
			return nil, err
		}
	}
	if s.quotas != nil {
		s.quotas.forget(id)
	}
	return &relayv1.DeleteAccountResponse{Account: accountToProto(a, usage{}, s.limitsOf(a))}, nil
}

// removeEmbeddedWorlds removes the embedded worlds of an account that is
// being deleted, each by the node that hosts it, as DELETE
// /worlds/{clientId} would: in a cluster its host also deletes its
// replicated log and its events and has its followers drop their copies,
// so that no node brings it back. A world that no node holds any more is
// left to release, which forgets its owner record.
func (s accountService) removeEmbeddedWorlds(ctx context.Context, accountID string) error {
	if s.worlds == nil || s.chain == nil {
		return nil
	}
	call := CallFrom(ctx)
	// Deleting an account deletes its worlds: the host is asked to remove
	// each one on behalf of the operator's key that deletes the account,
	// with the authority that removal takes (the admin scope, any world,
	// no tabletop user) and nothing more.
	remover := call.Key
	remover.Scopes = []string{keys.ScopeAdmin}
	remover.ClientIDs, remover.ScopedUserID, remover.ClientUsers = nil, "", nil
	removal := &Call{Method: relayv1.WorldService_DeleteWorld_FullMethodName, RequestID: call.RequestID, Key: remover}
	worlds := worldService{worlds: s.worlds, chain: s.chain}
	for _, clientID := range s.store.OwnedWorlds(accountID) {
		err := worlds.remove(ctx, removal, clientID)
		if errors.Is(err, world.ErrNotFound) || status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("remove the account's world %s: %w", clientID, err)
		}
	}
	return nil
}

// checkPassword refuses a password that may not be set, before anything
// is changed; none (empty) is fine.
func (s accountService) checkPassword(password string) error {
	switch {
	case password == "":
		return nil
	case s.signin == nil:
		return errNoSignin
	}
	return s.signin.CheckNewPassword("password", password)
}

// accountID checks that a request names an account.
func accountID(id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("%w: 'id' is required", keys.ErrAccountInvalid)
	}
	return id, nil
}

// quotasFromProto reads the quotas of a request; a negative one is
// refused by the store, naming it.
func quotasFromProto(q *relayv1.AccountQuotas) keys.Quotas {
	return keys.Quotas{
		Worlds:            int64(q.GetWorlds()),
		Keys:              int64(q.GetKeys()),
		Streams:           int64(q.GetStreams()),
		RequestsPerMinute: int64(q.GetRequestsPerMinute()),
		UploadBytes:       q.GetUploadBytes(),
		StoredBytes:       q.GetStoredBytes(),
	}
}

// quotasToProto describes quotas.
func quotasToProto(q keys.Quotas) *relayv1.AccountQuotas {
	return &relayv1.AccountQuotas{
		Worlds:            int32(q.Worlds),
		Keys:              int32(q.Keys),
		Streams:           int32(q.Streams),
		RequestsPerMinute: int32(q.RequestsPerMinute),
		UploadBytes:       q.UploadBytes,
		StoredBytes:       q.StoredBytes,
	}
}

// usage is what an account uses of its quotas, as far as this node can
// count it.
type usage struct {
	keys.AccountUsage
	worlds      int64
	storedBytes int64
	streams     int64
	requests    int64
}

// limitsOf returns the limits that apply to a.
func (s accountService) limitsOf(a keys.Account) keys.Quotas {
	if s.quotas == nil {
		return a.Quotas
	}
	return s.quotas.limits(a)
}

// describe describes an account with its usage. An account deleted
// meanwhile has no usage to count: it is described as using nothing.
func (s accountService) describe(ctx context.Context, a keys.Account) *relayv1.Account {
	var u usage
	u.AccountUsage, _ = s.store.AccountUsage(ctx, a.ID)
	if s.worlds != nil {
		u.worlds, _ = s.worlds.CountWorlds(ctx, a.ID)
		u.storedBytes = s.worlds.StoredBytes(ctx, a.ID)
	}
	if s.streams != nil {
		u.streams = s.streams.openBy(a.ID)
	}
	if s.quotas != nil {
		u.requests = s.quotas.rates.thisMinute(a.ID, time.Now())
	}
	return accountToProto(a, u, s.limitsOf(a))
}

// accountToProto describes an account with its usage and limits.
func accountToProto(a keys.Account, u usage, limits keys.Quotas) *relayv1.Account {
	return &relayv1.Account{
		Id:          a.ID,
		Name:        a.Name,
		Quotas:      quotasToProto(a.Quotas),
		CreatedAt:   formatOptionalTime(a.CreatedAt),
		Suspended:   a.Suspended(),
		SuspendedAt: formatOptionalTime(a.SuspendedAt),
		Usage: &relayv1.AccountUsage{
			Keys:               int32(u.Keys),
			Worlds:             int32(u.worlds),
			StoredBytes:        u.storedBytes,
			Streams:            int32(u.streams),
			RequestsThisMinute: int32(u.requests),
		},
		Limits: quotasToProto(limits),
	}
}
