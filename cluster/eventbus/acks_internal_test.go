package eventbus

import (
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/world"
)

// fakeFuture is an acknowledgement the test gives or withholds.
type fakeFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *fakeFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *fakeFuture) Err() <-chan error            { return f.err }
func (f *fakeFuture) Msg() *nats.Msg               { return f.msg }

// fakeJS records the asynchronous publications; nothing else of JetStream
// is used by send.
type fakeJS struct {
	jetstream.JetStream
	mu        sync.Mutex
	published []*fakeFuture
}

func (j *fakeJS) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f := &fakeFuture{msg: msg, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	j.mu.Lock()
	j.published = append(j.published, f)
	j.mu.Unlock()
	return f, nil
}

// sent returns the publications so far.
func (j *fakeJS) sent() []*fakeFuture {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]*fakeFuture(nil), j.published...)
}

// ackBus is a bus that only publishes, to j.
func ackBus(t *testing.T, j *fakeJS) *Bus {
	b := &Bus{js: j, opts: Options{Log: slog.New(slog.DiscardHandler)}, acks: make(chan pendingAck, maxPendingAcks), stop: make(chan struct{})}
	// The budget notes the acknowledged events; its trimmer does not run.
	b.budget = newBudget(j, 1<<20, 8, b.opts.Log.Warn)
	b.wg.Add(1)
	go b.watchAcks()
	t.Cleanup(func() { close(b.stop); b.wg.Wait() })
	return b
}

func outgoingEvent(seq uint64) outgoing {
	return outgoing{subject: subjectPrefix + "w", clientID: "w", record: world.JournalRecord{Seq: seq, Data: []byte(`{"n":` + strconv.FormatUint(seq, 10) + `}`)}}
}

// TestAcknowledgementsAwaitedWithoutAGoroutineEach: events awaiting
// their acknowledgements hold no goroutine each (a busy cluster has
// thousands in flight); a refused event is sent again, an acknowledged
// one is not.
func TestAcknowledgementsAwaitedWithoutAGoroutineEach(t *testing.T) {
	j := &fakeJS{}
	b := ackBus(t, j)
	before := runtime.NumGoroutine()
	const events = 500
	for seq := range uint64(events) {
		b.send(outgoingEvent(seq+1), 0)
	}
	if grew := runtime.NumGoroutine() - before; grew > 10 {
		t.Errorf("%d goroutines more with %d events awaiting their acknowledgements", grew, events)
	}
	sent := j.sent()
	if len(sent) != events {
		t.Fatalf("%d publications, want %d", len(sent), events)
	}
	sent[0].ok <- &jetstream.PubAck{Stream: StreamName, Sequence: 1}
	sent[1].err <- errors.New("refused")
	for _, f := range sent[2:] {
		f.ok <- &jetstream.PubAck{Stream: StreamName}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(j.sent()) == events && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * publishBackoff)
	again := j.sent()[events:]
	if len(again) != 1 || again[0].msg.Header.Get(seqHeader) != "2" {
		t.Fatalf("sent again: %d events, want the refused one (seq 2)", len(again))
	}
	if b.retries.Load() != 1 {
		t.Errorf("retries = %d, want 1", b.retries.Load())
	}
}

// TestUnacknowledgedEventSentAgain: an event without an acknowledgement
// within publishAckWait is sent again, with its message id, while a later
// one acknowledged meanwhile is not.
func TestUnacknowledgedEventSentAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the acknowledgement time limit")
	}
	j := &fakeJS{}
	b := ackBus(t, j)
	b.send(outgoingEvent(1), 0)
	b.send(outgoingEvent(2), 0)
	j.sent()[1].ok <- &jetstream.PubAck{Stream: StreamName}
	start := time.Now()
	for len(j.sent()) < 3 && time.Since(start) < publishAckWait+5*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	sent := j.sent()
	if len(sent) != 3 {
		t.Fatalf("%d publications, want the silent event sent again", len(sent))
	}
	if took := time.Since(start); took < publishAckWait {
		t.Errorf("sent again after %v, before the time limit %v", took, publishAckWait)
	}
	if id, want := sent[2].msg.Header.Get(jetstream.MsgIDHeader), sent[0].msg.Header.Get(jetstream.MsgIDHeader); id != want {
		t.Errorf("sent again with id %q, want %q", id, want)
	}
}
