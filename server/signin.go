package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/signin"
)

// signinService implements relayv1.SigninServiceServer: an account's own
// password, and the operator's invites to sign up. Without a sign-in
// service (Config.Signin) every method is Unimplemented.
type signinService struct {
	relayv1.UnimplementedSigninServiceServer
	signin *signin.Service
}

// errNoSignin answers the methods of a relay that keeps no passwords.
var errNoSignin = status.Error(codes.Unimplemented, "This relay keeps no passwords or invites")

func (s signinService) ChangePassword(ctx context.Context, req *relayv1.ChangePasswordRequest) (*relayv1.ChangePasswordResponse, error) {
	if s.signin == nil {
		return nil, errNoSignin
	}
	account := CallFrom(ctx).Key.Account()
	if err := s.signin.ChangePassword(ctx, account, req.GetOldPassword(), req.GetNewPassword()); err != nil {
		return nil, err
	}
	return &relayv1.ChangePasswordResponse{AccountId: account}, nil
}

func (s signinService) CreateInvite(ctx context.Context, req *relayv1.CreateInviteRequest) (*relayv1.CreateInviteResponse, error) {
	if s.signin == nil {
		return nil, errNoSignin
	}
	seconds := req.GetExpiresInSeconds()
	if seconds < 0 || seconds > int64(signin.MaxInviteTTL/time.Second) {
		seconds = -1 // refused by CreateInvite, naming the parameter
	}
	code, inv, err := s.signin.CreateInvite(ctx, CallFrom(ctx).Key.ID, time.Duration(seconds)*time.Second)
	if err != nil {
		return nil, err
	}
	return &relayv1.CreateInviteResponse{Invite: inviteToProto(inv, time.Now()), Code: code}, nil
}

func (s signinService) ListInvites(ctx context.Context, _ *relayv1.ListInvitesRequest) (*relayv1.ListInvitesResponse, error) {
	if s.signin == nil {
		return nil, errNoSignin
	}
	list, err := s.signin.ListInvites(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]*relayv1.Invite, 0, len(list))
	for _, inv := range list {
		out = append(out, inviteToProto(inv, now))
	}
	return &relayv1.ListInvitesResponse{Invites: out}, nil
}

func (s signinService) RevokeInvite(ctx context.Context, req *relayv1.RevokeInviteRequest) (*relayv1.RevokeInviteResponse, error) {
	if s.signin == nil {
		return nil, errNoSignin
	}
	inv, err := s.signin.RevokeInvite(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &relayv1.RevokeInviteResponse{Invite: inviteToProto(inv, time.Now())}, nil
}

// inviteToProto describes an invite at now.
func inviteToProto(inv signin.Invite, now time.Time) *relayv1.Invite {
	return &relayv1.Invite{
		Id:        inv.ID,
		Status:    inv.Status(now),
		CreatedAt: formatOptionalTime(inv.CreatedAt),
		ExpiresAt: formatOptionalTime(inv.ExpiresAt),
		UsedAt:    formatOptionalTime(inv.UsedAt),
		AccountId: inv.Account,
		RevokedAt: formatOptionalTime(inv.RevokedAt),
	}
}
