package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"google.golang.org/grpc/metadata"

	"github.com/tabletop-relay/relay/wire"
)

// invalidParamsKey is the request context key of a deferred parameter
// error's text.
type invalidParamsKey struct{}

// Routing parameters: the ones the server needs to resolve a call's world
// and user before it looks at anything else.
var routingParams = []string{"clientId", "userId"}

// deferParamError prepares a call whose parameters could not be read: the
// call still goes to the server, with only its routing parameters, so that
// the key, scope, world and user checks answer first (401, 403, 404) in the
// same order as for any call, and the server then refuses it with msg
// (400). It returns the routing parameters as merged JSON fields and the
// context to call with.
func deferParamError(ctx context.Context, msg string, body []byte, query url.Values) (map[string]json.RawMessage, context.Context) {
	fields := routingFields(body, query)
	return fields, context.WithValue(ctx, invalidParamsKey{}, msg)
}

// routingFields reads the routing parameters leniently: from the body when
// it is a JSON object holding them as strings, else from the query.
func routingFields(body []byte, query url.Values) map[string]json.RawMessage {
	fields := map[string]json.RawMessage{}
	var object map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) > 0 {
		_ = json.Unmarshal(body, &object)
	}
	for _, name := range routingParams {
		var s string
		if raw, ok := object[name]; ok && json.Unmarshal(raw, &s) == nil {
			fields[name], _ = json.Marshal(s)
			continue
		}
		if v := query.Get(name); v != "" {
			fields[name], _ = json.Marshal(v)
		}
	}
	return fields
}

// invalidParamsMD is the mux's metadata annotator: it forwards a deferred
// parameter error set on the request's context.
func invalidParamsMD(ctx context.Context, _ *http.Request) metadata.MD {
	if msg, ok := ctx.Value(invalidParamsKey{}).(string); ok {
		return metadata.Pairs(wire.InvalidParamsHeader, msg)
	}
	return nil
}

// withInvalidParams adds a deferred parameter error on ctx, if any, to the
// outgoing metadata of a call the gateway makes itself.
func withInvalidParams(ctx context.Context) context.Context {
	if msg, ok := ctx.Value(invalidParamsKey{}).(string); ok {
		return metadata.AppendToOutgoingContext(ctx, wire.InvalidParamsHeader, msg)
	}
	return ctx
}
