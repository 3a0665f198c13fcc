package client_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/client"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

const (
	ariaUUID  = "Actor.ariaVale00000001"
	bromUUID  = "Actor.bromIronfist0001"
	guardUUID = "Actor.townGuard0000001"
)

// newClient connects to the test relay; it is closed when the test ends.
func newClient(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(relayAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// aliceKey creates a key bound to the demo world that acts as Alice.
func aliceKey(t *testing.T, ctx context.Context) string {
	t.Helper()
	admin := newClient(t, client.WithAPIKey(adminKey))
	resp, err := admin.Keys.CreateKey(ctx, &relayv1.CreateKeyRequest{
		Name:         "sdk-test-" + t.Name(),
		Scopes:       []string{"entity:read", "entity:write", "dnd5e", "events:subscribe"},
		ClientIds:    []string{"demo"},
		ScopedUserId: "Alice",
	})
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	return resp.GetKey()
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestDefaultsAndOverrides checks that the key, world and user of the
// client reach every call, that the context overrides them per call and
// that a value set in the request wins.
func TestDefaultsAndOverrides(t *testing.T) {
	ctx := testContext(t)
	// The admin key has GM-level access; acting as Alice it sees the Town
	// Guard LIMITED: only its name, uuid, type and image.
	c := newClient(t, client.WithAPIKey(adminKey), client.WithWorld("demo"), client.WithUser("Alice"))
	req := &relayv1.GetDocumentRequest{Uuid: guardUUID}
	resp, err := c.Documents.GetDocument(ctx, req)
	if err != nil {
		t.Fatalf("get as Alice: %v", err)
	}
	guard, err := client.DecodeMap(resp.GetDocument())
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(guard); len(got) != 4 || guard["name"] != "Town Guard" {
		t.Fatalf("the Town Guard as Alice should be LIMITED (img, name, type, uuid), got %v", got)
	}
	if req.GetClientId() != "" || req.GetUserId() != "" {
		t.Fatalf("the caller's request was changed: %v", req)
	}

	// Per call: no user, so GM-level access and the whole document.
	resp, err = c.Documents.GetDocument(client.CallWithUser(ctx, ""), req)
	if err != nil {
		t.Fatalf("get as GM: %v", err)
	}
	guard, _ = client.DecodeMap(resp.GetDocument())
	if _, ok := guard["system"]; !ok {
		t.Fatalf("the Town Guard with GM-level access should be whole, got %v", keysOf(guard))
	}

	// A user named in the request wins over the client's.
	resp, err = c.Documents.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: guardUUID, UserId: "Gamemaster"})
	if err != nil {
		t.Fatalf("get as Gamemaster: %v", err)
	}
	guard, _ = client.DecodeMap(resp.GetDocument())
	if _, ok := guard["system"]; !ok {
		t.Fatalf("the Town Guard as the Gamemaster should be whole, got %v", keysOf(guard))
	}

	// A per-call world and key: an unknown world is NOT_FOUND, a bad key
	// UNAUTHENTICATED, so both really went out with the call.
	if _, err := c.Documents.GetDocument(client.CallWithWorld(ctx, "nowhere"), req); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown world per call: want NotFound, got %v", err)
	}
	if _, err := c.Documents.GetDocument(client.CallWithAPIKey(ctx, "not-a-key"), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("bad key per call: want Unauthenticated, got %v", err)
	}
	// Without any key the relay refuses the call.
	bare := newClient(t, client.WithWorld("demo"))
	if _, err := bare.Documents.GetDocument(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: want Unauthenticated, got %v", err)
	}
}

// actor is a caller's own type for a decoded document.
type actor struct {
	Name   string `json:"name"`
	System struct {
		Attributes struct {
			HP struct {
				Value int `json:"value"`
				Max   int `json:"max"`
			} `json:"hp"`
		} `json:"attributes"`
	} `json:"system"`
}

// TestReadUpdateRestAndStream is the tour the issue asks of an SDK: a
// document read, an update, a /dnd5e operation and an event stream, with a
// key that acts as Alice.
func TestReadUpdateRestAndStream(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, client.WithAPIKey(aliceKey(t, ctx)))

	// Follow Aria's actor stream first, so the update arrives on it.
	events := make(chan *relayv1.Event, 16)
	streamErr := make(chan error, 1)
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	go func() {
		for ev, err := range c.FollowActors(streamCtx, &relayv1.SubscribeActorsRequest{ActorUuid: ariaUUID}) {
			if err != nil {
				streamErr <- err
				return
			}
			events <- ev
		}
	}()
	waitEvent(t, events, streamErr, "connected", nil)

	resp, err := c.Documents.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: ariaUUID})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	aria, err := client.Decode[actor](resp.GetDocument())
	if err != nil {
		t.Fatal(err)
	}
	if aria.Name != "Aria Vale" || aria.System.Attributes.HP.Max == 0 {
		t.Fatalf("Aria decoded as %+v", aria)
	}

	data, err := client.Data(map[string]any{"system.attributes.hp.value": 3})
	if err != nil {
		t.Fatal(err)
	}
	up, err := c.Documents.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: ariaUUID, Data: data})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if after, _ := client.Decode[actor](up.GetDocument()); after.System.Attributes.HP.Value != 3 {
		t.Fatalf("after the update Aria has %d hit points, want 3", after.System.Attributes.HP.Value)
	}
	ev := waitEvent(t, events, streamErr, "actor-update", func(p map[string]any) bool {
		return p["uuid"] == ariaUUID
	})
	if ev.GetSequence() == 0 {
		t.Fatalf("actor-update without a sequence: %v", ev)
	}

	rest, err := c.Dnd5e.LongRest(ctx, &relayv1.LongRestRequest{ActorUuid: ariaUUID})
	if err != nil {
		t.Fatalf("long rest: %v", err)
	}
	if rest.GetResult().GetType() != "long" {
		t.Fatalf("long rest result: %v", rest.GetResult())
	}
	resp, err = c.Documents.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: ariaUUID})
	if err != nil {
		t.Fatal(err)
	}
	if healed, _ := client.Decode[actor](resp.GetDocument()); healed.System.Attributes.HP.Value != healed.System.Attributes.HP.Max {
		t.Fatalf("after a long rest Aria has %d of %d hit points", healed.System.Attributes.HP.Value, healed.System.Attributes.HP.Max)
	}
	waitEvent(t, events, streamErr, "actor-update", nil)
}

// waitEvent returns the next event named name (whose payload passes match,
// when given), failing the test on a stream error or after a generous
// wait.
func waitEvent(t *testing.T, events <-chan *relayv1.Event, errs <-chan error, name string, match func(map[string]any) bool) *relayv1.Event {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.GetName() != name {
				continue
			}
			if match != nil {
				p, err := client.DecodeMap(ev.GetData())
				if err != nil || !match(p) {
					continue
				}
			}
			return ev
		case err := <-errs:
			t.Fatalf("stream ended waiting for %s: %v", name, err)
		case <-timeout:
			t.Fatalf("no %s event within 15s", name)
		}
	}
}

// TestFollowResumesAfterNetworkDrop cuts the connection under a followed
// stream, changes the actor while the stream is down, and expects the
// stream to come back by itself and deliver the change it missed, resuming
// after the last id it saw.
func TestFollowResumesAfterNetworkDrop(t *testing.T) {
	ctx := testContext(t)
	proxy := newDropProxy(t, relayAddr)
	// The writer goes straight to the relay, so it is not cut.
	writer := newClient(t, client.WithAPIKey(adminKey), client.WithWorld("demo"))
	followed, err := client.New(proxy.addr(), client.WithAPIKey(adminKey), client.WithWorld("demo"))
	if err != nil {
		t.Fatal(err)
	}
	defer followed.Close()

	setHP := func(hp int) error {
		data, _ := client.Data(map[string]any{"system.attributes.hp.value": hp})
		_, err := writer.Documents.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: bromUUID, Data: data})
		return err
	}
	hpOf := func(ev *relayv1.Event) any {
		p, _ := client.DecodeMap(ev.GetData())
		changes, _ := p["changes"].(map[string]any)
		system, _ := changes["system"].(map[string]any)
		attrs, _ := system["attributes"].(map[string]any)
		hp, _ := attrs["hp"].(map[string]any)
		return hp["value"]
	}

	// The first time the stream breaks, Brom changes before it reconnects
	// (the hook runs before the new stream opens), so only a resume can
	// deliver that change.
	type reconnect struct {
		last uint64
		err  error
	}
	reconnects := make(chan reconnect, 8)
	events := make(chan *relayv1.Event, 32)
	streamErr := make(chan error, 1)
	go func() {
		first := true
		stream := followed.FollowActors(ctx, &relayv1.SubscribeActorsRequest{ActorUuid: bromUUID},
			client.WithRetryDelay(50*time.Millisecond, 500*time.Millisecond),
			client.OnReconnect(func(_ error, last uint64) {
				r := reconnect{last: last}
				if first {
					first = false
					r.err = setHP(8)
				}
				reconnects <- r
			}))
		for ev, err := range stream {
			if err != nil {
				streamErr <- err
				return
			}
			events <- ev
		}
	}()
	waitEvent(t, events, streamErr, "connected", nil)

	if err := setHP(7); err != nil {
		t.Fatalf("update: %v", err)
	}
	first := waitEvent(t, events, streamErr, "actor-update", nil)
	if hpOf(first) != float64(7) {
		t.Fatalf("first update carried hp %v, want 7", hpOf(first))
	}

	proxy.drop()
	select {
	case r := <-reconnects:
		if r.err != nil {
			t.Fatalf("update while the stream was down: %v", r.err)
		}
		if r.last != first.GetSequence() {
			t.Fatalf("reconnect resumes after %d, want %d (the last event seen)", r.last, first.GetSequence())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the stream did not notice the dropped connection within 15s")
	}
	missed := waitEvent(t, events, streamErr, "actor-update", nil)
	if hpOf(missed) != float64(8) || missed.GetSequence() <= first.GetSequence() {
		t.Fatalf("after the reconnect got hp %v at %d, want 8 after %d", hpOf(missed), missed.GetSequence(), first.GetSequence())
	}
}

// TestFollowStopsOnRefusal: a stream the relay refuses for good ends the
// loop with the refusal instead of reconnecting forever.
func TestFollowStopsOnRefusal(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, client.WithAPIKey("not-a-key"), client.WithWorld("demo"))
	var got error
	for _, err := range c.FollowHooks(ctx, &relayv1.SubscribeHooksRequest{}) {
		got = err
	}
	if status.Code(got) != codes.Unauthenticated {
		t.Fatalf("want Unauthenticated, got %v", got)
	}

	// A bad parameter too.
	c = newClient(t, client.WithAPIKey(adminKey), client.WithWorld("demo"))
	got = nil
	for _, err := range c.FollowActors(ctx, &relayv1.SubscribeActorsRequest{LastEventId: "soon"}) {
		got = err
	}
	if status.Code(got) != codes.InvalidArgument {
		t.Fatalf("want InvalidArgument, got %v", got)
	}
}

// TestDecodeEmpty: an unset field is ErrNoData, not a zero value.
func TestDecodeEmpty(t *testing.T) {
	if _, err := client.DecodeMap(nil); !errors.Is(err, client.ErrNoData) {
		t.Fatalf("want ErrNoData, got %v", err)
	}
	list, _ := structpb.NewValue([]any{1, 2})
	v, err := client.Decode[[]int](list)
	if err != nil || len(v) != 2 || v[1] != 2 {
		t.Fatalf("decode list: %v %v", v, err)
	}
	if _, err := client.DecodeMap(list); err == nil {
		t.Fatal("a list decoded as a map")
	}
}

// TestAccountsClient makes an account through the client's Accounts
// service, with the relay's bootstrap key, and uses its first key.
func TestAccountsClient(t *testing.T) {
	ctx := testContext(t)
	admin := newClient(t, client.WithAPIKey(adminKey))
	resp, err := admin.Accounts.CreateAccount(ctx, &relayv1.CreateAccountRequest{Name: "sdk-" + t.Name()})
	if err != nil {
		t.Fatalf("create account: %v", err)
	}
	gm := newClient(t, client.WithAPIKey(resp.GetKey()))
	list, err := gm.Keys.ListKeys(ctx, &relayv1.ListKeysRequest{})
	if err != nil || len(list.GetKeys()) != 1 {
		t.Fatalf("the account's key lists %v, %v; want only itself", list.GetKeys(), err)
	}
	if _, err := gm.Accounts.ListAccounts(ctx, &relayv1.ListAccountsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the account's key lists accounts: %v", err)
	}
}

// TestAuditClient lists the audit log through the client's Audit service:
// the key made a moment before is on record.
func TestAuditClient(t *testing.T) {
	ctx := testContext(t)
	admin := newClient(t, client.WithAPIKey(adminKey))
	made, err := admin.Keys.CreateKey(ctx, &relayv1.CreateKeyRequest{Name: "audited-" + t.Name(), Scopes: []string{"entity:read"}})
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	list, err := admin.Audit.ListAuditRecords(ctx, &relayv1.ListAuditRecordsRequest{Action: "key.create", Limit: 1000})
	if err != nil {
		t.Fatalf("list audit records: %v", err)
	}
	for _, r := range list.GetRecords() {
		if r.GetTarget() == made.GetApiKey().GetId() && r.GetOutcome() == "ok" {
			return
		}
	}
	t.Fatalf("the key made is not on record: %v", list.GetRecords())
}

// TestCallWithIdempotencyKey sends one write three times with one
// idempotency key: it is applied once, every call gets the first answer,
// and the key used for another write is refused.
func TestCallWithIdempotencyKey(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, client.WithAPIKey(adminKey), client.WithWorld("demo"))
	keyed := client.CallWithIdempotencyKey(ctx, "sdk-"+t.Name())
	req := &relayv1.IncreaseAttributeRequest{Uuid: bromUUID, Attribute: "system.currency.cp", Amount: proto.Float64(3)}
	first, err := c.Documents.IncreaseAttribute(keyed, req)
	if err != nil {
		t.Fatalf("keyed write: %v", err)
	}
	for range 2 {
		again, err := c.Documents.IncreaseAttribute(keyed, req)
		if err != nil || !proto.Equal(again, first) {
			t.Fatalf("retry: %v %v; first %v", again, err, first)
		}
	}
	after, err := c.Documents.IncreaseAttribute(ctx, &relayv1.IncreaseAttributeRequest{Uuid: bromUUID, Attribute: "system.currency.cp", Amount: proto.Float64(0)})
	if err != nil || after.GetNewValue() != first.GetNewValue() {
		t.Fatalf("the write was applied more than once: %v after %v (%v)", after, first, err)
	}
	other := &relayv1.IncreaseAttributeRequest{Uuid: bromUUID, Attribute: "system.currency.cp", Amount: proto.Float64(4)}
	if _, err := c.Documents.IncreaseAttribute(keyed, other); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the key used for another write: %v", err)
	}
}
