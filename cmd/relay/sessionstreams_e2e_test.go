package main

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/server/signin"
)

// sessionStreams opens, with a console session's token, an SSE stream
// (with the cookie) and a gRPC stream (with the token as the key) on the
// account's world, and returns channels that receive once each ends.
func sessionStreams(t *testing.T, tr *testRelay, token, clientID string) (sse <-chan struct{}, grpcEnd <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tr.Base+"/hooks/subscribe?clientId="+clientID, nil)
	req.AddCookie(&http.Cookie{Name: signin.CookieName, Value: token})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SSE stream with the session: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "event: connected") {
	}
	sseEnded := make(chan struct{})
	go func() {
		for sc.Scan() {
		}
		close(sseEnded)
	}()
	gs, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeHooks(metadata.AppendToOutgoingContext(ctx, "x-api-key", token), &relayv1.SubscribeHooksRequest{ClientId: clientID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs.Recv(); err != nil {
		t.Fatalf("gRPC stream with the session: %v", err)
	}
	grpcEnded := make(chan error, 1)
	go func() {
		for {
			if _, err := gs.Recv(); err != nil {
				grpcEnded <- err
				return
			}
		}
	}()
	return sseEnded, grpcEnded
}

// waitStreamsEnd fails unless both streams end by deadline, the gRPC one
// with Unauthenticated.
func waitStreamsEnd(t *testing.T, what string, sse <-chan struct{}, grpcEnd <-chan error, deadline time.Time) {
	t.Helper()
	select {
	case <-sse:
	case <-time.After(time.Until(deadline)):
		t.Fatalf("the SSE stream of the session was still open %s", what)
	}
	select {
	case err := <-grpcEnd:
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("the gRPC stream of the session ended with %v, want Unauthenticated", err)
		}
	case <-time.After(time.Until(deadline)):
		t.Fatalf("the gRPC stream of the session was still open %s", what)
	}
}

// TestSessionEndEndsItsStreams: signing out ends, within a second, the
// event streams opened with the session (SSE with the cookie, gRPC with
// the token), and so does the session's idle expiry; a stream opened
// with the account's API key goes on.
func TestSessionEndEndsItsStreams(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.SignInRateLimit = 0; c.SessionIdleTimeout = 3 * time.Second })
	made := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Guild", "password": guildPassword})
	if made.Status != http.StatusOK {
		t.Fatalf("create account: %d %s", made.Status, made.Body)
	}
	key := made.Data(t)["key"].(string)
	if r := tr.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"clientId": "guild-world", "title": "Guild", "seed": "empty"}); r.Status != http.StatusOK {
		t.Fatalf("POST /worlds: %d %s", r.Status, r.Body)
	}
	c := newConsoleClient(t, tr)
	if r := c.signIn("Guild", guildPassword); r.Status != http.StatusOK {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	sse, grpcEnd := sessionStreams(t, tr, c.token(), "guild-world")
	// A stream of the account's API key, which no sign-out ends.
	keyCtx, cancelKey := context.WithCancel(context.Background())
	defer cancelKey()
	ks, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeHooks(metadata.AppendToOutgoingContext(keyCtx, "x-api-key", key), &relayv1.SubscribeHooksRequest{ClientId: "guild-world"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Recv(); err != nil {
		t.Fatal(err)
	}
	if r := c.do(http.MethodDelete, signin.PathSession, nil, true); r.Status != http.StatusOK {
		t.Fatalf("sign out: %d %s", r.Status, r.Body)
	}
	waitStreamsEnd(t, "a second after signing out", sse, grpcEnd, time.Now().Add(time.Second))
	keyEnded := make(chan error, 1)
	go func() {
		_, err := ks.Recv()
		keyEnded <- err
	}()
	select {
	case err := <-keyEnded:
		t.Fatalf("the API key's stream ended with the session: %v", err)
	case <-time.After(300 * time.Millisecond):
	}

	// Idle expiry: the session is unused for 3 s while its streams are
	// open.
	if r := c.signIn("Guild", guildPassword); r.Status != http.StatusOK {
		t.Fatalf("sign in again: %d %s", r.Status, r.Body)
	}
	signedIn := time.Now()
	sse, grpcEnd = sessionStreams(t, tr, c.token(), "guild-world")
	waitStreamsEnd(t, "a second after the session's idle time", sse, grpcEnd, signedIn.Add(3*time.Second+time.Second))
}

// TestAccountFirstKeyCreatorHidden: an account's keys do not show the
// operator's key that made the account's first key as its creator (the
// operator still sees it), while a key the account made shows its maker.
func TestAccountFirstKeyCreatorHidden(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	made := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Guild"})
	if made.Status != http.StatusOK {
		t.Fatalf("create account: %d %s", made.Status, made.Body)
	}
	key := made.Data(t)["key"].(string)
	if r := tr.Do(http.MethodPost, "/keys", key, nil, map[string]any{"name": "bot", "scopes": []string{"entity:read"}}); r.Status != http.StatusOK {
		t.Fatalf("create key: %d %s", r.Status, r.Body)
	}
	creators := func(caller string) map[string]string {
		t.Helper()
		r := tr.Do(http.MethodGet, "/keys", caller, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET /keys: %d %s", r.Status, r.Body)
		}
		out := map[string]string{}
		for _, k := range r.Data(t)["keys"].([]any) {
			k := k.(map[string]any)
			by, _ := k["createdBy"].(string)
			out[k["name"].(string)+"/"+k["id"].(string)] = by
		}
		return out
	}
	var adminID, operatorKeyID string
	for name, by := range creators(key) {
		switch {
		case strings.HasPrefix(name, "admin/"):
			adminID = strings.TrimPrefix(name, "admin/")
			if by != "" {
				t.Fatalf("the account sees its first key made by %q, want no creator", by)
			}
		case strings.HasPrefix(name, "bot/"):
			if by == "" {
				t.Fatal("the account's own key shows no creator")
			}
		}
	}
	for name, by := range creators(tr.AdminKey) {
		if strings.HasSuffix(name, "/"+adminID) {
			operatorKeyID = by
		}
	}
	if operatorKeyID == "" {
		t.Fatal("the operator does not see who made the account's first key")
	}
	// Revoking the first key answers it without its creator too.
	if r := tr.Do(http.MethodDelete, "/keys/"+adminID, key, nil, nil); r.Status != http.StatusOK || strings.Contains(string(r.Body), operatorKeyID) {
		t.Fatalf("revoke the first key: %d %s", r.Status, r.Body)
	}
}
