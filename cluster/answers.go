package cluster

import (
	"context"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// Requests to other nodes, and their signed answers.
//
// NATS's own request/reply hands a request the first message that arrives
// on its answer subject and forgets the request: a client of the NATS
// account that sees a call go by could answer first, and the node's true
// answer would be dropped. With a cluster secret, a node therefore takes
// its answers on a subscription of its own (one wildcard inbox for all
// requests, as NATS's own is), checks each message's signature before it
// hands it to the request it answers (signAnswer, verifyAnswer), drops
// and counts the rest, and keeps waiting for the true answer. Without a
// secret, NATS's request/reply serves as before.
//
// NATS itself answers a request that no one listens to with an unsigned
// "no responders" status, which a client of the account could send too. A
// node with an embedded server believes it only when its server knows no
// listener on the request's subject; a node on --nats has no such view
// and believes it as it is.

// answers routes the answers to this node's requests to their callers.
type answers struct {
	once   sync.Once
	err    error
	prefix string        // the inbox, with a dot: a request's subject adds a token
	closed chan struct{} // closed when the node leaves NATS

	mu      sync.Mutex
	next    uint64
	waiting map[string]*awaited
}

// awaited is one request waiting for its answer.
type awaited struct {
	subject string         // where the request went
	answer  chan *nats.Msg // gets the answer, once
}

// request sends msg (a call, a question or a ping to another node),
// signed, and returns the answer the node sent, within ctx. It fails
// with nats.ErrNoResponders when no one listens on msg's subject, and
// with ctx's error when no valid answer came in time.
func (n *Node) request(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	if !n.signer.enabled() {
		return n.nc.RequestMsgWithContext(ctx, msg)
	}
	a := &n.answers
	if err := n.startAnswers(); err != nil {
		return nil, err
	}
	w := &awaited{subject: msg.Subject, answer: make(chan *nats.Msg, 1)}
	a.mu.Lock()
	a.next++
	token := strconv.FormatUint(a.next, 36)
	a.waiting[token] = w
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.waiting, token)
		a.mu.Unlock()
	}()
	msg.Reply = a.prefix + token
	n.signer.sign(msg)
	if err := n.nc.PublishMsg(msg); err != nil {
		return nil, err
	}
	select {
	case m := <-w.answer:
		if noResponders(m) {
			return nil, nats.ErrNoResponders
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-a.closed:
		// As NATS's own requests end when the connection closes.
		return nil, nats.ErrConnectionClosed
	}
}

// startAnswers subscribes to the node's answer inbox, once.
func (n *Node) startAnswers() error {
	a := &n.answers
	a.once.Do(func() {
		a.prefix = n.nc.NewInbox() + "."
		a.waiting = map[string]*awaited{}
		a.closed = make(chan struct{})
		var sub *nats.Subscription
		sub, a.err = n.nc.Subscribe(a.prefix+"*", n.takeAnswer)
		if a.err == nil {
			n.OnClose(func() {
				_ = sub.Unsubscribe()
				close(a.closed)
			})
		}
	})
	return a.err
}

// takeAnswer hands a message on the answer inbox to the request it
// answers, when it is that request's first valid answer; it drops the
// rest (answers that came too late, forged ones, copies), counting those
// that fail their signature, late or not.
func (n *Node) takeAnswer(m *nats.Msg) {
	a := &n.answers
	token := m.Subject[len(a.prefix):]
	a.mu.Lock()
	w := a.waiting[token]
	a.mu.Unlock()
	if w == nil {
		if !noResponders(m) && n.signer.verifyAnswer(m) != nil {
			n.log.Warn("dropped an answer between nodes without a valid cluster signature", "subject", m.Subject)
		}
		return
	}
	if noResponders(m) {
		if n.srv != nil && n.srv.GlobalAccount().SubscriptionInterest(w.subject) {
			// The embedded server knows a listener: not its status.
			n.signer.refused[refusedAnswer].Add(1)
			n.log.Warn("dropped a forged 'no responders' answer between nodes", "subject", w.subject)
			return
		}
	} else if err := n.signer.verifyAnswer(m); err != nil {
		n.log.Warn("dropped an answer between nodes without a valid cluster signature", "subject", w.subject, "reason", err)
		return
	}
	a.mu.Lock()
	if a.waiting[token] == w {
		delete(a.waiting, token)
		w.answer <- m
	}
	a.mu.Unlock()
}

// noResponders reports whether m is NATS's status for a request no one
// listens to.
func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}
