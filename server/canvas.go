package server

import (
	"context"
	"fmt"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/world"
)

// canvasService implements relayv1.CanvasServiceServer over the world.
type canvasService struct {
	relayv1.UnimplementedCanvasServiceServer
}

func (canvasService) SelectTokens(ctx context.Context, req *relayv1.SelectTokensRequest) (*relayv1.SelectTokensResponse, error) {
	selection, call, err := capability[world.Selection](ctx)
	if err != nil {
		return nil, err
	}
	match, err := fromStruct("data", req.GetData())
	if err != nil {
		return nil, err
	}
	selected, err := selection.Select(ctx, call.User, world.SelectParams{
		UUIDs:     req.GetUuids(),
		Name:      req.GetName(),
		All:       req.GetAll(),
		Overwrite: req.GetOverwrite(),
		Match:     match,
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.SelectTokensResponse{
		Count:    int32(len(selected)),
		Message:  fmt.Sprintf("%d entities selected", len(selected)),
		Selected: selected,
	}, nil
}

func (canvasService) GetSelectedTokens(ctx context.Context, _ *relayv1.GetSelectedTokensRequest) (*relayv1.GetSelectedTokensResponse, error) {
	selection, call, err := capability[world.Selection](ctx)
	if err != nil {
		return nil, err
	}
	tokens, err := selection.Selected(ctx, call.User)
	if err != nil {
		return nil, err
	}
	out := make([]*relayv1.SelectedToken, 0, len(tokens))
	for _, t := range tokens {
		out = append(out, &relayv1.SelectedToken{TokenUuid: t.TokenUUID, ActorUuid: t.ActorUUID})
	}
	return &relayv1.GetSelectedTokensResponse{Selected: out}, nil
}
