package server

import (
	"context"
	"time"

	relayv1 "relay/gen/go/relay/v1"
	"relay/world/script"
)

// scriptService implements relayv1.ScriptServiceServer with the embedded
// JavaScript engine.
type scriptService struct {
	relayv1.UnimplementedScriptServiceServer
	timeout time.Duration
}

func (s scriptService) ExecuteJs(ctx context.Context, req *relayv1.ExecuteJsRequest) (*relayv1.ExecuteJsResponse, error) {
	call := CallFrom(ctx)
	res, err := script.Run(ctx, call.World, call.User, req.GetScript(), script.Options{Timeout: s.timeout})
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
