package server

import (
	"context"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// clientService implements relayv1.ClientServiceServer: the worlds a key may
// use.
type clientService struct {
	relayv1.UnimplementedClientServiceServer
	worlds Worlds
	// chain decides which worlds the calling key's account may see.
	chain *Chain
}

func (s clientService) ListClients(ctx context.Context, _ *relayv1.ListClientsRequest) (*relayv1.ListClientsResponse, error) {
	call := CallFrom(ctx)
	infos, err := s.worlds.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*relayv1.Client, 0, len(infos))
	for _, info := range infos {
		if !call.Key.BoundTo(info.ClientID) {
			continue
		}
		if ok, err := s.chain.reaches(ctx, call.Key, info.ClientID); err != nil {
			return nil, err
		} else if !ok {
			continue
		}
		out = append(out, &relayv1.Client{ClientId: info.ClientID, Title: info.Title, System: info.System, Online: info.Online, IsOnline: info.Online,
			Name: info.Name, Kind: info.Kind, WorldId: info.WorldID, WorldTitle: info.Title, SystemId: info.System,
			SystemVersion: info.SystemVersion, TabletopVersion: info.TabletopVersion,
			ConnectedSince: formatOptionalTime(info.ConnectedAt), LastSeen: formatOptionalTime(info.LastSeen)})
	}
	return &relayv1.ListClientsResponse{Total: int32(len(out)), Clients: out}, nil
}
