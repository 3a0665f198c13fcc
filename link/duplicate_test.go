package link_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
)

// TestSecondTabStaysOnline: two game master tabs of one world in one
// browser (the same address) run as the module does. Whichever goes away,
// the world stays online: the second is refused with 4004 while the first
// lives and takes over once it is gone, and neither is ever closed with a
// code after which the module stops for good.
func TestSecondTabStaysOnline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.Hub.DuplicateProbe = 300 * time.Millisecond })
	paired := e.tabletop()
	if _, err := paired.Pair(context.Background(), e.code("")); err != nil {
		t.Fatal(err)
	}
	clientID, token := paired.Credentials()
	run := func(tt *linktest.Tabletop) (stop func(), done chan error) {
		tt.SetCredentials(clientID, token)
		ctx, cancel := context.WithCancel(context.Background())
		done = make(chan error, 1)
		go func() { done <- tt.Run(ctx) }()
		t.Cleanup(cancel)
		return cancel, done
	}
	fast := func(c *linktest.Config) { c.DeferredRetry = 100 * time.Millisecond }
	first, second := e.tabletop(fast), e.tabletop(fast)
	stopFirst, firstDone := run(first)
	e.wait("the first tab online", first.Connected)
	_, secondDone := run(second)
	e.wait("the second tab refused", func() bool { return second.LastClose() == link.CloseDuplicate || second.Connected() })
	select {
	case err := <-firstDone:
		t.Fatalf("the first tab stopped: %v", err)
	case err := <-secondDone:
		t.Fatalf("the second tab stopped: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if !e.svc.Hub().Online(clientID) {
		t.Fatal("the world went offline")
	}
	// The first tab closes: the second takes over.
	stopFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("first tab: %v", err)
	}
	e.wait("the second tab online", second.Connected)
	if !e.svc.Hub().Online(clientID) {
		t.Fatal("the world went offline")
	}
}
