package main

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/demo"
)

func TestMain(m *testing.M) { relaytest.Main(m) }

// TestWorldTitle runs the simulator with --world against a relay, with and
// without --title, and checks the title the relay shows for the linked
// world: the one given, else the demo world's.
func TestWorldTitle(t *testing.T) {
	r := relaytest.Start(t)
	demoTitle := demoWorldTitle(t)
	for _, c := range []struct {
		name  string
		args  []string
		title string
	}{
		{"given", []string{"--title", "The Sunken Keep"}, "The Sunken Keep"},
		{"default", nil, demoTitle},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, err := r.Links().CreatePairingCode(context.Background(), "", "test")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			args := append([]string{"--relay", r.Base, "--code", code, "--state", filepath.Join(dir, "state.json"),
				"--world", filepath.Join(dir, "world"), "--log-level", "error"}, c.args...)
			ctx, cancel := context.WithCancel(context.Background())
			var stderr lockedBuffer
			var runErr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				runErr = run(ctx, args, &stderr)
			}()
			t.Cleanup(func() {
				cancel()
				<-done
			})
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if conns := r.Links().Hub().Connected(); len(conns) == 1 {
					if got := conns[0].WorldTitle; got != c.title {
						t.Fatalf("the relay shows the title %q, want %q", got, c.title)
					}
					break
				}
				select {
				case <-done:
					t.Fatalf("the simulator stopped: %v\n%s", runErr, stderr.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("the simulator did not connect\n%s", stderr.String())
				}
			}
			cancel()
			<-done
			// The next case waits for its own connection alone.
			for deadline := time.Now().Add(10 * time.Second); len(r.Links().Hub().Connected()) > 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the simulator's connection stayed after it stopped")
				}
			}
		})
	}
}

// demoWorldTitle is the title of a fresh copy of the demo world.
func demoWorldTitle(t *testing.T) string {
	t.Helper()
	w, closeWorld, err := demoWorld(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer closeWorld()
	if w.Info().Title == "" || w.Info().ClientID != demo.ClientID {
		t.Fatalf("unexpected demo world %+v", w.Info())
	}
	return w.Info().Title
}

// lockedBuffer is a bytes.Buffer the simulator's logger and the test may
// use at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
