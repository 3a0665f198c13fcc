package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "relay/gen/go/relay/v1"
	"relay/wire"
)

// The demo world's actors the operations use: Aria Vale is Alice's
// character, Brom Ironfist Bob's.
const (
	ariaUUID = "Actor.ariaVale00000001"
	bromUUID = "Actor.bromIronfist0001"
)

// opNames are the operations a mix may hold, in report order.
var opNames = []string{"get", "search", "update", "skill", "skillchat", "rest"}

// caller sends one request of an operation. seq numbers the caller's
// requests, for values that vary. An error means the request did not
// succeed (for a write: it was not acknowledged with 200).
type caller interface {
	call(ctx context.Context, op string, seq int) error
}

// restCaller sends REST requests over its own keep-alive HTTP/1.1
// connection.
type restCaller struct {
	client *http.Client
	base   string
	keys   benchKeys
	buf    bytes.Buffer
}

// newRESTCaller makes a caller with a transport of its own, so each
// concurrent client holds exactly one connection.
func newRESTCaller(base string, keys benchKeys) *restCaller {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}
	return &restCaller{client: &http.Client{Transport: tr}, base: base, keys: keys}
}

// call implements caller.
func (c *restCaller) call(ctx context.Context, op string, seq int) error {
	var method, path, key, body string
	switch op {
	case "get":
		method, path, key = http.MethodGet, "/get?uuid="+ariaUUID, c.keys.alice
	case "search":
		method, path, key = http.MethodGet, "/search?query=a", c.keys.all
	case "update":
		method, path, key = http.MethodPut, "/update?uuid="+bromUUID, c.keys.all
		body = `{"data":{"system.attributes.hp.value":` + strconv.Itoa(hitPoints(seq)) + `}}`
	case "skill", "skillchat":
		method, path, key = http.MethodPost, "/dnd5e/skill-check", c.keys.alice
		body = fmt.Sprintf(`{"actorUuid":%q,"skill":"arc","createChatMessage":%t}`, ariaUUID, op == "skillchat")
	case "rest":
		method, path, key = http.MethodPost, "/dnd5e/short-rest", c.keys.all
		body = fmt.Sprintf(`{"actorUuid":%q}`, bromUUID)
	default:
		return fmt.Errorf("unknown operation %q", op)
	}
	var reader io.Reader
	if body != "" {
		reader = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return err
	}
	req.Header.Set("x-api-key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	c.buf.Reset()
	if _, err := c.buf.ReadFrom(resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %.300s", method, path, resp.Status, c.buf.Bytes())
	}
	return nil
}

// close drops the caller's idle connection.
func (c *restCaller) close() { c.client.CloseIdleConnections() }

// hitPoints is the value the seq'th update writes: it changes with every
// update so each one is a real change.
func hitPoints(seq int) int { return 1 + seq%30 }

// grpcCaller sends the same operations through the generated gRPC clients.
type grpcCaller struct {
	docs relayv1.DocumentServiceClient
	dnd  relayv1.Dnd5EServiceClient
	keys benchKeys
	// all and alice carry each key as outgoing metadata, made once for the
	// context the calls come with.
	ctx        context.Context
	all, alice context.Context
}

// newGRPCCaller makes a caller on a shared connection.
func newGRPCCaller(conn *grpc.ClientConn, keys benchKeys) *grpcCaller {
	return &grpcCaller{
		docs: relayv1.NewDocumentServiceClient(conn),
		dnd:  relayv1.NewDnd5EServiceClient(conn),
		keys: keys,
	}
}

// call implements caller.
func (c *grpcCaller) call(ctx context.Context, op string, seq int) error {
	if ctx != c.ctx {
		c.ctx = ctx
		c.all = metadata.AppendToOutgoingContext(ctx, wire.APIKeyHeader, c.keys.all)
		c.alice = metadata.AppendToOutgoingContext(ctx, wire.APIKeyHeader, c.keys.alice)
	}
	all, alice := c.all, c.alice
	var err error
	switch op {
	case "get":
		_, err = c.docs.GetDocument(alice, &relayv1.GetDocumentRequest{Uuid: ariaUUID})
	case "search":
		_, err = c.docs.SearchDocuments(all, &relayv1.SearchDocumentsRequest{Query: "a"})
	case "update":
		data, _ := structpb.NewStruct(map[string]any{"system.attributes.hp.value": hitPoints(seq)})
		_, err = c.docs.UpdateDocument(all, &relayv1.UpdateDocumentRequest{Uuid: bromUUID, Data: data})
	case "skill", "skillchat":
		_, err = c.dnd.SkillCheck(alice, &relayv1.SkillCheckRequest{ActorUuid: ariaUUID, Skill: "arc", CreateChatMessage: proto.Bool(op == "skillchat")})
	case "rest":
		_, err = c.dnd.ShortRest(all, &relayv1.ShortRestRequest{ActorUuid: bromUUID})
	default:
		err = fmt.Errorf("unknown operation %q", op)
	}
	return err
}

// clientCodec is the gRPC callers' codec: grpc-go's protobuf codec, except
// that an answer that arrived in several pieces is put together in a
// buffer of its own size. grpc-go's codec takes one from its default pool,
// which hands a 33 KB answer a 1 MiB buffer and clears it: a quarter of
// the generator's CPU, which it would take from the relay on a shared
// machine.
type clientCodec struct {
	encoding.CodecV2
}

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	return proto.Unmarshal(data.Materialize(), m)
}
