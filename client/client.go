// Package client is a thin Go client of the relay over gRPC.
//
// It wraps the generated stubs of gen/go/relay/v1 with what every caller
// otherwise writes by hand: the API key sent as `x-api-key` metadata on
// every call, a default world (`clientId`) and tabletop user (`userId`)
// filled into every request that has those fields and leaves them empty,
// per-call overrides of all three through the context, event streams that
// reconnect by themselves and resume after the last event seen, and
// helpers that decode the JSON values held in the `raw_json` fields
// (documents, search results, event payloads; google.protobuf.Value
// trees) into map[string]any or a caller's own type.
//
// The generated service clients are exposed as fields (Documents, Dnd5e,
// Events, ...), so every RPC of the contract is available with the
// generated request and response types.
package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// APIKeyHeader is the metadata key that carries the API key.
const APIKeyHeader = "x-api-key"

// IdempotencyKeyHeader is the metadata key that carries a write's
// idempotency key (see CallWithIdempotencyKey).
const IdempotencyKeyHeader = "idempotency-key"

// Client is a connection to a relay with its default key, world and user.
// It is safe for concurrent use.
type Client struct {
	conn  *grpc.ClientConn
	owned bool
	cfg   config

	// Canvas reads and changes tokens and the canvas selection.
	Canvas relayv1.CanvasServiceClient
	// Clients lists the worlds the relay serves.
	Clients relayv1.ClientServiceClient
	// Combat manages encounters and their turn order.
	Combat relayv1.CombatServiceClient
	// Accounts manages the relay's accounts (the operator's key only).
	Accounts relayv1.AccountServiceClient
	// Worlds makes and removes embedded worlds.
	Worlds relayv1.WorldServiceClient
	// Audit lists the audit log: the key's account's records, or every
	// record with a key of the operator's account.
	Audit relayv1.AuditServiceClient
	// Dnd5e runs the fifth-edition rules operations (`/dnd5e/*`).
	Dnd5e relayv1.Dnd5EServiceClient
	// Documents reads and changes world documents.
	Documents relayv1.DocumentServiceClient
	// Events opens the raw event streams; FollowActors and its siblings
	// wrap them with reconnection.
	Events relayv1.EventServiceClient
	// Files transfers the world's files.
	Files relayv1.FileServiceClient
	// Folders manages folders.
	Folders relayv1.FolderServiceClient
	// Keys manages API keys.
	Keys relayv1.KeyServiceClient
	// Links pairs tabletops with the relay (linked worlds).
	Links relayv1.LinkServiceClient
	// Scripts runs execute-js scripts.
	Scripts relayv1.ScriptServiceClient
	// Tickets issues stream tickets for browsers.
	Tickets relayv1.TicketServiceClient
}

// config is what the options set.
type config struct {
	apiKey   string
	clientID string
	userID   string
	dial     []grpc.DialOption
	conn     *grpc.ClientConn
}

// Option configures a Client.
type Option func(*config)

// WithAPIKey sets the API key sent with every call.
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithWorld sets the default world (`clientId`) of every call whose request
// leaves it empty.
func WithWorld(clientID string) Option { return func(c *config) { c.clientID = clientID } }

// WithUser sets the default tabletop user (`userId`, an id or a name) every
// call acts as when its request leaves it empty.
func WithUser(userID string) Option { return func(c *config) { c.userID = userID } }

// WithDialOptions adds gRPC dial options, for example transport credentials
// for a relay behind TLS. Without any, the client speaks plain HTTP/2 (h2c),
// as the relay serves it.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dial = append(c.dial, opts...) }
}

// WithConn uses an existing connection instead of dialling one; New then
// ignores its target and dial options, and Close leaves the connection
// open. The key, world and user are still applied, by the client's own
// wrapper of the connection, so the connection may be shared with other
// code that sends other keys.
func WithConn(conn *grpc.ClientConn) Option { return func(c *config) { c.conn = conn } }

// New connects to the relay at target (host:port, or any gRPC target).
func New(target string, opts ...Option) (*Client, error) {
	c := &Client{}
	for _, o := range opts {
		o(&c.cfg)
	}
	conn := c.cfg.conn
	if conn == nil {
		dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		dial = append(dial, c.cfg.dial...)
		var err error
		conn, err = grpc.NewClient(target, dial...)
		if err != nil {
			return nil, err
		}
		c.owned = true
	}
	c.conn = conn
	cc := &interceptedConn{conn: conn, client: c}
	c.Accounts = relayv1.NewAccountServiceClient(cc)
	c.Worlds = relayv1.NewWorldServiceClient(cc)
	c.Audit = relayv1.NewAuditServiceClient(cc)
	c.Canvas = relayv1.NewCanvasServiceClient(cc)
	c.Clients = relayv1.NewClientServiceClient(cc)
	c.Combat = relayv1.NewCombatServiceClient(cc)
	c.Dnd5e = relayv1.NewDnd5EServiceClient(cc)
	c.Documents = relayv1.NewDocumentServiceClient(cc)
	c.Events = relayv1.NewEventServiceClient(cc)
	c.Files = relayv1.NewFileServiceClient(cc)
	c.Folders = relayv1.NewFolderServiceClient(cc)
	c.Keys = relayv1.NewKeyServiceClient(cc)
	c.Links = relayv1.NewLinkServiceClient(cc)
	c.Scripts = relayv1.NewScriptServiceClient(cc)
	c.Tickets = relayv1.NewTicketServiceClient(cc)
	return c, nil
}

// Conn returns the underlying connection, for generated clients of services
// this package does not list.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection when New dialled it.
func (c *Client) Close() error {
	if !c.owned {
		return nil
	}
	return c.conn.Close()
}

// callKey is the context key of per-call overrides.
type callKey struct{}

// overrides are the per-call replacements of the client's defaults; a nil
// field keeps the default.
type overrides struct {
	apiKey, clientID, userID *string
	// idempotencyKey is sent with the call; it has no client default.
	idempotencyKey *string
}

func withOverride(ctx context.Context, set func(*overrides)) context.Context {
	o, _ := ctx.Value(callKey{}).(overrides)
	set(&o)
	return context.WithValue(ctx, callKey{}, o)
}

// CallWithAPIKey returns a context whose calls use key instead of the
// client's API key.
func CallWithAPIKey(ctx context.Context, key string) context.Context {
	return withOverride(ctx, func(o *overrides) { o.apiKey = &key })
}

// CallWithWorld returns a context whose calls default to the world clientID
// instead of the client's world.
func CallWithWorld(ctx context.Context, clientID string) context.Context {
	return withOverride(ctx, func(o *overrides) { o.clientID = &clientID })
}

// CallWithUser returns a context whose calls act as userID instead of the
// client's user; an empty userID makes them act with GM-level access (as
// far as the key allows).
func CallWithUser(ctx context.Context, userID string) context.Context {
	return withOverride(ctx, func(o *overrides) { o.userID = &userID })
}

// CallWithIdempotencyKey returns a context whose write carries key as its
// idempotency key: sent again with the same key (after a time-out or a
// lost connection, for example), the write is not applied twice and the
// retry gets the first answer. Use a new key for each new write: the
// relay refuses a key used before for another request with AlreadyExists.
// Keys are 1 to 255 printable ASCII characters.
func CallWithIdempotencyKey(ctx context.Context, key string) context.Context {
	return withOverride(ctx, func(o *overrides) { o.idempotencyKey = &key })
}

// resolve returns the key, world and user of a call: the context's
// overrides, else the client's defaults.
func (c *Client) resolve(ctx context.Context) (key, clientID, userID string) {
	key, clientID, userID = c.cfg.apiKey, c.cfg.clientID, c.cfg.userID
	if o, ok := ctx.Value(callKey{}).(overrides); ok {
		if o.apiKey != nil {
			key = *o.apiKey
		}
		if o.clientID != nil {
			clientID = *o.clientID
		}
		if o.userID != nil {
			userID = *o.userID
		}
	}
	return key, clientID, userID
}

// withKey returns ctx with the call's API key, and its idempotency key if
// it has one, in its outgoing metadata.
func (c *Client) withKey(ctx context.Context) context.Context {
	if key, _, _ := c.resolve(ctx); key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, APIKeyHeader, key)
	}
	if o, ok := ctx.Value(callKey{}).(overrides); ok && o.idempotencyKey != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, IdempotencyKeyHeader, *o.idempotencyKey)
	}
	return ctx
}

// fill returns the request of a call with the world and user filled into
// its `client_id` and `user_id` fields, when it has them and leaves them
// empty (a value the caller set in the request wins). The request is
// cloned before it is changed, so the caller's message is never modified.
func (c *Client) fill(ctx context.Context, req any) any {
	_, clientID, userID := c.resolve(ctx)
	msg, ok := req.(proto.Message)
	if !ok || (clientID == "" && userID == "") {
		return req
	}
	var clone proto.Message
	set := func(name protoreflect.Name, value string) {
		if value == "" {
			return
		}
		fd := msg.ProtoReflect().Descriptor().Fields().ByName(name)
		if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
			return
		}
		if msg.ProtoReflect().Get(fd).String() != "" {
			return
		}
		if clone == nil {
			clone = proto.Clone(msg)
		}
		clone.ProtoReflect().Set(fd, protoreflect.ValueOfString(value))
	}
	set("client_id", clientID)
	set("user_id", userID)
	if clone == nil {
		return req
	}
	return clone
}

// interceptedConn applies the client's key, world and user to every call
// made through the generated clients.
type interceptedConn struct {
	conn   *grpc.ClientConn
	client *Client
}

// Invoke implements grpc.ClientConnInterface.
func (ic *interceptedConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return ic.conn.Invoke(ic.client.withKey(ctx), method, ic.client.fill(ctx, args), reply, opts...)
}

// NewStream implements grpc.ClientConnInterface. The request of a
// server-streaming call is the first message sent, so it is filled in
// SendMsg.
func (ic *interceptedConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := ic.conn.NewStream(ic.client.withKey(ctx), desc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &filledStream{ClientStream: s, client: ic.client, ctx: ctx}, nil
}

// filledStream fills the world and user into the messages a stream sends.
type filledStream struct {
	grpc.ClientStream
	client *Client
	ctx    context.Context
}

// SendMsg implements grpc.ClientStream.
func (s *filledStream) SendMsg(m any) error {
	return s.ClientStream.SendMsg(s.client.fill(s.ctx, m))
}
