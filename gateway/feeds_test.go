package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

// fakeFeed hands out a backlog, then its batches, then overflows.
type fakeFeed struct {
	backlog  []FeedEvent
	batches  [][]FeedEvent
	released int
}

func (f *fakeFeed) Backlog() []FeedEvent { return f.backlog }
func (f *fakeFeed) Last() uint64         { return 3 }
func (f *fakeFeed) Next(_ context.Context, _ <-chan time.Time, buf []FeedEvent) ([]FeedEvent, error) {
	if len(f.batches) == 0 {
		return buf[:0], ErrFeedOverflow
	}
	b := f.batches[0]
	f.batches = f.batches[1:]
	return append(buf[:0], b...), nil
}
func (f *fakeFeed) Overflow(last uint64) FeedEvent {
	return FeedEvent{Name: "overflow", Data: []byte(`{"lastEventId":"` + string(rune('0'+last)) + `"}`)}
}
func (f *fakeFeed) Release() { f.released++ }

// fakeFeeds hands out one feed under one token.
type fakeFeeds struct{ feed *fakeFeed }

func (fakeFeeds) HandoffKey() string { return "x-test-handoff" }
func (fakeFeeds) Secret() string     { return "secret" }
func (f fakeFeeds) Claim(token string) EventFeed {
	if token != "t1" || f.feed == nil {
		return nil
	}
	return f.feed
}

// TestServeFeed: a handed-over feed is written as its backlog, then each
// batch as consecutive frames, then the overflow event, which ends it.
func TestServeFeed(t *testing.T) {
	t.Parallel()
	feed := &fakeFeed{
		backlog: []FeedEvent{{Seq: 3, Name: "actor-update", Data: []byte(`{"uuid":"Actor.a"}`)}},
		batches: [][]FeedEvent{
			{{Seq: 4, Name: "actor-update", Data: []byte(`{"uuid":"Actor.a","n":1}`)}, {Seq: 5, Name: "actor-item-add", Data: []byte("{\"uuid\":\n\"Actor.a.Item.b\"}")}},
		},
	}
	g := &gateway{keepaliveEvery: time.Hour, feeds: fakeFeeds{feed: feed}}
	if g.claimFeed(metadata.Pairs("x-test-handoff", "nope")) != nil {
		t.Fatal("an unknown token claimed a feed")
	}
	claimed := g.claimFeed(metadata.Pairs("x-test-handoff", "t1"))
	if claimed == nil {
		t.Fatal("the handed-over feed was not claimed")
	}
	rec := httptest.NewRecorder()
	sw := &sseWriter{w: rec, rc: http.NewResponseController(rec)}
	g.serveFeed(context.Background(), sw, claimed)
	want := "id: 3\nevent: actor-update\ndata: {\"uuid\":\"Actor.a\"}\n\n" +
		"id: 4\nevent: actor-update\ndata: {\"uuid\":\"Actor.a\",\"n\":1}\n\n" +
		"id: 5\nevent: actor-item-add\ndata: {\"uuid\":\"Actor.a.Item.b\"}\n\n" +
		"event: overflow\ndata: {\"lastEventId\":\"5\"}\n\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("frames:\n got %q\nwant %q", got, want)
	}
	if (&gateway{}).claimFeed(metadata.Pairs("x-test-handoff", "t1")) != nil {
		t.Fatal("a gateway without feeds claimed one")
	}
}

// TestServeFeedWritesSharedFrames: an event whose feed built its frame is
// written as that frame, which AppendEventFrame builds as the bridge would.
func TestServeFeedWritesSharedFrames(t *testing.T) {
	t.Parallel()
	ev := FeedEvent{Seq: 7, Name: "actor-update", Data: []byte(`{"uuid":"Actor.a"}`)}
	shared := AppendEventFrame(nil, ev)
	if want := "id: 7\nevent: actor-update\ndata: {\"uuid\":\"Actor.a\"}\n\n"; string(shared) != want {
		t.Fatalf("AppendEventFrame %q, want %q", shared, want)
	}
	marked := ev
	marked.Frame = []byte("id: 7\nevent: shared\ndata: {}\n\n")
	feed := &fakeFeed{batches: [][]FeedEvent{{marked}}}
	g := &gateway{keepaliveEvery: time.Hour, feeds: fakeFeeds{feed: feed}}
	rec := httptest.NewRecorder()
	sw := &sseWriter{w: rec, rc: http.NewResponseController(rec)}
	g.serveFeed(context.Background(), sw, g.claimFeed(metadata.Pairs("x-test-handoff", "t1")))
	if got := rec.Body.String(); !strings.HasPrefix(got, string(marked.Frame)) {
		t.Fatalf("body %q, want the shared frame first", got)
	}
}
