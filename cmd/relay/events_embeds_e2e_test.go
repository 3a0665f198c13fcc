package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
)

// streamEvent is one event of a stream, whatever the transport.
type streamEvent struct {
	id, name string
	data     map[string]any
	raw      string
}

// eventSource reads the events of one stream, whatever the transport.
type eventSource interface {
	next(t *testing.T) streamEvent
}

// sseSource reads an SSE stream.
type sseSource struct{ c *sseClient }

func (s sseSource) next(t *testing.T) streamEvent {
	t.Helper()
	f := s.c.next(10 * time.Second)
	return streamEvent{id: f.id, name: f.event, data: f.json(t), raw: f.data}
}

// grpcSource reads a gRPC event stream (any of the four) through a
// goroutine, so that a read can time out.
type grpcSource struct {
	events chan *relayv1.Event
	errs   chan error
}

// openGRPCStream opens a gRPC event stream with key over conn; open calls
// the subscribe method and returns its receive function.
func openGRPCStream(t *testing.T, key string, open func(ctx context.Context) (func() (*relayv1.Event, error), error)) grpcSource {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key))
	t.Cleanup(cancel)
	recv, err := open(ctx)
	if err != nil {
		t.Fatalf("open gRPC stream: %v", err)
	}
	s := grpcSource{events: make(chan *relayv1.Event, 1000), errs: make(chan error, 1)}
	go func() {
		for {
			ev, err := recv()
			if err != nil {
				s.errs <- err
				return
			}
			s.events <- ev
		}
	}()
	return s
}

func (s grpcSource) next(t *testing.T) streamEvent {
	t.Helper()
	select {
	case ev := <-s.events:
		var data map[string]any
		if err := json.Unmarshal(valueJSON(t, ev.GetData()), &data); err != nil {
			t.Fatalf("gRPC event %s data %q: %v", ev.GetName(), valueJSON(t, ev.GetData()), err)
		}
		return streamEvent{id: strconv.FormatUint(ev.GetSequence(), 10), name: ev.GetName(), data: data, raw: string(valueJSON(t, ev.GetData()))}
	case err := <-s.errs:
		t.Fatalf("gRPC stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no gRPC event within 10s")
	}
	return streamEvent{}
}

// h2cConn is a gRPC client connection to the relay's own port (h2c), as an
// outside gRPC caller makes one.
func (tr *testRelay) h2cConn() *grpc.ClientConn {
	tr.t.Helper()
	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.t.Cleanup(func() { conn.Close() })
	return conn
}

// hookStreams opens a createChatMessage hooks stream with key over SSE and
// over gRPC, resuming after lastEventID unless it is "".
func (tr *testRelay) hookStreams(conn *grpc.ClientConn, key, hooks, lastEventID string) map[string]eventSource {
	tr.t.Helper()
	query := relaytest.Q("hooks", hooks)
	if lastEventID != "" {
		query.Set("lastEventId", lastEventID)
	}
	sse := tr.openStream("/hooks/subscribe", key, query, nil)
	g := openGRPCStream(tr.t, key, func(ctx context.Context) (func() (*relayv1.Event, error), error) {
		st, err := relayv1.NewEventServiceClient(conn).SubscribeHooks(ctx, &relayv1.SubscribeHooksRequest{Hooks: hooks, LastEventId: lastEventID})
		if err != nil {
			return nil, err
		}
		return func() (*relayv1.Event, error) {
			r, err := st.Recv()
			return r.GetEvent(), err
		}, nil
	})
	out := map[string]eventSource{"sse": sseSource{sse}, "grpc": g}
	for transport, s := range out {
		if ev := s.next(tr.t); ev.name != "connected" {
			tr.t.Fatalf("%s: first event %s, want connected", transport, ev.name)
		}
	}
	return out
}

// TestChatEventsRevealNoMoreThanTheirReadersMaySee: chat messages posted
// by fifth-edition operations, and whispered or blind ones, reach each
// subscriber as they may read the message, the actor it speaks for and
// the target it names: over SSE and gRPC, live and on resume, for players
// at NONE, LIMITED, OBSERVER and OWNER on the actor, and for GMs.
func TestChatEventsRevealNoMoreThanTheirReadersMaySee(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	conn := tr.h2cConn()
	keys := map[string]string{"admin": tr.AdminKey}
	for _, user := range []string{"Gamemaster", "Alice", "Bob", "Tess"} {
		keys[user], _ = tr.NewKey(&relayv1.CreateKeyRequest{Name: user, Scopes: []string{"events:subscribe"}, ScopedUserId: user})
	}
	readers := []string{"admin", "Gamemaster", "Alice", "Bob", "Tess"}
	streams := map[string]map[string]eventSource{}
	for _, r := range readers {
		streams[r] = tr.hookStreams(conn, keys[r], "createChatMessage", "")
	}

	dnd := func(op string, params map[string]any) {
		t.Helper()
		if r := tr.dnd5eCall(http.MethodPost, op, "", params); r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", op, r.Status, r.Body)
		}
	}
	say := func(msg map[string]any) {
		t.Helper()
		tr.write(http.MethodPost, "/create", map[string]any{"entityType": "ChatMessage", "data": msg})
	}
	speaker := func(actorUUID string) map[string]any {
		return map[string]any{"actor": strings.TrimPrefix(actorUUID, "Actor."), "alias": "someone"}
	}
	// What each player gets of each message: "full", "limited" or nothing
	// (""); GMs get every message in full. Levels on the speaker: the
	// Goblin is NONE to every player, the Town Guard LIMITED; Aria is
	// Alice's (OWNER), LIMITED to Bob and NONE to Tess; Brom is Bob's
	// (OWNER), OBSERVER to Alice and NONE to Tess; Mara is OBSERVER to
	// everyone. The tavern scene, where the tokens stand, is NONE to
	// players.
	steps := []struct {
		do               func()
		alice, bob, tess string
	}{
		{func() { // the Goblin attacks Aria
			dnd("use-item", map[string]any{"actorUuid": relaytest.GoblinUUID, "abilityName": "Scimitar", "targetUuid": relaytest.AriaUUID})
		}, "", "", ""},
		// A roll's message is whispered to those who may read the actor
		// in full (and the GMs), so a LIMITED reader gets nothing of it.
		{func() { dnd("skill-check", map[string]any{"actorUuid": relaytest.GuardUUID, "skill": "prc"}) }, "", "", ""},
		{func() { dnd("ability-save", map[string]any{"actorUuid": relaytest.BromUUID, "ability": "con"}) }, "full", "full", ""},
		{func() { dnd("skill-check", map[string]any{"actorUuid": relaytest.AriaUUID, "skill": "arc"}) }, "full", "", ""},
		// A public message speaking for an actor is no more visible than
		// the actor.
		{func() {
			say(map[string]any{"speaker": speaker(relaytest.GuardUUID), "flavor": "the guard speaks", "content": "halt"})
		}, "limited", "limited", "limited"},
		{func() {
			say(map[string]any{"speaker": speaker(relaytest.AriaUUID), "flavor": "Aria speaks", "content": "hello"})
		}, "full", "limited", ""},
		{func() { // Brom attacks the Goblin's token, in a scene players cannot see
			dnd("use-item", map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Longsword", "targetUuid": relaytest.GoblinUUID})
		}, "", "", ""},
		{func() { // Brom attacks Mara, whom everyone may see
			dnd("use-item", map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Handaxe", "targetUuid": relaytest.MaraUUID})
		}, "full", "full", ""},
		{func() {
			say(map[string]any{"speaker": speaker(relaytest.BromUUID), "flavor": "whispered to Alice", "content": "psst", "whisper": []any{relaytest.AliceID}})
		}, "full", "", ""},
		{func() {
			say(map[string]any{"author": relaytest.AliceID, "speaker": speaker(relaytest.AriaUUID), "flavor": "blind", "content": "12", "whisper": []any{"gamemaster000001"}, "blind": true})
		}, "limited", "", ""},
		{func() {
			say(map[string]any{"speaker": speaker(relaytest.GoblinUUID), "flavor": "goblin speaks", "content": "grr"})
		}, "", "", ""},
		{func() {
			say(map[string]any{"speaker": speaker(relaytest.MaraUUID), "flavor": "end", "content": "Mara says goodbye"})
		}, "full", "full", "full"},
	}
	for _, s := range steps {
		s.do()
	}

	// The GM's streams name every message; the others are compared with
	// what each player may see of them.
	var flavors []string
	firstID := ""
	want := map[string][]string{}
	for i := range steps {
		ev := streams["admin"]["sse"].next(t)
		if i == 0 {
			firstID = ev.id
		}
		data := ev.data["data"].(map[string]any)
		if data["content"] == nil || data["speaker"] == nil || data["flavor"] == nil {
			t.Fatalf("GM got a partial message: %s", ev.raw)
		}
		flavors = append(flavors, data["flavor"].(string))
	}
	for i, s := range steps {
		for reader, view := range map[string]string{"admin": "full", "Gamemaster": "full", "Alice": s.alice, "Bob": s.bob, "Tess": s.tess} {
			switch view {
			case "full":
				want[reader] = append(want[reader], flavors[i])
			case "limited":
				want[reader] = append(want[reader], "limited")
			}
		}
	}
	read := func(reader, transport string, src eventSource, n int) {
		t.Helper()
		var got []string
		for range n {
			ev := src.next(t)
			if ev.name != "createChatMessage" {
				t.Fatalf("%s over %s: event %s", reader, transport, ev.name)
			}
			data := ev.data["data"].(map[string]any)
			if data["flavor"] == nil {
				if len(data) != 4 || data["type"] != "ChatMessage" || data["uuid"] == nil || data["name"] != nil || data["img"] != nil {
					t.Fatalf("%s over %s: LIMITED message %s, want name, uuid, type and img only", reader, transport, ev.raw)
				}
				got = append(got, "limited")
			} else {
				got = append(got, data["flavor"].(string))
			}
			if reader != "admin" && reader != "Gamemaster" && strings.Contains(strings.ToLower(ev.raw), "goblin") {
				t.Fatalf("%s over %s learnt of the Goblin: %s", reader, transport, ev.raw)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want[reader]) {
			t.Fatalf("%s over %s got %q, want %q", reader, transport, got, want[reader])
		}
	}
	for _, reader := range readers {
		for transport, src := range streams[reader] {
			if reader == "admin" && transport == "sse" {
				continue // read above
			}
			read(reader, transport, src, len(want[reader]))
		}
	}
	if fmt.Sprint(want["Tess"]) != "[limited end]" || want["Alice"][len(want["Alice"])-1] != "end" {
		t.Fatalf("the steps do not cover what they should: %v", want)
	}

	// A resume replays the same messages, filtered the same way.
	after, _ := strconv.ParseUint(firstID, 10, 64)
	for _, reader := range readers {
		for transport, src := range tr.hookStreams(conn, keys[reader], "createChatMessage", strconv.FormatUint(after-1, 10)) {
			read(reader, "resumed "+transport, src, len(want[reader]))
		}
	}
}

// TestTokenEventsWithholdTheirActorsData: an unlinked token keeps its
// actor's changed data (`delta`); killing the Goblin's token writes its hit
// points there. A player who sees the scene but not the Goblin receives
// the token's moves, never its hit points, over SSE and gRPC.
func TestTokenEventsWithholdTheirActorsData(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	conn := tr.h2cConn()
	const goblinToken = "Scene.tavernScene00001.Token.goblinToken00001"
	aliceKey, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "alice", Scopes: []string{"events:subscribe"}, ScopedUserId: "Alice"})
	tr.write(http.MethodPut, "/update", map[string]any{"uuid": relaytest.TavernScene, "data": map[string]any{"ownership.default": 2}})

	open := func(key string) map[string]eventSource {
		sse := tr.openStream("/scene/subscribe", key, relaytest.Q("sceneId", "tavernScene00001"), nil)
		g := openGRPCStream(t, key, func(ctx context.Context) (func() (*relayv1.Event, error), error) {
			st, err := relayv1.NewEventServiceClient(conn).SubscribeScenes(ctx, &relayv1.SubscribeScenesRequest{SceneId: "tavernScene00001"})
			if err != nil {
				return nil, err
			}
			return func() (*relayv1.Event, error) {
				r, err := st.Recv()
				return r.GetEvent(), err
			}, nil
		})
		out := map[string]eventSource{"sse": sseSource{sse}, "grpc": g}
		for _, s := range out {
			if ev := s.next(t); ev.name != "connected" {
				t.Fatalf("first event %s", ev.name)
			}
		}
		return out
	}
	gm, alice := open(tr.AdminKey), open(aliceKey)

	if r := tr.Do(http.MethodPost, "/kill", tr.AdminKey, nil, map[string]any{"uuid": goblinToken}); r.Status != http.StatusOK {
		t.Fatalf("kill: %d %s", r.Status, r.Body)
	}
	tr.write(http.MethodPut, "/update", map[string]any{"uuid": goblinToken, "data": map[string]any{"x": 1200}})

	for transport, s := range gm {
		ev := s.next(t)
		if ev.name != "scene-token-update" || !strings.Contains(ev.raw, `"delta"`) {
			t.Fatalf("GM over %s: %s %s, want the kill in the delta", transport, ev.name, ev.raw)
		}
		if ev = s.next(t); ev.data["changes"].(map[string]any)["x"] != 1200.0 {
			t.Fatalf("GM over %s: %s", transport, ev.raw)
		}
	}
	for transport, s := range alice {
		ev := s.next(t)
		if changes := ev.data["changes"].(map[string]any); ev.name != "scene-token-update" || len(changes) != 1 || changes["x"] != 1200.0 {
			t.Fatalf("Alice over %s: %s %s, want only the move", transport, ev.name, ev.raw)
		}
	}
	// Nothing else comes to Alice: the kill was the Goblin's data alone.
	tr.write(http.MethodPut, "/update", map[string]any{"uuid": relaytest.TavernScene, "data": map[string]any{"name": "The Tavern"}})
	for transport, s := range alice {
		if ev := s.next(t); ev.name != "scene-update" {
			t.Fatalf("Alice over %s: %s %s, want the scene's new name next", transport, ev.name, ev.raw)
		}
	}
}
