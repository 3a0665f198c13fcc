package server

import (
	"context"
	"time"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/world"
)

// scriptService implements relayv1.ScriptServiceServer over the worlds'
// scripts ([world.Scripts]).
type scriptService struct {
	relayv1.UnimplementedScriptServiceServer
	// timeout is the relay's time limit of a script (--script-timeout),
	// handed to the world with each script.
	timeout time.Duration
}

func (s scriptService) ExecuteJs(ctx context.Context, req *relayv1.ExecuteJsRequest) (*relayv1.ExecuteJsResponse, error) {
	scripts, call, err := capability[world.Scripts](ctx)
	if err != nil {
		return nil, err
	}
	res, err := scripts.ExecuteJS(ctx, call.User, req.GetScript(), world.ScriptOptions{Timeout: s.timeout})
	if err != nil {
		return nil, err
	}
	raw, err := toJSON(res.Value)
	if err != nil {
		return nil, err
	}
	logs := res.Logs
	if logs == nil {
		logs = []string{}
	}
	return &relayv1.ExecuteJsResponse{Result: raw, Logs: logs}, nil
}
