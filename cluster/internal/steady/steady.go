// Package steady carries the cluster's key-value operations over
// JetStream's leader elections.
//
// The buckets the cluster shares are read from their streams' leaders, and
// writes go to the leaders too. While JetStream elects a stream's leader (a
// cluster just formed, a server lost, a leader moved), a request finds no
// one to answer it: either the server says so at once, or, when the
// stream's remaining copies hear the request but none of them leads yet,
// nobody answers at all. Each request is therefore bounded by a short
// attempt time-out and sent again until the caller's deadline (or [Wait]
// when the caller has none).
//
// Sending again is safe: a read changes nothing, and every write carries a
// message id of its own that JetStream remembers (the stream's duplicate
// window), so a write that was stored after all is not stored twice: its
// second sending is answered with the first one's revision. Any other
// failure is returned as it came. When the deadline passes without an
// answer, the error is a [world.ErrUnavailable] that callers show as 503.
package steady

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/world"
)

// Wait bounds how long one operation waits for a leader when its caller's
// context has no deadline. An election after a clean start or a leader's
// step-down takes well under a second; after a server was lost without
// stepping down (killed, cut off), JetStream's raft waits a random 4 to 9
// seconds before it elects a new leader, and a loaded machine adds to
// that.
const Wait = 15 * time.Second

// pause is the time between attempts.
const pause = 50 * time.Millisecond

// firstAttempt bounds the first attempt of an operation, and each later
// one gets twice the time of the one before, up to lastAttempt. A request
// that no leader heard is never answered, so the wait for it is lost time:
// short attempts send it again soon after an election. The first is
// shortest, since a healthy leader answers in milliseconds; the later ones
// leave a slow but live leader (a loaded machine) room to answer, while
// the longest still lets a write through within a few seconds of an
// election that ends late.
const (
	firstAttempt = time.Second
	lastAttempt  = 4 * time.Second
)

// JetStream's error codes for a request it cannot carry out at the moment:
// the cluster has no quorum or no leader, or a write with the same message
// id is still being stored (an earlier attempt of the same write).
const (
	clusterUnavailable jetstream.ErrorCode = 10008
	duplicateInProcess jetstream.ErrorCode = 10158
)

// Transient reports whether err says no server took the request: no
// responders on the subject, JetStream saying it has no leader now, or an
// earlier sending of the same write still in process.
func Transient(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == clusterUnavailable || apiErr.ErrorCode == duplicateInProcess)
}

// AskAgain runs op until it succeeds, ctx ends or wait has passed, 200 ms
// apart, calling failed with each error it gets again: for a request that
// a starting node makes once (a watcher's consumer, say), which JetStream
// may answer late while a new stream elects its leader or the machine is
// loaded. It returns op's last error, or ctx's once ctx ended meanwhile.
func AskAgain(ctx context.Context, wait time.Duration, failed func(error), op func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := op()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		failed(err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Do runs op, which must be safe to repeat (a read, or a write that
// JetStream deduplicates), until it succeeds or fails for a reason other
// than an election, for at most the caller's deadline (or [Wait]). Each
// attempt gets a context of its own, bounded by the attempt time-out; an
// attempt that ran out while ctx did not is sent again. nc, when not nil,
// is the connection op's requests travel on: while it is not connected
// (the node's NATS server is gone), nothing is sent again and the
// operation is unavailable at once.
func Do(ctx context.Context, nc *nats.Conn, op func(attempt context.Context) error) error {
	return run(ctx, nc, true, op)
}

// run runs op as [Do] does; when repeatable is false, op runs with the
// caller's context itself (an operation may keep using it after it
// returns) and is sent again only when a server said it did not take it.
func run(ctx context.Context, nc *nats.Conn, repeatable bool, op func(context.Context) error) error {
	bounded, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		bounded, cancel = context.WithTimeout(ctx, Wait)
	}
	defer cancel()
	d := firstAttempt
	for {
		attempt, cancelAttempt := ctx, context.CancelFunc(func() {})
		if repeatable {
			attempt, cancelAttempt = context.WithTimeout(bounded, d)
			d = min(2*d, lastAttempt)
		}
		err := op(attempt)
		// An attempt that ran out of its own time while the operation's
		// did not was never answered: nobody led the stream to hear it.
		unanswered := err != nil && repeatable && attempt.Err() != nil && bounded.Err() == nil
		cancelAttempt()
		if !Transient(err) && !unanswered {
			// The last attempt ran into the deadline: the operation found
			// no leader in time (unless its caller gave up).
			if bounded.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
				return unavailable(err)
			}
			return err
		}
		if bounded.Err() != nil || (nc != nil && !nc.IsConnected()) {
			return unavailable(err)
		}
		select {
		case <-bounded.Done():
			return unavailable(err)
		case <-time.After(pause):
		}
	}
}

// unavailable is the error of an operation that found no leader in time.
func unavailable(cause error) error {
	return world.Wrapf(world.ErrUnavailable, cause, "The cluster's shared state has no leader at the moment: try again")
}

// KV returns kv with every request-answer operation run through [Do],
// its writes published through js with a message id each, so that a write
// sent again after an unanswered attempt is stored once. kv must be a
// bucket of js without a domain or a mirror: its entries' subjects are
// "$KV.<bucket>.<key>". Watchers are left as they are: they resume by
// themselves.
func KV(js jetstream.JetStream, kv jetstream.KeyValue) jetstream.KeyValue {
	if s, ok := kv.(steadyKV); ok {
		return s
	}
	return steadyKV{KeyValue: kv, js: js, prefix: "$KV." + kv.Bucket() + "."}
}

type steadyKV struct {
	jetstream.KeyValue
	js     jetstream.JetStream
	prefix string // of the subjects of the bucket's entries
}

// conn is the connection the bucket's requests travel on (nil for a
// bucket without a JetStream context, in tests).
func (s steadyKV) conn() *nats.Conn {
	if s.js == nil {
		return nil
	}
	return s.js.Conn()
}

// The headers of a key-value entry that JetStream and the client library
// read: what a marker is (a deletion or a purge), and the rollup that makes
// a purge remove the key's earlier revisions.
const (
	operationHeader = "KV-Operation"
	operationDelete = "DEL"
	operationPurge  = "PURGE"
	markerHeader    = "Nats-Marker-Reason"
	rollupHeader    = "Nats-Rollup"
	rollupSubject   = "sub"
)

// validKey is the client library's rule for key names.
var validKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func keyValid(key string) bool {
	return len(key) > 0 && key[0] != '.' && key[len(key)-1] != '.' && validKey.MatchString(key)
}

// do1 runs a repeatable operation with one result through [Do].
func do1[T any](ctx context.Context, nc *nats.Conn, op func(context.Context) (T, error)) (T, error) {
	var out T
	err := Do(ctx, nc, func(attempt context.Context) error {
		var err error
		out, err = op(attempt)
		return err
	})
	return out, err
}

// once1 runs an operation with one result that is not safe to send again
// unless a server said it did not take it.
func once1[T any](ctx context.Context, nc *nats.Conn, op func(context.Context) (T, error)) (T, error) {
	var out T
	err := run(ctx, nc, false, func(ctx context.Context) error {
		var err error
		out, err = op(ctx)
		return err
	})
	return out, err
}

// messageID returns a new id for one write.
func messageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// write publishes one entry for key with the given headers (and, when
// expect is not nil, the revision the key must be at), sending it again
// until it is answered, and returns its revision. Every sending carries the
// same message id, so JetStream stores it once and answers a later sending
// with the revision of the first.
func (s steadyKV) write(ctx context.Context, key string, value []byte, headers map[string]string, expect *uint64) (uint64, error) {
	return s.writeAs(ctx, messageID(), key, value, headers, expect)
}

// writeAs is write with the message id given.
func (s steadyKV) writeAs(ctx context.Context, id, key string, value []byte, headers map[string]string, expect *uint64) (uint64, error) {
	if !keyValid(key) {
		return 0, jetstream.ErrInvalidKey
	}
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id)}
	if expect != nil {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(*expect))
	}
	return do1(ctx, s.conn(), func(attempt context.Context) (uint64, error) {
		m := &nats.Msg{Subject: s.prefix + key, Header: nats.Header{}, Data: value}
		for k, v := range headers {
			m.Header.Set(k, v)
		}
		ack, err := s.js.PublishMsg(attempt, m, opts...)
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	})
}

// wrongRevision reports whether err is JetStream refusing a write because
// the key is not at the revision the write expected.
func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// revisionMismatch adds the library's revision mismatch error to a refused
// conditional write, as the library's own Update and Delete do.
func revisionMismatch(err error) error {
	if wrongRevision(err) {
		return fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	return err
}

// last reads the last entry of key from the stream's leader: its revision
// and whether it is a marker (deleted or purged); found is false when the
// key has no entry.
func (s steadyKV) last(ctx context.Context, key string) (rev uint64, marker, found bool, err error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": s.prefix + key})
	var msg *nats.Msg
	err = Do(ctx, s.conn(), func(attempt context.Context) error {
		var err error
		msg, err = s.js.Conn().RequestWithContext(attempt, "$JS.API.STREAM.MSG.GET.KV_"+s.Bucket(), req)
		return err
	})
	if err != nil {
		return 0, false, false, err
	}
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, false, false, fmt.Errorf("read the last entry of %s: %w", key, err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return 0, false, false, nil
	case resp.Error != nil:
		return 0, false, false, resp.Error
	case resp.Message == nil:
		return 0, false, false, fmt.Errorf("read the last entry of %s: empty answer", key)
	}
	return resp.Message.Seq, isMarker(resp.Message.Hdrs), true, nil
}

// isMarker reports whether the raw headers of an entry mark a deletion or
// a purge (by the library's operation header, or by JetStream's marker
// reason for an entry it removed).
func isMarker(hdrs []byte) bool {
	for _, line := range bytes.Split(hdrs, []byte("\r\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(bytes.TrimSpace(name), []byte(operationHeader)):
			if string(value) == operationDelete || string(value) == operationPurge {
				return true
			}
		case bytes.EqualFold(bytes.TrimSpace(name), []byte(markerHeader)):
			if len(value) > 0 {
				return true
			}
		}
	}
	return false
}

func (s steadyKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return do1(ctx, s.conn(), func(a context.Context) (jetstream.KeyValueEntry, error) { return s.KeyValue.Get(a, key) })
}

func (s steadyKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	return do1(ctx, s.conn(), func(a context.Context) (jetstream.KeyValueEntry, error) {
		return s.KeyValue.GetRevision(a, key, revision)
	})
}

func (s steadyKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return s.write(ctx, key, value, nil, nil)
}

func (s steadyKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return s.Put(ctx, key, []byte(value))
}

// Create stores value under key unless the key holds a value: like the
// library's Create, it takes the place of a deleted or purged key, and
// fails with jetstream.ErrKeyExists otherwise (also when another node's
// write of the key is still being stored, so that its entry cannot be read
// yet). Options (an entry's own time to live) are left to the library.
func (s steadyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if len(opts) > 0 {
		return once1(ctx, s.conn(), func(ctx context.Context) (uint64, error) { return s.KeyValue.Create(ctx, key, value, opts...) })
	}
	var expect uint64
	for tries := 1; ; tries++ {
		rev, err := s.write(ctx, key, value, nil, &expect)
		if !wrongRevision(err) {
			return rev, err
		}
		last, marker, found, lerr := s.last(ctx, key)
		if lerr != nil {
			return 0, lerr
		}
		// A marker that is not the one this write expected (deleted
		// again meanwhile) is tried once or twice more; anything else
		// means the key is taken.
		if !found || !marker || last == expect || tries == 3 {
			return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyExists)
		}
		expect = last
	}
}

func (s steadyKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	rev, err := s.write(ctx, key, value, nil, &revision)
	return rev, revisionMismatch(err)
}

// Delete puts a deletion marker for key. A deletion with options (at a
// revision: see [DeleteAt]) is left to the library.
func (s steadyKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if len(opts) > 0 {
		_, err := once1(ctx, s.conn(), func(ctx context.Context) (struct{}, error) { return struct{}{}, s.KeyValue.Delete(ctx, key, opts...) })
		return err
	}
	_, err := s.write(ctx, key, nil, map[string]string{operationHeader: operationDelete}, nil)
	return err
}

// Purge puts a purge marker for key, which removes its earlier revisions.
func (s steadyKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if len(opts) > 0 {
		_, err := once1(ctx, s.conn(), func(ctx context.Context) (struct{}, error) { return struct{}{}, s.KeyValue.Purge(ctx, key, opts...) })
		return err
	}
	_, err := s.write(ctx, key, nil, map[string]string{operationHeader: operationPurge, rollupHeader: rollupSubject}, nil)
	return err
}

// DeleteAt puts a deletion marker for key if the key is at revision rev,
// and fails with jetstream.ErrKeyRevisionMismatch otherwise. On a bucket
// made by [KV] the deletion is sent again after an unanswered attempt,
// and stored once.
func DeleteAt(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64) error {
	s, ok := kv.(steadyKV)
	if !ok {
		return kv.Delete(ctx, key, jetstream.LastRevision(rev))
	}
	_, err := s.write(ctx, key, nil, map[string]string{operationHeader: operationDelete}, &rev)
	return revisionMismatch(err)
}

// Keys, ListKeys, ListKeysFiltered and History read through a consumer
// whose reading may take longer than an attempt on a large bucket (and a
// lister keeps reading with ctx after it is returned): they run with the
// caller's context, and are sent again only when a server said it did not
// take them.
func (s steadyKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	return once1(ctx, s.conn(), func(ctx context.Context) ([]string, error) { return s.KeyValue.Keys(ctx, opts...) })
}

func (s steadyKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return once1(ctx, s.conn(), func(ctx context.Context) (jetstream.KeyLister, error) { return s.KeyValue.ListKeys(ctx, opts...) })
}

func (s steadyKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	return once1(ctx, s.conn(), func(ctx context.Context) (jetstream.KeyLister, error) {
		return s.KeyValue.ListKeysFiltered(ctx, filters...)
	})
}

func (s steadyKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return once1(ctx, s.conn(), func(ctx context.Context) ([]jetstream.KeyValueEntry, error) {
		return s.KeyValue.History(ctx, key, opts...)
	})
}

func (s steadyKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	return do1(ctx, s.conn(), func(a context.Context) (jetstream.KeyValueStatus, error) { return s.KeyValue.Status(a) })
}
