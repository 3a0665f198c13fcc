package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/world"
)

// Forwarding over NATS request/reply.
//
// Each node answers on the subject relay.node.<name>.call the calls other
// nodes forward to it for the worlds it hosts. A request carries the
// request message as its data and the rest of server.ForwardedCall in
// headers; the reply carries the response message as its data, or the
// status, and the handler's metadata in headers. The host's node must
// hold the world when the call arrives: its chain resolves the world again
// and never forwards a forwarded call. File downloads and uploads travel
// as streams of messages with acknowledgements (see the sections on
// forwarded server and client streams below).
//
// Whoever may publish on these subjects may act as any caller: the
// embedded NATS server's client port is locked with a token only the
// process knows, its routes with --cluster-secret, and with --nats the
// relays must have a NATS account of their own. With a cluster secret,
// every call is also signed, and a node answers only calls signed by a
// node that knows the secret, once each (sign.go); what comes back (the
// answers, and every message of a download or an upload either way) is
// signed for its subject and its place, and a node takes only the
// messages its peer signed, waiting on for them past any forgery
// (answers.go).

// Headers of forwarded calls and their replies.
const (
	hdrMethod    = "Relay-Method"
	hdrRequestID = "Relay-Request-Id"
	hdrClientID  = "Relay-Client-Id"
	hdrKey       = "Relay-Key"
	hdrMetadata  = "Relay-Metadata"
	hdrDeadline  = "Relay-Deadline"
	hdrStatus    = "Relay-Status"
	hdrHeader    = "Relay-Header"
	hdrTrailer   = "Relay-Trailer"
	// hdrNotTaken marks the answer of a host that did not carry the call
	// out because it is stopping or handing the call's world over: the
	// edge may send the call to the world's next host.
	hdrNotTaken = "Relay-Not-Taken"
)

// callSubject is the subject on which a node answers forwarded calls.
func callSubject(node string) string { return "relay.node." + node + ".call" }

// serveSubject answers the messages of subject, each in a goroutine of
// its own (the subscription hands messages over one at a time), until
// StopAnswering or the node closes.
func (r *Registry) serveSubject(subject string, answer func(*nats.Msg)) error {
	sub, err := r.node.nc.Subscribe(subject, func(m *nats.Msg) {
		r.inflight.begin()
		go func() {
			defer r.inflight.end()
			answer(m)
		}()
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.answerSubs = append(r.answerSubs, sub)
	r.mu.Unlock()
	r.node.OnClose(func() { _ = sub.Unsubscribe() })
	return nil
}

// StopAnswering stops taking calls, streams and questions from the other
// nodes, and waits until those under way have answered, or until ctx
// ends. A node that stops calls it once its leases are released and its
// own callers are served, before it closes what the answers need: an
// answer sent after the NATS connection closed would be lost, and the
// caller would wait out its forward time-out. Calls sent afterwards find
// no one listening, which the edge answers with a 503 at once.
//
// Forwarded unary calls are an exception: their subscription stays until
// the node leaves NATS, and answers each call at once with a 503 marked as
// not carried out, which the edge of a replicated world sends on to the
// world's next host. An unsubscription takes a moment to reach the other
// NATS servers, and a call routed here meanwhile would find no one and
// leave its edge unsure whether it was carried out.
func (r *Registry) StopAnswering(ctx context.Context) {
	r.declining.Store(true)
	r.mu.Lock()
	subs := r.answerSubs
	r.answerSubs = nil
	r.mu.Unlock()
	for _, sub := range subs {
		if sub.Subject != callSubject(r.node.Name()) {
			_ = sub.Unsubscribe()
		}
	}
	r.inflight.wait(ctx)
}

// inflight counts the answers under way, for StopAnswering.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n reaches 0 while someone waits
}

func (f *inflight) begin() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *inflight) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// wait returns once no answer is under way, or when ctx ends.
func (f *inflight) wait(ctx context.Context) {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// forwardedCall reads the call a forwarding message carries: the method,
// request id, world, request and metadata, and the key the edge resolved.
func forwardedCall(m *nats.Msg) (*server.ForwardedCall, error) {
	fc := &server.ForwardedCall{
		Method:    m.Header.Get(hdrMethod),
		RequestID: m.Header.Get(hdrRequestID),
		ClientID:  m.Header.Get(hdrClientID),
		Request:   m.Data,
	}
	if err := json.Unmarshal([]byte(m.Header.Get(hdrKey)), &fc.Key); err != nil {
		return nil, err
	}
	if md := m.Header.Get(hdrMetadata); md != "" {
		_ = json.Unmarshal([]byte(md), &fc.Metadata)
	}
	return fc, nil
}

// answer serves one forwarded call and replies.
func (r *Registry) answer(m *nats.Msg) {
	reply := nats.NewMsg(m.Reply)
	if !r.signed(m) {
		r.reply(m, reply, failed(errUnsignedCall))
		return
	}
	fc, err := forwardedCall(m)
	if err != nil {
		r.reply(m, reply, failed(status.Error(codes.Internal, "Internal error: a forwarded call came without its key")))
		return
	}
	if r.declines(fc.ClientID) {
		reply.Header.Set(hdrNotTaken, "1")
		r.reply(m, reply, failed(status.Errorf(codes.Unavailable, "World %s is unavailable: its host node %s is stopping; the call was not carried out: try again in a moment", fc.ClientID, r.node.Name())))
		return
	}
	ctx := context.Background()
	if d, err := strconv.ParseInt(m.Header.Get(hdrDeadline), 10, 64); err == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, d))
		defer cancel()
	}
	r.reply(m, reply, r.opts.Serve(ctx, fc))
}

// declines reports whether this node passes a forwarded call for world
// clientID back to its edge instead of serving it: the node stopped taking
// calls (StopAnswering), or it is handing the world over to another node.
func (r *Registry) declines(clientID string) bool {
	if r.declining.Load() {
		return true
	}
	if !r.handingOff.Load() {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	l := r.owned[clientID]
	return l == nil || l.kind == world.KindEmbedded
}

// errUnsignedCall answers a call that no node of the cluster signed.
var errUnsignedCall = status.Error(codes.Unauthenticated, "The call was refused: only the nodes of the cluster, which know its secret, may forward calls")

// signed reports whether a message another node sent carries a valid
// signature (or whether the cluster signs nothing), and logs a refusal.
func (r *Registry) signed(m *nats.Msg) bool {
	err := r.node.signer.verify(m)
	if err != nil {
		r.node.signer.refused[refusedCall].Add(1)
		r.log.Warn("refused a message on the nodes' subjects without a valid cluster signature", "subject", m.Subject, "reason", err)
	}
	return err == nil
}

// failed is the reply of a call that failed before it was served.
func failed(err error) *server.ForwardedReply {
	st, _ := status.FromError(err)
	b, _ := protoMarshalStatus(st)
	return &server.ForwardedReply{Status: b}
}

// reply sends a forwarded call's answer.
func (r *Registry) reply(m, out *nats.Msg, rep *server.ForwardedReply) {
	if rep.Status != nil {
		out.Header.Set(hdrStatus, base64.StdEncoding.EncodeToString(rep.Status))
	} else {
		out.Data = rep.Response
	}
	if len(rep.Header) > 0 {
		b, _ := json.Marshal(rep.Header)
		out.Header.Set(hdrHeader, string(b))
	}
	if len(rep.Trailer) > 0 {
		b, _ := json.Marshal(rep.Trailer)
		out.Header.Set(hdrTrailer, string(b))
	}
	r.node.signer.signAnswer(out, 0)
	if err := m.RespondMsg(out); err != nil {
		r.log.Warn("could not answer a forwarded call", "method", m.Header.Get(hdrMethod), "clientId", m.Header.Get(hdrClientID), "error", err)
		// A reply over the size limit: answer with the error instead, so
		// that the edge does not wait for its time-out.
		if errors.Is(err, nats.ErrMaxPayload) {
			fail := nats.NewMsg(m.Reply)
			b, _ := protoMarshalStatus(status.New(codes.ResourceExhausted, "The answer is too large to be forwarded between nodes"))
			fail.Header.Set(hdrStatus, base64.StdEncoding.EncodeToString(b))
			r.node.signer.signAnswer(fail, 0)
			_ = m.RespondMsg(fail)
		}
	}
}

// remoteWorld is a world another node hosts: its calls are forwarded
// there.
type remoteWorld struct {
	reg   *Registry
	id    string
	entry Entry
}

var _ server.RemoteWorld = (*remoteWorld)(nil)

// Info describes the world from its registry entry.
func (w *remoteWorld) Info() world.Info {
	return world.Info{ClientID: w.id, Kind: w.entry.Kind, Title: w.entry.Title, Name: w.entry.Title, Online: true}
}

// errNotForwarded answers what only unary calls, forwarded whole, can do
// on a remote world, when the node has no event bus to serve the world's
// event streams itself (see events.go).
func (w *remoteWorld) errNotForwarded() error {
	return world.Errorf(world.ErrUnavailable, "World %s is hosted by node %s: connect to that node for this stream", w.id, w.entry.Node)
}

// Can grants nothing on a remote world: the host decides.
func (w *remoteWorld) Can(*world.User, string) bool { return false }

// Host is the name of the node hosting the world.
func (w *remoteWorld) Host() string { return w.entry.Node }

// Forward implements server.RemoteWorld: the call goes to the host over
// NATS; the answer comes back within the caller's deadline and the
// cluster's forward time-out. A host that is gone or silent is
// Unavailable naming the world, never a wait beyond that.
func (w *remoteWorld) Forward(ctx context.Context, fc *server.ForwardedCall) (*server.ForwardedReply, error) {
	timeout := w.reg.node.cfg.ForwardTimeout
	// The call ends early when its host is taken for dead (hostwatch.go).
	wctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	fctx, cancel := context.WithTimeout(wctx, timeout)
	defer cancel()
	msg, err := callMessage(callSubject(w.entry.Node), fc)
	if err != nil {
		return nil, err
	}
	if d, ok := fctx.Deadline(); ok {
		msg.Header.Set(hdrDeadline, strconv.FormatInt(d.UnixNano(), 10))
	}
	stopWatching := w.watchHost(fctx, lost)
	res, err := w.reg.node.request(fctx, msg)
	stopWatching()
	if err == nil && res.Header.Get(hdrNotTaken) != "" && w.reg.opts.Replication != nil && w.entry.Kind == world.KindEmbedded {
		// The host is stopping and did not carry the call out: the
		// world's next host may, read or write.
		return w.afterHostLoss(ctx, fc, false)
	}
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(wctx), errHostGone) {
			return w.afterHostLoss(ctx, fc, true)
		}
		if ctx.Err() == nil && errors.Is(err, nats.ErrNoResponders) && w.reg.opts.Replication != nil && w.entry.Kind == world.KindEmbedded {
			// No one took the call: it may go to the world's next host,
			// read or write.
			return w.afterHostLoss(ctx, fc, false)
		}
		return nil, w.forwardError(ctx, err, timeout)
	}
	rep := &server.ForwardedReply{Response: res.Data}
	if s := res.Header.Get(hdrStatus); s != "" {
		if rep.Status, err = base64.StdEncoding.DecodeString(s); err != nil {
			return nil, status.Errorf(codes.Internal, "forward: bad status from node %s", w.entry.Node)
		}
		rep.Response = nil
	}
	if h := res.Header.Get(hdrHeader); h != "" {
		_ = json.Unmarshal([]byte(h), &rep.Header)
	}
	if t := res.Header.Get(hdrTrailer); t != "" {
		_ = json.Unmarshal([]byte(t), &rep.Trailer)
	}
	return rep, nil
}

// callMessage is the message that forwards fc on subject: the request,
// with the method, request id, world and the key the edge resolved in its
// headers (read back by forwardedCall).
func callMessage(subject string, fc *server.ForwardedCall) (*nats.Msg, error) {
	msg := nats.NewMsg(subject)
	msg.Data = fc.Request
	msg.Header.Set(hdrMethod, fc.Method)
	msg.Header.Set(hdrRequestID, fc.RequestID)
	msg.Header.Set(hdrClientID, fc.ClientID)
	key, err := json.Marshal(fc.Key)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "forward: %v", err)
	}
	msg.Header.Set(hdrKey, string(key))
	// The metadata the host's chain reads (an idempotency key, a deferred
	// parameter error), for unary calls and transfers alike.
	if len(fc.Metadata) > 0 {
		b, _ := json.Marshal(fc.Metadata)
		msg.Header.Set(hdrMetadata, string(b))
	}
	return msg, nil
}

// openTransfer opens a forwarded download or upload: it sends fc on
// subject with an inbox of its own for the messages that follow, holding
// up to pending of them, and waits for the host to take it. It returns the
// inbox (the caller unsubscribes it) and the host's acceptance, or, when
// the host refused the call, its answer.
func (w *remoteWorld) openTransfer(ctx context.Context, subject string, fc *server.ForwardedCall, pending int) (*nats.Subscription, *nats.Msg, *server.ForwardedReply, error) {
	nc := w.reg.node.nc
	timeout := w.reg.node.cfg.ForwardTimeout
	inbox, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return nil, nil, nil, status.Errorf(codes.Unavailable, "World %s is unavailable: %v", w.id, err)
	}
	fail := func(err error) (*nats.Subscription, *nats.Msg, *server.ForwardedReply, error) {
		_ = inbox.Unsubscribe()
		return nil, nil, nil, err
	}
	if pending > 0 {
		_ = inbox.SetPendingLimits(pending, pending*maxPayload)
	}
	msg, err := callMessage(subject, fc)
	if err != nil {
		return fail(err)
	}
	msg.Header.Set(hdrInbox, inbox.Subject)
	actx, cancel := context.WithTimeout(ctx, timeout)
	accept, err := w.reg.node.request(actx, msg)
	cancel()
	if err != nil {
		return fail(w.forwardError(ctx, err, timeout))
	}
	if s := accept.Header.Get(hdrStatus); s != "" {
		_ = inbox.Unsubscribe()
		b, _ := base64.StdEncoding.DecodeString(s)
		return nil, nil, &server.ForwardedReply{Status: b}, nil
	}
	return inbox, accept, nil, nil
}

// protoMarshalStatus encodes a status as a google.rpc.Status.
func protoMarshalStatus(st *status.Status) ([]byte, error) { return proto.Marshal(st.Proto()) }

// Forwarded server streams (file downloads).
//
// The edge subscribes to an inbox of its own, then asks the host on
// relay.node.<name>.stream, naming that inbox; the host accepts with the
// subject where it takes acknowledgements, then publishes the stream's
// messages to the inbox in order, and a last message with the status. The
// host keeps at most streamWindow messages unacknowledged, so that a slow
// caller slows the host rather than overflow the edge's subscription; the
// edge acknowledges every streamAckEvery messages, or cancels.
const (
	hdrInbox       = "Relay-Inbox"
	hdrAck         = "Relay-Ack"
	hdrEnd         = "Relay-End"
	streamWindow   = 32
	streamAckEvery = 8
	cancelAck      = "cancel"
)

// streamSubject is the subject on which a node answers forwarded streams.
func streamSubject(node string) string { return "relay.node." + node + ".stream" }

// answerStream serves one forwarded stream.
func (r *Registry) answerStream(m *nats.Msg) {
	nc := r.node.nc
	if !r.signed(m) {
		r.reply(m, nats.NewMsg(m.Reply), failed(errUnsignedCall))
		return
	}
	inbox := m.Header.Get(hdrInbox)
	fc, err := forwardedCall(m)
	if err != nil || inbox == "" {
		r.reply(m, nats.NewMsg(m.Reply), failed(status.Error(codes.Internal, "Internal error: a forwarded stream came without its key or inbox")))
		return
	}
	acks, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		r.reply(m, nats.NewMsg(m.Reply), failed(status.Error(codes.Unavailable, "The host node cannot take the stream")))
		return
	}
	defer func() { _ = acks.Unsubscribe() }()
	accept := nats.NewMsg(m.Reply)
	accept.Header.Set(hdrAck, acks.Subject)
	r.node.signer.signAnswer(accept, 0)
	if err := m.RespondMsg(accept); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent, acked := 0, 0
	// The places of the messages sent to the edge, and of the last
	// acknowledgement taken from it (see signAnswer).
	var out, in uint64
	send := func(b []byte) error {
		for sent-acked >= streamWindow {
			am, err := r.node.nextOf(ctx, acks, &in, true)
			if err != nil {
				return err
			}
			if string(am.Data) == cancelAck {
				return context.Canceled
			}
			if n, err := strconv.Atoi(string(am.Data)); err == nil && n > acked {
				acked = n
			}
		}
		msg := nats.NewMsg(inbox)
		msg.Data = b
		out++
		r.node.signer.signAnswer(msg, out)
		if err := nc.PublishMsg(msg); err != nil {
			return err
		}
		sent++
		return nil
	}
	rep := r.opts.ServeStream(ctx, fc, send)
	end := nats.NewMsg(inbox)
	end.Header.Set(hdrEnd, "1")
	if rep.Status != nil {
		end.Header.Set(hdrStatus, base64.StdEncoding.EncodeToString(rep.Status))
	}
	out++
	r.node.signer.signAnswer(end, out)
	_ = nc.PublishMsg(end)
}

// nextOf returns the next message of a transfer that sub receives, the
// one after place *last (see verifyNext), within the forward time-out. It
// drops the messages that fail their signature, or came before, without
// waiting longer for them; it fails when a message of the transfer was
// lost.
func (n *Node) nextOf(ctx context.Context, sub *nats.Subscription, last *uint64, gaps bool) (*nats.Msg, error) {
	wait, cancel := context.WithTimeout(ctx, n.cfg.ForwardTimeout)
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(wait)
		if err != nil {
			return nil, err
		}
		if ok, err := n.takes(m, last, gaps); ok || err != nil {
			return m, err
		}
	}
}

// takes reports whether m is the next message of a transfer, after place
// *last (see verifyNext), and drops it otherwise; it fails when a message
// of the transfer was lost.
func (n *Node) takes(m *nats.Msg, last *uint64, gaps bool) (bool, error) {
	err := n.signer.verifyNext(m, last, gaps)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errOutOfOrder):
		return false, err
	}
	n.log.Warn("dropped a message of a transfer between nodes without a valid cluster signature", "subject", m.Subject, "reason", err)
	return false, nil
}

var _ server.StreamForwarder = (*remoteWorld)(nil)

// ForwardStream implements server.StreamForwarder: the host's messages go
// to send as they arrive. A host that does not take the stream, or falls
// silent for the forward time-out, is Unavailable naming the world.
func (w *remoteWorld) ForwardStream(ctx context.Context, fc *server.ForwardedCall, send func([]byte) error) (*server.ForwardedReply, error) {
	nc := w.reg.node.nc
	timeout := w.reg.node.cfg.ForwardTimeout
	inbox, accept, refused, err := w.openTransfer(ctx, streamSubject(w.entry.Node), fc, 4*streamWindow)
	if err != nil || refused != nil {
		return refused, err
	}
	defer func() { _ = inbox.Unsubscribe() }()
	ackTo := accept.Header.Get(hdrAck)
	// The places of the last message taken from the host, and of the
	// last acknowledgement sent to it (see signAnswer).
	var in, out uint64
	ack := func(data string) {
		m := nats.NewMsg(ackTo)
		m.Data = []byte(data)
		out++
		w.reg.node.signer.signAnswer(m, out)
		_ = nc.PublishMsg(m)
	}
	received := 0
	for {
		m, err := w.reg.node.nextOf(ctx, inbox, &in, false)
		if err != nil {
			ack(cancelAck)
			return nil, w.forwardError(ctx, err, timeout)
		}
		if m.Header.Get(hdrEnd) != "" {
			rep := &server.ForwardedReply{}
			if s := m.Header.Get(hdrStatus); s != "" {
				rep.Status, _ = base64.StdEncoding.DecodeString(s)
			}
			return rep, nil
		}
		if err := send(m.Data); err != nil {
			ack(cancelAck)
			return nil, err
		}
		received++
		if received%streamAckEvery == 0 {
			ack(strconv.Itoa(received))
		}
	}
}

// forwardError turns a failed exchange with the host into the caller's
// status: the caller's own deadline or cancellation as they are, anything
// else Unavailable naming the world and its host.
func (w *remoteWorld) forwardError(ctx context.Context, err error, timeout time.Duration) error {
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, nats.ErrNoResponders):
		return status.Errorf(codes.Unavailable, "World %s is unavailable: its host node %s does not answer", w.id, w.entry.Node)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return status.Errorf(codes.Unavailable, "World %s is unavailable: its host node %s did not answer within %v", w.id, w.entry.Node, timeout)
	case errors.Is(err, errOutOfOrder):
		return status.Errorf(codes.Unavailable, "World %s is unavailable: a message between this node and its host node %s was lost", w.id, w.entry.Node)
	case errors.Is(err, nats.ErrMaxPayload):
		return status.Errorf(codes.ResourceExhausted, "The request is too large to be forwarded to the node hosting world %s", w.id)
	default:
		return status.Errorf(codes.Unavailable, "World %s is unavailable: its host node %s cannot be reached", w.id, w.entry.Node)
	}
}

// Forwarded client streams (file uploads).
//
// The edge asks the host on relay.node.<name>.upload with the first
// message, naming its inbox; the host accepts with the subject where it
// takes the other messages, feeds them to the handler, acknowledges every
// streamAckEvery of them on the edge's inbox, and ends with a message
// holding the response or the status. The edge keeps at most
// streamWindow messages unacknowledged; a caller that goes away cancels
// the host's stream; a host that answers early (a refusal) ends the
// upload at once.
const (
	hdrUp        = "Relay-Up"
	hdrCancelled = "Relay-Cancelled"
)

// uploadSubject is the subject on which a node answers forwarded uploads.
func uploadSubject(node string) string { return "relay.node." + node + ".upload" }

// answerUpload serves one forwarded upload.
func (r *Registry) answerUpload(m *nats.Msg) {
	nc := r.node.nc
	if !r.signed(m) {
		r.reply(m, nats.NewMsg(m.Reply), failed(errUnsignedCall))
		return
	}
	inbox := m.Header.Get(hdrInbox)
	fc, err := forwardedCall(m)
	if err != nil || inbox == "" {
		r.reply(m, nats.NewMsg(m.Reply), failed(status.Error(codes.Internal, "Internal error: a forwarded upload came without its key or inbox")))
		return
	}
	up, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		r.reply(m, nats.NewMsg(m.Reply), failed(status.Error(codes.Unavailable, "The host node cannot take the upload")))
		return
	}
	defer func() { _ = up.Unsubscribe() }()
	_ = up.SetPendingLimits(4*streamWindow, int(4*streamWindow*maxPayload))
	accept := nats.NewMsg(m.Reply)
	accept.Header.Set(hdrUp, up.Subject)
	r.node.signer.signAnswer(accept, 0)
	if err := m.RespondMsg(accept); err != nil {
		return
	}
	// The places of the last message taken from the edge, and of the
	// last one sent to it (see signAnswer).
	var in, out uint64
	received := 0
	next := func() ([]byte, error) {
		um, err := r.node.nextOf(context.Background(), up, &in, false)
		switch {
		case err != nil:
			return nil, err
		case um.Header.Get(hdrCancelled) != "":
			return nil, context.Canceled
		case um.Header.Get(hdrEnd) != "":
			return nil, io.EOF
		}
		received++
		if received%streamAckEvery == 0 {
			ack := nats.NewMsg(inbox)
			ack.Data = []byte(strconv.Itoa(received))
			out++
			r.node.signer.signAnswer(ack, out)
			_ = nc.PublishMsg(ack)
		}
		return um.Data, nil
	}
	rep := r.opts.ServeUpload(context.Background(), fc, next)
	end := nats.NewMsg(inbox)
	end.Header.Set(hdrEnd, "1")
	if rep.Status != nil {
		end.Header.Set(hdrStatus, base64.StdEncoding.EncodeToString(rep.Status))
	} else {
		end.Data = rep.Response
	}
	setReplyMetadata(end, rep)
	out++
	r.node.signer.signAnswer(end, out)
	_ = nc.PublishMsg(end)
}

// setReplyMetadata puts the header and trailer of a forwarded call's
// answer on the message that carries it.
func setReplyMetadata(out *nats.Msg, rep *server.ForwardedReply) {
	if len(rep.Header) > 0 {
		b, _ := json.Marshal(rep.Header)
		out.Header.Set(hdrHeader, string(b))
	}
	if len(rep.Trailer) > 0 {
		b, _ := json.Marshal(rep.Trailer)
		out.Header.Set(hdrTrailer, string(b))
	}
}

// replyMetadata reads the header and trailer setReplyMetadata put on a
// message into rep.
func replyMetadata(m *nats.Msg, rep *server.ForwardedReply) {
	if h := m.Header.Get(hdrHeader); h != "" {
		_ = json.Unmarshal([]byte(h), &rep.Header)
	}
	if t := m.Header.Get(hdrTrailer); t != "" {
		_ = json.Unmarshal([]byte(t), &rep.Trailer)
	}
}

var _ server.UploadForwarder = (*remoteWorld)(nil)

// ForwardUpload implements server.UploadForwarder.
func (w *remoteWorld) ForwardUpload(ctx context.Context, fc *server.ForwardedCall, next func() ([]byte, error)) (*server.ForwardedReply, error) {
	nc := w.reg.node.nc
	timeout := w.reg.node.cfg.ForwardTimeout
	inbox, accept, refused, err := w.openTransfer(ctx, uploadSubject(w.entry.Node), fc, 0)
	if err != nil || refused != nil {
		return refused, err
	}
	defer func() { _ = inbox.Unsubscribe() }()
	upTo := accept.Header.Get(hdrUp)
	// The places of the last message sent to the host, and of the last
	// one taken from it (see signAnswer).
	var out, in uint64
	publish := func(m *nats.Msg) error {
		out++
		w.reg.node.signer.signAnswer(m, out)
		return nc.PublishMsg(m)
	}
	cancelHost := func() {
		c := nats.NewMsg(upTo)
		c.Header.Set(hdrCancelled, "1")
		_ = publish(c)
	}
	sent, acked := 0, 0
	// handle takes one message from the host: an acknowledgement, or its
	// answer (which may come early, when the host refused the upload).
	handle := func(m *nats.Msg) *server.ForwardedReply {
		if m.Header.Get(hdrEnd) == "" {
			if n, err := strconv.Atoi(string(m.Data)); err == nil && n > acked {
				acked = n
			}
			return nil
		}
		rep := &server.ForwardedReply{Response: m.Data}
		if s := m.Header.Get(hdrStatus); s != "" {
			rep.Status, _ = base64.StdEncoding.DecodeString(s)
			rep.Response = nil
		}
		replyMetadata(m, rep)
		return rep
	}
	wait := func() (*server.ForwardedReply, error) {
		m, err := w.reg.node.nextOf(ctx, inbox, &in, false)
		if err != nil {
			cancelHost()
			return nil, w.forwardError(ctx, err, timeout)
		}
		return handle(m), nil
	}
	// takePending takes one message that is already there, unless it is
	// not the host's.
	takePending := func() (*server.ForwardedReply, error) {
		m, err := inbox.NextMsgWithContext(ctx)
		if err == nil {
			var ok bool
			if ok, err = w.reg.node.takes(m, &in, false); ok {
				return handle(m), nil
			}
		}
		if err != nil {
			cancelHost()
			return nil, w.forwardError(ctx, err, timeout)
		}
		return nil, nil
	}
	for done := false; !done; {
		// Take what the host sent meanwhile, and wait while the window
		// is full.
		for {
			var rep *server.ForwardedReply
			var err error
			if n, _, _ := inbox.Pending(); n > 0 {
				rep, err = takePending()
			} else if sent-acked >= streamWindow {
				rep, err = wait()
			} else {
				break
			}
			if err != nil || rep != nil {
				return rep, err
			}
		}
		b, err := next()
		msg := nats.NewMsg(upTo)
		switch {
		case errors.Is(err, io.EOF):
			msg.Header.Set(hdrEnd, "1")
			done = true
		case err != nil:
			cancelHost()
			return nil, err
		default:
			msg.Data = b
			sent++
		}
		if err := publish(msg); err != nil {
			cancelHost()
			return nil, w.forwardError(ctx, err, timeout)
		}
	}
	for {
		rep, err := wait()
		if err != nil || rep != nil {
			return rep, err
		}
	}
}
