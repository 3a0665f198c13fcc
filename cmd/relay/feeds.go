package main

import (
	"context"
	"errors"
	"time"

	"relay/gateway"
	"relay/world/events"
)

// eventFeeds lets the gateway's SSE bridge take over the subscriptions that
// the event RPC hands over inside this process (see gateway.EventFeeds and
// events.Handoff). It is wiring: the gateway knows nothing of the hub, and
// the hub nothing of the gateway.
type eventFeeds struct{}

var _ gateway.EventFeeds = eventFeeds{}

func (eventFeeds) HandoffKey() string { return events.HandoffMetadata }

func (eventFeeds) Secret() string { return events.HandoffSecret() }

func (eventFeeds) Claim(token string) gateway.EventFeed {
	h := events.Claim(token)
	if h == nil {
		return nil
	}
	return &eventFeed{h: h}
}

// eventFeed presents a claimed handoff to the bridge.
type eventFeed struct {
	h     *events.Handoff
	batch []events.Event // reused between batches
}

func (f *eventFeed) Backlog() []gateway.FeedEvent { return feedEvents(nil, f.h.Backlog) }

func (f *eventFeed) Last() uint64 { return f.h.Last }

func (f *eventFeed) Next(ctx context.Context, tick <-chan time.Time, buf []gateway.FeedEvent) ([]gateway.FeedEvent, error) {
	var err error
	f.batch, err = f.h.Sub.NextBatch(ctx, tick, f.batch)
	switch {
	case errors.Is(err, events.ErrOverflow):
		return buf[:0], gateway.ErrFeedOverflow
	case err != nil:
		return buf[:0], err
	}
	return feedEvents(buf[:0], f.batch), nil
}

func (f *eventFeed) Overflow(last uint64) gateway.FeedEvent {
	ev := f.h.Overflow(last)
	return gateway.FeedEvent{Seq: ev.Seq, Name: ev.Name, Data: ev.Data}
}

func (f *eventFeed) Release() { f.h.Release() }

// feedEvents appends hub events to dst as feed events; the payload bytes are
// shared, not copied, and so is each event's SSE frame, built once per
// event and payload for every stream that sends it.
func feedEvents(dst []gateway.FeedEvent, evs []events.Event) []gateway.FeedEvent {
	for _, ev := range evs {
		dst = append(dst, gateway.FeedEvent{Seq: ev.Seq, Name: ev.Name, Data: ev.Data, Frame: ev.Frame(hubEventFrame)})
	}
	return dst
}

// hubEventFrame is a hub event's SSE frame.
func hubEventFrame(ev events.Event) []byte {
	return gateway.AppendEventFrame(nil, gateway.FeedEvent{Seq: ev.Seq, Name: ev.Name, Data: ev.Data})
}
