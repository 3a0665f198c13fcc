package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// FollowOption configures how a followed stream reconnects.
type FollowOption func(*followConfig)

type followConfig struct {
	minDelay, maxDelay time.Duration
	onReconnect        func(err error, lastEventID uint64)
}

// WithRetryDelay sets the wait before the first reconnect after a failure
// and the most it grows to, doubling on each failure in a row (defaults
// 200ms and 5s). A stream that delivered an event starts again from min.
func WithRetryDelay(minDelay, maxDelay time.Duration) FollowOption {
	return func(c *followConfig) {
		c.minDelay = max(minDelay, time.Millisecond)
		c.maxDelay = max(maxDelay, c.minDelay)
	}
}

// OnReconnect registers fn, called before each reconnect with the error
// that ended the stream and the id the new stream resumes after (0 when no
// event with an id has arrived yet). It is meant for logging and metrics.
func OnReconnect(fn func(err error, lastEventID uint64)) FollowOption {
	return func(c *followConfig) { c.onReconnect = fn }
}

// FollowActors follows the actor stream (`/actor/subscribe`). See Follow.
func (c *Client) FollowActors(ctx context.Context, req *relayv1.SubscribeActorsRequest, opts ...FollowOption) iter.Seq2[*relayv1.Event, error] {
	return follow(ctx, req, c.Events.SubscribeActors, opts)
}

// FollowHooks follows the hook stream (`/hooks/subscribe`). See Follow.
func (c *Client) FollowHooks(ctx context.Context, req *relayv1.SubscribeHooksRequest, opts ...FollowOption) iter.Seq2[*relayv1.Event, error] {
	return follow(ctx, req, c.Events.SubscribeHooks, opts)
}

// FollowEncounters follows the combat stream (`/encounters/subscribe`).
// See Follow.
func (c *Client) FollowEncounters(ctx context.Context, req *relayv1.SubscribeEncountersRequest, opts ...FollowOption) iter.Seq2[*relayv1.Event, error] {
	return follow(ctx, req, c.Events.SubscribeEncounters, opts)
}

// FollowScenes follows the scene stream (`/scene/subscribe`). See Follow.
func (c *Client) FollowScenes(ctx context.Context, req *relayv1.SubscribeScenesRequest, opts ...FollowOption) iter.Seq2[*relayv1.Event, error] {
	return follow(ctx, req, c.Events.SubscribeScenes, opts)
}

// eventMessage is a message of any of the four streams, as a pointer to
// the generated type R.
type eventMessage[R any] interface {
	*R
	GetEvent() *relayv1.Event
}

// follow is the body of FollowActors and its siblings, which share its
// contract:
//
// The returned iterator opens the stream when the range loop starts and
// yields every event, the stream's own `connected`, `reset` and `overflow`
// events included (their sequence is 0). When the stream breaks (a network
// failure, the relay restarting, an overflow that closed it, the relay
// refusing a stream for a while with ResourceExhausted), it reconnects
// after a growing delay and resumes after the last event id seen, so
// events that happened in between arrive unless they fell out of the
// relay's retained window (then a `reset` event says so). A request whose
// `lastEventId` is set starts after that id.
//
// The iterator yields a non-nil error, once and last, when the relay
// refuses the stream for good (a bad key or scope, an unknown world or
// user, a bad parameter). It ends without an error when ctx is done or the
// loop breaks.
func follow[Req proto.Message, Resp any, PResp eventMessage[Resp]](ctx context.Context, req Req, open func(context.Context, Req, ...grpc.CallOption) (grpc.ServerStreamingClient[Resp], error), opts []FollowOption) iter.Seq2[*relayv1.Event, error] {
	cfg := followConfig{minDelay: 200 * time.Millisecond, maxDelay: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	return func(yield func(*relayv1.Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		last, _ := strconv.ParseUint(lastEventIDOf(req), 10, 64)
		delay := cfg.minDelay
		for {
			err := func() error {
				r := req
				if last > 0 {
					r = withLastEventID(req, strconv.FormatUint(last, 10))
				}
				stream, err := open(ctx, r)
				if err != nil {
					return err
				}
				for {
					msg, err := stream.Recv()
					if err != nil {
						return err
					}
					ev := PResp(msg).GetEvent()
					if ev == nil {
						continue
					}
					if ev.GetSequence() > 0 {
						last = ev.GetSequence()
					}
					delay = cfg.minDelay
					if !yield(ev, nil) {
						return errStop
					}
				}
			}()
			if errors.Is(err, errStop) || ctx.Err() != nil {
				return
			}
			if !retryable(err) {
				yield(nil, err)
				return
			}
			if cfg.onReconnect != nil {
				cfg.onReconnect(err, last)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(delay*2, cfg.maxDelay)
		}
	}
}

// errStop ends a stream when the range loop breaks.
var errStop = errors.New("client: loop stopped")

// retryable reports whether a stream that ended with err is worth opening
// again: the relay ended it (io.EOF: an overflow or a shutdown), the
// connection failed, or the relay is busy for now. Refusals of the call
// itself (key, scope, world, user, parameters) are final.
func retryable(err error) bool {
	if errors.Is(err, io.EOF) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown, codes.DeadlineExceeded:
		return true
	}
	return false
}

// lastEventIDOf returns a stream request's `last_event_id`.
func lastEventIDOf(req proto.Message) string {
	fd := req.ProtoReflect().Descriptor().Fields().ByName("last_event_id")
	if fd == nil {
		return ""
	}
	return req.ProtoReflect().Get(fd).String()
}

// withLastEventID returns a copy of a stream request resuming after id.
func withLastEventID[Req proto.Message](req Req, id string) Req {
	clone := proto.Clone(req).(Req)
	if fd := clone.ProtoReflect().Descriptor().Fields().ByName("last_event_id"); fd != nil {
		clone.ProtoReflect().Set(fd, protoreflect.ValueOfString(id))
	}
	return clone
}
