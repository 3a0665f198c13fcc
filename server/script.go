package server

import (
	"context"
	"time"

	relayv1 "relay/gen/go/relay/v1"
	"relay/world"
	"relay/world/script"
)

// ScriptRunner runs execute-js scripts. The relay's is a [script.Pool],
// which runs each script in a worker process of its own with a hard time
// limit and memory ceiling.
type ScriptRunner interface {
	Run(ctx context.Context, w script.World, user *world.User, src string, opts script.Options) (script.Result, error)
}

// scriptService implements relayv1.ScriptServiceServer over a
// ScriptRunner.
type scriptService struct {
	relayv1.UnimplementedScriptServiceServer
	timeout time.Duration
	runner  ScriptRunner
}

func (s scriptService) ExecuteJs(ctx context.Context, req *relayv1.ExecuteJsRequest) (*relayv1.ExecuteJsResponse, error) {
	call := CallFrom(ctx)
	if s.runner == nil {
		// Running a script in the server's own process would give up the
		// hard limits, so a server without a runner refuses scripts.
		return nil, world.Errorf(world.ErrUnavailable, "execute-js is not available on this relay")
	}
	res, err := s.runner.Run(ctx, call.World, call.User, req.GetScript(), script.Options{Timeout: s.timeout})
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
