package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/wire"
	"github.com/tabletop-relay/relay/world"
)

// Idempotent writes.
//
// A write (an RPC that acts on a world and whose REST route is not a GET)
// may carry an idempotency key: the `Idempotency-Key` header over REST, the
// `idempotency-key` metadata over gRPC. The first request with a key is
// applied and its answer kept; a later request with the same key, from the
// same account, on the same world, is not applied again but answered with
// the kept answer. The key is the caller's promise that the two requests
// are one: a request with a key already used for another request (another
// method, other parameters) is refused with AlreadyExists (409) and
// changes nothing, as is a request whose key is still being served.
//
// Keys are scoped by account and world: the keys of another account are,
// for a caller, keys never seen. The chain serves keyed writes on the node
// that holds the world (after forwarding), so that a world's keys live in
// one place:
//
//   - an embedded world keeps them in its database, the key with the
//     write's first transaction (world.WithIdempotency) and the answer just
//     after, and so in its replicated log in a cluster: a retry on any node,
//     after a failover, finds them;
//   - any other world (a linked tabletop) has them kept here, in memory,
//     within the same bounds.
//
// Only successful answers are kept: a refused write changed nothing, and a
// retry runs again. A write without a key costs nothing more than before.

// Defaults of [IdempotencyConfig].
const (
	DefaultIdempotencyTTL         = 24 * time.Hour
	DefaultIdempotencyKeys        = 10000
	DefaultIdempotencyAnswerBytes = 16 << 10
	// maxIdempotencyKeyLength is the longest key accepted.
	maxIdempotencyKeyLength = 255
)

// IdempotencyConfig bounds what the relay keeps of idempotent writes.
type IdempotencyConfig struct {
	// TTL is how long a key is kept after its first request;
	// DefaultIdempotencyTTL when 0.
	TTL time.Duration
	// MaxKeys is the most keys kept for one world, the oldest leaving
	// first; DefaultIdempotencyKeys when 0.
	MaxKeys int
	// AnswerBytes is the largest answer kept; a larger one is recorded as
	// applied but not kept, and a retry is told so (409).
	// DefaultIdempotencyAnswerBytes when 0.
	AnswerBytes int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// idempotency serves the keyed writes of a chain.
type idempotency struct {
	cfg    IdempotencyConfig
	limits world.IdempotencyLimits
	log    *slog.Logger
	// writes are the full names of the methods that take a key.
	writes map[string]bool

	mu sync.Mutex
	// inflight holds the keys being served (world, account, key).
	inflight map[string]struct{}
	// memory keeps the records of the worlds that keep none themselves,
	// by client id.
	memory map[string]*memoryLedger
}

func newIdempotency(cfg IdempotencyConfig, log *slog.Logger) (*idempotency, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultIdempotencyTTL
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultIdempotencyKeys
	}
	if cfg.AnswerBytes <= 0 {
		cfg.AnswerBytes = DefaultIdempotencyAnswerBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	services, err := ServiceDescriptors()
	if err != nil {
		return nil, err
	}
	writes := map[string]bool{}
	for _, sd := range services {
		methods := sd.Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			p := MethodPolicy(md)
			if p == nil || p.GetWorldless() || md.IsStreamingClient() || md.IsStreamingServer() {
				continue
			}
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			if rule != nil && rule.GetGet() == "" {
				writes[fmt.Sprintf("/%s/%s", sd.FullName(), md.Name())] = true
			}
		}
	}
	return &idempotency{
		cfg: cfg, limits: world.IdempotencyLimits{TTL: cfg.TTL, Max: cfg.MaxKeys}, log: log, writes: writes,
		inflight: map[string]struct{}{}, memory: map[string]*memoryLedger{},
	}, nil
}

// keyOf returns the idempotency key a write carries, if any. It allocates
// nothing for a call without one.
func (d *idempotency) keyOf(ctx context.Context, call *Call) ([]string, bool) {
	if d == nil || call.World == nil || !d.writes[call.Method] {
		return nil, false
	}
	v := metadata.ValueFromIncomingContext(ctx, wire.IdempotencyKeyHeader)
	return v, v != nil
}

// checkIdempotencyKey returns the one valid key among values: 1 to 255
// printable ASCII characters.
func checkIdempotencyKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", status.Error(codes.InvalidArgument, "Invalid Idempotency-Key: send one key per request")
	}
	key := values[0]
	if len(key) == 0 || len(key) > maxIdempotencyKeyLength {
		return "", status.Errorf(codes.InvalidArgument, "Invalid Idempotency-Key: it must be 1 to %d characters long, not %d", maxIdempotencyKeyLength, len(key))
	}
	for i := range len(key) {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return "", status.Errorf(codes.InvalidArgument, "Invalid Idempotency-Key: character %d is not printable ASCII", i+1)
		}
	}
	return key, nil
}

// ledger is where a world's idempotency records are kept.
func (d *idempotency) ledger(w world.World) world.IdempotencyLedger {
	if l, ok := w.(world.IdempotencyLedger); ok {
		return l
	}
	clientID := w.Info().ClientID
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.memory[clientID]
	if l == nil {
		l = &memoryLedger{recs: map[string]world.IdempotencyRecord{}}
		d.memory[clientID] = l
	}
	return l
}

// begin marks a key as being served; false when it already is.
func (d *idempotency) begin(flight string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, busy := d.inflight[flight]; busy {
		return false
	}
	d.inflight[flight] = struct{}{}
	return true
}

func (d *idempotency) end(flight string) {
	d.mu.Lock()
	delete(d.inflight, flight)
	d.mu.Unlock()
}

// keyed is one keyed write being served: its key, held against a second
// request with the same key until done, and what the world's ledger
// already holds for it.
type keyed struct {
	clientID, scope, key, flight string
	ledger                       world.IdempotencyLedger
	now                          time.Time
	rec                          world.IdempotencyRecord
	found                        bool
}

// claim holds key for the call's account and world, refusing it while
// another request with it is served, and looks it up in the world's
// ledger. The caller ends the claim with d.end(k.flight).
func (d *idempotency) claim(ctx context.Context, call *Call, key string) (*keyed, error) {
	k := &keyed{clientID: call.World.Info().ClientID, scope: call.Key.Account(), key: key}
	k.flight = k.clientID + "\x00" + k.scope + "\x00" + key
	if !d.begin(k.flight) {
		return nil, status.Errorf(codes.AlreadyExists, "Idempotency-Key %q: a request with this key is still in progress; send it again once that one is answered", key)
	}
	k.ledger = d.ledger(call.World)
	k.now = d.cfg.Now()
	var err error
	if k.rec, k.found, err = k.ledger.LookupIdempotent(ctx, k.scope, key, k.now, d.limits); err != nil {
		d.end(k.flight)
		return nil, err
	}
	return k, nil
}

// keep records the answer of an applied keyed write, in kept, when it is
// small enough, else only that the write was applied. The answer is kept
// even if the caller left.
func (d *idempotency) keep(ctx context.Context, call *Call, k *keyed, kept world.IdempotencyRecord, resp proto.Message) {
	if out, err := proto.Marshal(resp); err == nil && len(out) <= d.cfg.AnswerBytes {
		kept.State, kept.Answer = world.IdempotencyAnswered, out
	} else {
		kept.State = world.IdempotencyUnkept
	}
	if err := k.ledger.RecordIdempotent(context.WithoutCancel(ctx), k.scope, k.key, kept, d.limits); err != nil {
		d.log.WarnContext(ctx, "could not keep the answer of an idempotent write", "world", k.clientID, "method", call.Method, "error", err)
	}
}

// serve answers a keyed write: with the answer kept for its key, or by
// running handler and keeping its answer.
func (d *idempotency) serve(ctx context.Context, call *Call, req any, values []string, handler grpc.UnaryHandler) (any, error) {
	key, err := checkIdempotencyKey(values)
	if err != nil {
		return nil, err
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "%s: request %T is not a protobuf message", call.Method, req)
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", call.Method, err)
	}
	h := sha256.New()
	h.Write([]byte(call.Method))
	h.Write([]byte{0})
	h.Write(body)
	hash := hex.EncodeToString(h.Sum(nil))

	k, err := d.claim(ctx, call, key)
	if err != nil {
		return nil, err
	}
	defer d.end(k.flight)
	if k.found {
		return d.replay(call, key, hash, k.rec, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) })
	}
	mark := &world.IdempotencyMark{Scope: k.scope, Key: key, Limits: d.limits,
		Record: world.IdempotencyRecord{At: k.now, Hash: hash, State: world.IdempotencyApplied, RequestID: call.RequestID}}
	resp, err := handler(world.WithIdempotency(ctx, mark), req)
	if err != nil {
		// A refused write changed nothing and is not kept; one whose first
		// transaction committed before it failed stays recorded as
		// applied (the mark).
		return resp, err
	}
	d.keep(ctx, call, k, mark.Record, resp.(proto.Message))
	return resp, nil
}

// replay answers a request whose key was used before.
func (d *idempotency) replay(call *Call, key, hash string, rec world.IdempotencyRecord, setHeader func(metadata.MD) error) (any, error) {
	if rec.Hash != hash {
		return nil, status.Errorf(codes.AlreadyExists, "Idempotency-Key %q was used for a different request (another route or other parameters); nothing was changed: use a new key for a new request", key)
	}
	switch rec.State {
	case world.IdempotencyAnswered:
	case world.IdempotencyUnkept:
		return nil, status.Errorf(codes.AlreadyExists, "Idempotency-Key %q: the request was applied, but its answer was too large to keep (over %d bytes); it was not applied again", key, d.cfg.AnswerBytes)
	default:
		return nil, status.Errorf(codes.AlreadyExists, "Idempotency-Key %q: the request was applied, but its answer was not kept (its node stopped before it could); it was not applied again", key)
	}
	_, out, err := methodTypes(call.Method)
	if err != nil {
		return nil, err
	}
	resp := out.New().Interface()
	if err := proto.Unmarshal(rec.Answer, resp); err != nil {
		return nil, status.Errorf(codes.Internal, "Idempotency-Key %q: the kept answer cannot be read: %v", key, err)
	}
	// The caller learns that this is the first request's answer, and which
	// request that was (REST answers carry its id in their envelope).
	_ = setHeader(metadata.MD{wire.IdempotentReplayHeader: {rec.RequestID}})
	return resp, nil
}

// memoryLedger keeps the idempotency records of one world in memory, within
// the same bounds as an embedded world keeps them.
type memoryLedger struct {
	mu    sync.Mutex
	recs  map[string]world.IdempotencyRecord
	order []string // keys, oldest first
}

func memoryKey(scope, key string) string { return scope + "\x00" + key }

// LookupIdempotent implements [world.IdempotencyLedger].
func (l *memoryLedger) LookupIdempotent(_ context.Context, scope, key string, now time.Time, limits world.IdempotencyLimits) (world.IdempotencyRecord, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, ok := l.recs[memoryKey(scope, key)]
	if !ok || limits.TTL > 0 && now.Sub(rec.At) > limits.TTL {
		return world.IdempotencyRecord{}, false, nil
	}
	return rec, true, nil
}

// RecordIdempotent implements [world.IdempotencyLedger].
func (l *memoryLedger) RecordIdempotent(_ context.Context, scope, key string, rec world.IdempotencyRecord, limits world.IdempotencyLimits) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := memoryKey(scope, key)
	if _, known := l.recs[k]; !known {
		l.order = append(l.order, k)
	}
	l.recs[k] = rec
	for len(l.order) > 0 {
		old, ok := l.recs[l.order[0]]
		if ok && !(limits.TTL > 0 && rec.At.Sub(old.At) > limits.TTL) && (limits.Max <= 0 || len(l.recs) <= limits.Max) {
			break
		}
		delete(l.recs, l.order[0])
		l.order = l.order[1:]
	}
	if cap(l.order) > 64 && len(l.order) < cap(l.order)/2 {
		l.order = append([]string(nil), l.order...)
	}
	return nil
}

// uploadKey returns the idempotency key an upload carries, if any. Uploads
// are client streams, served by the file service itself (serveUpload).
func (d *idempotency) uploadKey(ctx context.Context, call *Call) ([]string, bool) {
	if d == nil || call.World == nil {
		return nil, false
	}
	v := metadata.ValueFromIncomingContext(ctx, wire.IdempotencyKeyHeader)
	return v, v != nil
}

// serveUpload answers a keyed upload whose first message is first: with
// the answer kept for its key, once the whole request is read and found
// the same, or by running upload, which reads the file's bytes through
// the reader it is given, and keeping its answer. The request's hash
// covers the first message's parameters and the file's bytes, however
// they were cut into chunks.
func (d *idempotency) serveUpload(ctx context.Context, call *Call, values []string, first *relayv1.UploadFileRequest, rest io.Reader,
	setHeader func(metadata.MD) error, upload func(body io.Reader) (*relayv1.UploadFileResponse, error)) (*relayv1.UploadFileResponse, error) {
	key, err := checkIdempotencyKey(values)
	if err != nil {
		return nil, err
	}
	params := proto.Clone(first).(*relayv1.UploadFileRequest)
	params.Chunk = nil
	head, err := proto.MarshalOptions{Deterministic: true}.Marshal(params)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", call.Method, err)
	}
	h := sha256.New()
	h.Write([]byte(call.Method))
	h.Write([]byte{0})
	h.Write(head)
	h.Write([]byte{0})
	h.Write(first.GetChunk())
	sum := func() string { return hex.EncodeToString(h.Sum(nil)) }

	k, err := d.claim(ctx, call, key)
	if err != nil {
		return nil, err
	}
	defer d.end(k.flight)
	if k.found {
		// The request is known only once it is read whole.
		if _, err := io.Copy(h, rest); err != nil {
			return nil, err
		}
		resp, err := d.replay(call, key, sum(), k.rec, setHeader)
		if err != nil {
			return nil, err
		}
		return resp.(*relayv1.UploadFileResponse), nil
	}
	resp, err := upload(io.MultiReader(bytes.NewReader(first.GetChunk()), io.TeeReader(rest, h)))
	if err != nil {
		return nil, err
	}
	d.keep(ctx, call, k, world.IdempotencyRecord{At: k.now, Hash: sum(), RequestID: call.RequestID}, resp)
	return resp, nil
}
