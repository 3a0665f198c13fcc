package shared_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server/signin"
)

// sessionCall sends a request to a node with a console session's cookie
// and, when csrf is not empty, its CSRF token.
func sessionCall(t *testing.T, r *relaytest.Relay, method, path, token, csrf, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, r.Base+path, rd)
	req.AddCookie(&http.Cookie{Name: signin.CookieName, Value: token})
	if csrf != "" {
		req.Header.Set(signin.CSRFHeader, csrf)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// TestRelaysShareSessionsAndInvites: a console session opened on one
// node is accepted by the other, and signed out there it is refused on
// the first; an invite made on one node makes one account through the
// other and no second one anywhere; a password set through one node
// signs in through the other; a suspension through one node ends the
// session on both.
func TestRelaysShareSessionsAndInvites(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 2)
	nodes := make([]*relaytest.Relay, 2)
	for i := range nodes {
		nodes[i] = relaytest.Start(t, func(cfg *node.Config) {
			cfg.Shared = &node.SharedState{JetStream: c.JetStream(i), NodeName: string(rune('a' + i))}
			cfg.Signup = signin.SignupInvite
			cfg.SignInRateLimit = 0
			cfg.SignupRateLimit = 0
		})
	}
	a, b := nodes[0], nodes[1]

	// An invite made on a makes one account through b.
	inv := a.Do(http.MethodPost, "/invites", a.AdminKey, nil, map[string]any{})
	if inv.Status != http.StatusOK {
		t.Fatalf("invite on a: %d %s", inv.Status, inv.Body)
	}
	code := inv.Data(t)["code"].(string)
	up := b.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": "Guild", "password": "correct horse battery", "invite": code})
	if up.Status != http.StatusCreated {
		t.Fatalf("sign up on b: %d %s", up.Status, up.Body)
	}
	guildID := up.JSON(t)["account"].(map[string]any)["id"].(string)
	if again := a.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": "Guild 2", "invite": code}); again.Status != http.StatusForbidden {
		t.Fatalf("the invite again on a: %d %s", again.Status, again.Body)
	}

	// The password set through b signs in through a; the session works on b.
	in := a.Do(http.MethodPost, signin.PathSession, "", nil, map[string]any{"name": "Guild", "password": "correct horse battery"})
	if in.Status != http.StatusOK {
		t.Fatalf("sign in on a: %d %s", in.Status, in.Body)
	}
	csrf := in.JSON(t)["csrfToken"].(string)
	var token string
	for _, ck := range (&http.Response{Header: in.Header}).Cookies() {
		if ck.Name == signin.CookieName {
			token = ck.Value
		}
	}
	if st, body := sessionCall(t, b, http.MethodGet, "/keys", token, "", ""); st != http.StatusOK || !strings.Contains(body, `"admin"`) {
		t.Fatalf("the session on b: %d %s", st, body)
	}
	if st, body := sessionCall(t, b, http.MethodPost, "/keys", token, csrf, `{"name":"bot","scopes":["entity:read"]}`); st != http.StatusOK {
		t.Fatalf("a write of the session on b: %d %s", st, body)
	}
	if st, body := sessionCall(t, b, http.MethodDelete, signin.PathSession, token, csrf, ""); st != http.StatusOK {
		t.Fatalf("sign out on b: %d %s", st, body)
	}
	if st, body := sessionCall(t, a, http.MethodGet, "/keys", token, "", ""); st != http.StatusUnauthorized {
		t.Fatalf("the signed-out session on a: %d %s", st, body)
	}

	// A suspension through b ends a session opened on a.
	in = a.Do(http.MethodPost, signin.PathSession, "", nil, map[string]any{"name": "Guild", "password": "correct horse battery"})
	for _, ck := range (&http.Response{Header: in.Header}).Cookies() {
		if ck.Name == signin.CookieName {
			token = ck.Value
		}
	}
	if st, body := sessionCall(t, a, http.MethodGet, "/keys", token, "", ""); st != http.StatusOK {
		t.Fatalf("the new session on a: %d %s", st, body)
	}
	if r := b.Do(http.MethodPost, "/accounts/"+guildID+"/suspend", a.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("suspend on b: %d %s", r.Status, r.Body)
	}
	if st, body := sessionCall(t, a, http.MethodGet, "/keys", token, "", ""); st == http.StatusOK {
		t.Fatalf("the suspended account's session on a: %d %s", st, body)
	}
}
