package server

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/world"
)

// WorldLinks is what the link service needs of linked worlds (package
// link, wired in cmd/relay): pairing codes and unpairing. Errors are world
// errors: an unknown linked world is world.ErrNotFound.
type WorldLinks interface {
	// CreatePairingCode issues a one-time code that pairs a new world, or
	// only the linked world clientID when it is not empty; createdBy is
	// the calling key's id, for the record, and the world belongs to its
	// account (keys.OperatorAccount for the operator's).
	CreatePairingCode(ctx context.Context, account, clientID, createdBy string) (PairingCode, error)
	// Unpair revokes the linked world's connection token and closes its
	// connection.
	Unpair(ctx context.Context, clientID string) (Unpaired, error)
}

// PairingCode is a new pairing code.
type PairingCode struct {
	Code      string
	ClientID  string
	ExpiresAt time.Time
}

// Unpaired is what unpairing a world did.
type Unpaired struct {
	RevokedTokens int
	Disconnected  bool
}

// linkService implements relayv1.LinkServiceServer.
type linkService struct {
	relayv1.UnimplementedLinkServiceServer
	links WorldLinks
	now   func() time.Time
	// chain decides which worlds the calling key's account may see.
	chain *Chain
	// quotas and worlds, when set, refuse a code for a new world to an
	// account that owns as many worlds as its quota allows.
	quotas *quotaPolicy
	worlds EmbeddedWorlds
}

// mayLink decides whether the calling key may pair or unpair the linked
// world clientID ("" for a new world). A connection token lets its holder
// answer every request for the world as it likes, so pairing is only for
// keys with GM-level access to that world: none acting as a tabletop user
// there. A key bound to worlds may pair only its own worlds again, never a
// new one, which would be a world outside its bindings.
//
// Another account's world is answered as a linked world that does not
// exist.
func (s linkService) mayLink(ctx context.Context, call *Call, clientID, verb string) error {
	k := call.Key
	if clientID != "" {
		if ok, err := s.chain.reaches(ctx, k, clientID); err != nil {
			return err
		} else if !ok {
			return world.Errorf(world.ErrNotFound, "Linked world not found: %s", clientID)
		}
	}
	if clientID == "" {
		if len(k.ClientIDs) > 0 {
			return status.Errorf(codes.PermissionDenied,
				"API key bound to worlds (%s) may not pair a new world: name one of its worlds in 'clientId' to pair it again",
				strings.Join(k.ClientIDs, ", "))
		}
		if k.ScopedUserID != "" {
			return status.Error(codes.PermissionDenied, "API key acting as a tabletop user may not pair worlds")
		}
		return nil
	}
	if !k.BoundTo(clientID) {
		return status.Errorf(codes.PermissionDenied, "API key is not authorized for client '%s'", clientID)
	}
	if k.UserFor(clientID) != "" {
		return status.Errorf(codes.PermissionDenied, "API key acting as a tabletop user in world '%s' may not %s it", clientID, verb)
	}
	return nil
}

// checkClientID refuses a clientId that cannot name a world, before any
// lookup.
func checkClientID(clientID string, required bool) error {
	switch {
	case clientID == "" && required:
		return world.Errorf(world.ErrInvalid, "'clientId' is required")
	case clientID != "" && (len(clientID) > 64 || strings.ContainsFunc(clientID, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '-')
	})):
		return world.Errorf(world.ErrInvalid, "'clientId' must be a world's id (letters, digits, '_' and '-', at most 64)")
	}
	return nil
}

func (s linkService) CreatePairingCode(ctx context.Context, req *relayv1.CreatePairingCodeRequest) (*relayv1.CreatePairingCodeResponse, error) {
	clientID := strings.TrimSpace(req.GetClientId())
	if err := checkClientID(clientID, false); err != nil {
		return nil, err
	}
	call := CallFrom(ctx)
	if err := s.mayLink(ctx, call, clientID, "pair"); err != nil {
		return nil, err
	}
	if s.links == nil {
		return nil, status.Error(codes.Unavailable, "Linked worlds are not enabled on this relay")
	}
	if clientID == "" && s.quotas != nil && s.worlds != nil {
		// A new world counts against the account's worlds; pairing one of
		// its worlds again does not.
		if err := s.quotas.checkWorlds(ctx, call.Key.Account(), s.worlds); err != nil {
			return nil, err
		}
	}
	code, err := s.links.CreatePairingCode(ctx, call.Key.Account(), clientID, call.Key.ID)
	if err != nil {
		return nil, err
	}
	expiresIn := max(int32(code.ExpiresAt.Sub(s.now()).Round(time.Second)/time.Second), 0)
	return &relayv1.CreatePairingCodeResponse{Code: code.Code, ClientId: code.ClientID,
		ExpiresAt: code.ExpiresAt.UTC().Format(time.RFC3339), ExpiresIn: expiresIn}, nil
}

func (s linkService) UnpairWorld(ctx context.Context, req *relayv1.UnpairWorldRequest) (*relayv1.UnpairWorldResponse, error) {
	clientID := strings.TrimSpace(req.GetClientId())
	if err := checkClientID(clientID, true); err != nil {
		return nil, err
	}
	if err := s.mayLink(ctx, CallFrom(ctx), clientID, "unpair"); err != nil {
		return nil, err
	}
	if s.links == nil {
		return nil, status.Error(codes.Unavailable, "Linked worlds are not enabled on this relay")
	}
	u, err := s.links.Unpair(ctx, clientID)
	if err != nil {
		return nil, err
	}
	return &relayv1.UnpairWorldResponse{ClientId: clientID, RevokedTokens: int32(u.RevokedTokens), Disconnected: u.Disconnected}, nil
}
