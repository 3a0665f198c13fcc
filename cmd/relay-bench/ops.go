package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/wire"
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

// clientCodec is the gRPC callers' codec: grpc-go's protobuf codec for
// requests, and for answers what the REST callers do with theirs: read
// each whole (into a reused buffer) and check it, without decoding it into
// new objects, which the generator never looks at. Decoding a 33 KB
// document would allocate and copy it twice (grpc-go's codec also takes a
// 1 MiB buffer from its default pool for it and clears it), and the
// generator shares the machine's cores with the relay it measures.
type clientCodec struct {
	encoding.CodecV2
}

// answers holds the buffers answers are read into.
var answers = sync.Pool{New: func() any { return new([]byte) }}

func (c clientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(proto.Message); !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := answers.Get().(*[]byte)
	defer answers.Put(buf)
	b := (*buf)[:0]
	for _, piece := range data {
		b = append(b, piece.ReadOnlyData()...)
	}
	*buf = b
	// A well-formed message: a sequence of valid fields.
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("answer: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("answer: %w", protowire.ParseError(m))
		}
		b = b[n+m:]
	}
	return nil
}
