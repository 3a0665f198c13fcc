package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestLinkedEventsResumeAcrossARestart: a linked world's events outlive a
// restart of the relay (they are kept in relay.db): the relay started
// again on the same data directory goes on numbering where it stopped, and
// a stream that resumes from before the restart gets what it missed.
func TestLinkedEventsResumeAcrossARestart(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	tt := tr.linkedTabletop()
	clientID, token := tt.Credentials()
	stream := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("clientId", clientID), nil)
	stream.expect("connected")
	waitFor(t, "the module's channel", func() bool { return tt.Channels()["actor-events"] })
	emit := func(tt *linktest.Tabletop, name string) {
		t.Helper()
		if err := tt.Emit("actor-event", map[string]any{"actorUuid": "Actor.a", "eventType": "update", "changes": map[string]any{"name": name}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"A1", "A2", "A3"} {
		emit(tt, name)
	}
	if f := stream.expect("actor-update", "actor-update", "actor-update"); f[2].id != "3" {
		t.Fatalf("events before the restart: %+v", f)
	}
	stream.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}

	again := startTestRelay(t, func(c *node.Config) { c.DataDir = tr.DataDir })
	tt2 := again.tabletop()
	tt2.SetCredentials(clientID, token)
	if err := tt2.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt2.Drop)
	resumed := again.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("clientId", clientID), http.Header{"Last-Event-Id": {"1"}})
	resumed.expect("connected")
	f := resumed.expect("actor-update", "actor-update")
	if f[0].id != "2" || f[0].json(t)["changes"].(map[string]any)["name"] != "A2" || f[1].id != "3" {
		t.Fatalf("replayed after the restart: %+v", f)
	}
	waitFor(t, "the module's channel", func() bool { return tt2.Channels()["actor-events"] })
	emit(tt2, "A4")
	if f := resumed.expect("actor-update"); f[0].id != "4" {
		t.Fatalf("the first event after the restart: %+v", f)
	}
}
