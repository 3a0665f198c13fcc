package link

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/embedded"
)

// ariaUUID is the demo world's wizard, a document of about 33 KB.
const ariaUUID = "Actor.ariaVale00000001"

// ariaReply returns the module's reply to `entity` for the demo world's
// wizard as the module sends it: its source data, without a uuid, after
// the reply's type and requestId.
func ariaReply(tb testing.TB, requestID string) []byte {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	host, err := world.OpenHost(dir, world.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { host.Close() })
	seed, err := demo.Seed()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := host.Create(ctx, demo.ClientID, seed); err != nil {
		tb.Fatal(err)
	}
	w, err := embedded.NewRegistry(host, embedded.Options{DataDir: dir}).World(ctx, demo.ClientID)
	if err != nil {
		tb.Fatal(err)
	}
	docs := w.(world.Documents)
	raw, err := docs.GetJSON(ctx, nil, ariaUUID)
	if err != nil {
		tb.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		tb.Fatal(err)
	}
	delete(doc, "uuid")
	data, _ := json.Marshal(doc)
	msg, _ := json.Marshal(map[string]any{"type": "entity-result", "requestId": requestID})
	return append(append(msg[:len(msg)-1:len(msg)-1], `,"data":`...), append(data, '}')...)
}

// BenchmarkLinkedGetPhases measures, one at a time, the steps of a linked
// `GET /get` that are the relay's own work on the link (the rest is the
// HTTP request, the WebSocket round trip and the module): encoding the
// module request, reading the module's reply on the connection (checking
// it, measuring its nesting, matching it to its request), and taking the
// document out of it for the answer.
func BenchmarkLinkedGetPhases(b *testing.B) {
	const requestID = "entity_1"
	msg := ariaReply(b, requestID)
	b.Logf("reply: %d bytes", len(msg))
	hub := NewHub(HubOptions{})
	w := NewLinked(hub, "demo-copy", world.Info{ClientID: "demo-copy"})
	user := &world.User{ID: "aliceUser0000001", Name: "Alice", Role: world.RolePlayer}

	b.Run("encode-request", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := encodeRequest("entity", requestID, w.prepare(ctx, user, map[string]any{"uuid": ariaUUID})); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read-reply", func(b *testing.B) {
		c := newConn(hub, nil, "demo-copy", Hash{}, "127.0.0.1", ConnInfo{})
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			ch := make(chan reply, 1)
			c.mu.Lock()
			c.pending[requestID] = pendingCall{requestType: "entity", reply: ch}
			c.mu.Unlock()
			c.dispatch(msg)
			r := <-ch
			if r.err != nil || r.fields == nil {
				b.Fatal(r.err)
			}
			r.release()
		}
	})
	b.Run("take-document", func(b *testing.B) {
		fields, ok := readReply(msg)
		if !ok {
			b.Fatal("not a reply")
		}
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			r, err := w.checkFields(fields)
			if err != nil {
				b.Fatal(err)
			}
			if doc := withUUID(r["data"], ariaUUID); len(doc) <= len(r["data"]) {
				b.Fatal("no uuid added")
			}
		}
	})
}
