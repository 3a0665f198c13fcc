package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server/signin"
)

// consoleClient is a browser's view of the relay: a cookie jar, and the
// CSRF token its page was told at sign-in.
type consoleClient struct {
	t    *testing.T
	base string
	http *http.Client
	csrf string
}

func newConsoleClient(t *testing.T, tr *testRelay) *consoleClient {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &consoleClient{t: t, base: tr.Base, http: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
}

// do sends a request with the jar's cookies; withCSRF adds the session's
// CSRF token.
func (c *consoleClient) do(method, path string, body any, withCSRF bool) relaytest.Response {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if withCSRF {
		req.Header.Set(signin.CSRFHeader, c.csrf)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return relaytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// signIn signs in with a name and password and keeps the CSRF token.
func (c *consoleClient) signIn(name, password string) relaytest.Response {
	c.t.Helper()
	r := c.do(http.MethodPost, signin.PathSession, map[string]string{"name": name, "password": password}, false)
	if r.Status == http.StatusOK {
		c.csrf, _ = r.JSON(c.t)["csrfToken"].(string)
	}
	return r
}

// token is the session cookie's value in the jar.
func (c *consoleClient) token() string {
	req, _ := http.NewRequest(http.MethodGet, c.base+"/", nil)
	for _, ck := range c.http.Jar.Cookies(req.URL) {
		if ck.Name == signin.CookieName {
			return ck.Value
		}
	}
	return ""
}

// withCookie sends a request with a session token as the cookie, outside
// any jar: a token kept after it ended.
func withCookie(t *testing.T, tr *testRelay, method, path, token, csrf string) relaytest.Response {
	t.Helper()
	req, _ := http.NewRequest(method, tr.Base+path, nil)
	req.AddCookie(&http.Cookie{Name: signin.CookieName, Value: token})
	if csrf != "" {
		req.Header.Set(signin.CSRFHeader, csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return relaytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

const guildPassword = "correct horse battery"

// keyNames lists the names of the keys an answer of GET /keys lists.
func keyNames(t *testing.T, r relaytest.Response) []string {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("GET /keys: %d %s", r.Status, r.Body)
	}
	var names []string
	for _, k := range r.Data(t)["keys"].([]any) {
		names = append(names, k.(map[string]any)["name"].(string))
	}
	return names
}

// TestConsoleSessions: an account made with a password signs in to the
// console; the same answer for an unknown name and a wrong password; the
// session's cookie is HttpOnly and SameSite=Strict; it acts as the
// account's admin and no more; a write without the CSRF token is refused
// with nothing made; and the session ends on sign-out, when the operator
// sets a new password, and when the account is suspended (it stays ended
// after the account is resumed).
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.SignInRateLimit = 0 })

	// A bad password is refused, naming it, and no account is made.
	r := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Short", "password": "short"})
	if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), "'password' must be at least 10 characters") {
		t.Fatalf("a short password: %d %s", r.Status, r.Body)
	}
	if strings.Contains(string(tr.Do(http.MethodGet, "/accounts", tr.AdminKey, nil, nil).Body), "Short") {
		t.Fatal("an account was made with a refused password")
	}
	r = tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Guild", "password": guildPassword})
	if r.Status != http.StatusOK {
		t.Fatalf("create account: %d %s", r.Status, r.Body)
	}
	guildID := r.Data(t)["account"].(map[string]any)["id"].(string)
	guildKey := r.Data(t)["key"].(string)
	_, otherKey := createAccount(t, tr, "Other")
	_ = otherKey

	c := newConsoleClient(t, tr)
	// Not signed in yet.
	if r := c.do(http.MethodGet, signin.PathSession, nil, false); r.Status != http.StatusUnauthorized {
		t.Fatalf("GET the session before signing in: %d %s", r.Status, r.Body)
	}
	// The same answer for a wrong password and an unknown name.
	wrong := c.signIn("Guild", "not the password at all")
	unknown := c.signIn("Nobody", "not the password at all")
	if wrong.Status != http.StatusUnauthorized || unknown.Status != wrong.Status || string(unknown.Body) != string(wrong.Body) ||
		wrong.ErrorText(t) != "Wrong account name or password" {
		t.Fatalf("wrong password: %d %s; unknown name: %d %s", wrong.Status, wrong.Body, unknown.Status, unknown.Body)
	}
	// An account without a password cannot sign in with one.
	if r := c.signIn("Other", "anything at all here"); string(r.Body) != string(wrong.Body) {
		t.Fatalf("an account without a password: %d %s", r.Status, r.Body)
	}
	// A form of another site cannot sign anyone in.
	req, _ := http.NewRequest(http.MethodPost, tr.Base+signin.PathSession, strings.NewReader("name=Guild&password=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("a form's sign-in: %v %v", resp, err)
	}

	r = c.signIn("guild", guildPassword) // names ignore case
	if r.Status != http.StatusOK || c.csrf == "" {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	if acct := r.JSON(t)["account"].(map[string]any); acct["id"] != guildID || acct["name"] != "Guild" {
		t.Fatalf("signed in as %v", acct)
	}
	set := r.Header.Get("Set-Cookie")
	for _, want := range []string{signin.CookieName + "=rs_", "Path=/", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(set, want) {
			t.Fatalf("the session cookie %q lacks %q", set, want)
		}
	}
	if strings.Contains(set, "Secure") {
		t.Fatalf("the session cookie over plain HTTP without an https public URL: %q", set)
	}
	if r := c.do(http.MethodGet, signin.PathSession, nil, false); r.Status != http.StatusOK || r.JSON(t)["csrfToken"] != c.csrf {
		t.Fatalf("GET the session: %d %s", r.Status, r.Body)
	}

	// The session is the account's admin: it sees the account's keys and
	// only those, and may not manage accounts.
	if names := keyNames(t, c.do(http.MethodGet, "/keys", nil, false)); strings.Join(names, ",") != "admin" {
		t.Fatalf("the session lists the keys %v", names)
	}
	if r := c.do(http.MethodGet, "/accounts", nil, false); r.Status != http.StatusForbidden {
		t.Fatalf("the session lists accounts: %d %s", r.Status, r.Body)
	}
	// A write without the CSRF token is refused and makes nothing.
	bot := map[string]any{"name": "bot", "scopes": []string{"entity:read"}}
	if r := c.do(http.MethodPost, "/keys", bot, false); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), signin.CSRFHeader) {
		t.Fatalf("a write without the CSRF token: %d %s", r.Status, r.Body)
	}
	if r := c.do(http.MethodPost, "/keys", bot, false); r.Status != http.StatusForbidden {
		t.Fatalf("again: %d", r.Status)
	}
	req, _ = http.NewRequest(http.MethodPost, tr.Base+"/keys", strings.NewReader(`{"name":"bot","scopes":["entity:read"]}`))
	req.Header.Set(signin.CSRFHeader, "wrong-token")
	req.AddCookie(&http.Cookie{Name: signin.CookieName, Value: c.token()})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a write with a wrong CSRF token: %v %v", resp, err)
	}
	if names := keyNames(t, tr.Do(http.MethodGet, "/keys", guildKey, nil, nil)); strings.Join(names, ",") != "admin" {
		t.Fatalf("a refused write made keys: %v", names)
	}
	// With it, the key is made in the account.
	r = c.do(http.MethodPost, "/keys", bot, true)
	if r.Status != http.StatusOK {
		t.Fatalf("a write with the CSRF token: %d %s", r.Status, r.Body)
	}
	botKey := r.Data(t)["key"].(string)
	if names := keyNames(t, tr.Do(http.MethodGet, "/keys", guildKey, nil, nil)); strings.Join(names, ",") != "admin,bot" {
		t.Fatalf("the account's keys: %v", names)
	}
	if names := keyNames(t, tr.Do(http.MethodGet, "/keys", otherKey, nil, nil)); strings.Join(names, ",") != "admin" {
		t.Fatalf("the other account sees the keys %v", names)
	}
	if !tr.keyWorks(botKey) {
		t.Fatal("the key the session made does not work")
	}

	// Only hashes are stored: neither the token nor the password is in
	// relay.db.
	db, err := sql.Open("sqlite", filepath.Join(tr.DataDir, "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored strings.Builder
	rows, err := db.Query(`SELECT key, value FROM signin_entries`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var v []byte
		_ = rows.Scan(&k, &v)
		stored.WriteString(k + "=" + string(v) + "\n")
	}
	rows.Close()
	parts := strings.Split(c.token(), ".")
	secret := parts[len(parts)-1]
	if s := stored.String(); !strings.Contains(s, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(s, guildPassword) || secret == "" || strings.Contains(s, secret) {
		t.Fatalf("the sign-in state holds a secret:\n%s", s)
	}

	// The account changes its own password: the old one is needed.
	if r := tr.Do(http.MethodPost, "/account/password", guildKey, nil, map[string]any{"oldPassword": "wrong password!", "newPassword": "a new password here"}); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "'oldPassword'") {
		t.Fatalf("a change with the wrong old password: %d %s", r.Status, r.Body)
	}
	if r := c.do(http.MethodGet, "/keys", nil, false); r.Status != http.StatusOK {
		t.Fatalf("a refused change ended the session: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/account/password", guildKey, nil, map[string]any{"oldPassword": guildPassword, "newPassword": "short"}); r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), "'newPassword'") {
		t.Fatalf("a short new password: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/account/password", guildKey, nil, map[string]any{"oldPassword": guildPassword, "newPassword": "a new password here"}); r.Status != http.StatusOK {
		t.Fatalf("change the password: %d %s", r.Status, r.Body)
	}
	// A changed password ends the account's sessions.
	if r := c.do(http.MethodGet, "/keys", nil, false); r.Status != http.StatusUnauthorized || r.ErrorText(t) != "Session has ended: sign in again" {
		t.Fatalf("a session after the password changed: %d %s", r.Status, r.Body)
	}
	if r := c.signIn("Guild", guildPassword); r.Status != http.StatusUnauthorized {
		t.Fatalf("the old password signs in: %d %s", r.Status, r.Body)
	}
	// The operator sets one.
	if r := tr.Do(http.MethodPatch, "/accounts/"+guildID, tr.AdminKey, nil, map[string]any{"password": "tiny"}); r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), "'password'") {
		t.Fatalf("PATCH a short password: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPatch, "/accounts/"+guildID, guildKey, nil, map[string]any{"password": guildPassword}); r.Status != http.StatusForbidden {
		t.Fatalf("the account PATCHes itself: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPatch, "/accounts/"+guildID, tr.AdminKey, nil, map[string]any{"password": guildPassword}); r.Status != http.StatusOK {
		t.Fatalf("PATCH the password: %d %s", r.Status, r.Body)
	}
	if r := c.signIn("Guild", guildPassword); r.Status != http.StatusOK {
		t.Fatalf("sign in with the operator's password: %d %s", r.Status, r.Body)
	}

	// Every door takes the session while it lasts: an event stream with
	// the cookie, a stream ticket it asked for, and gRPC with its token.
	token, csrf := c.token(), c.csrf
	stream, cancel := tr.startStream("/hooks/subscribe", "", nil, http.Header{"Cookie": {signin.CookieName + "=" + token}})
	streamBody, _ := io.ReadAll(io.LimitReader(stream.Body, 512))
	cancel()
	// The account has no world yet: authenticated, the stream asks which.
	if stream.StatusCode != http.StatusBadRequest || !strings.Contains(string(streamBody), "'clientId' is required") {
		t.Fatalf("an event stream with the session: %d %s", stream.StatusCode, streamBody)
	}
	ticketResp := c.do(http.MethodPost, "/stream-tickets", map[string]any{}, true)
	if ticketResp.Status != http.StatusOK {
		t.Fatalf("a stream ticket of the session: %d %s", ticketResp.Status, ticketResp.Body)
	}
	ticket := ticketResp.Data(t)["ticket"].(string)
	stream, cancel = tr.startStream("/hooks/subscribe", "", relaytest.Q("ticket", ticket), nil)
	streamBody, _ = io.ReadAll(io.LimitReader(stream.Body, 512))
	cancel()
	if stream.StatusCode != http.StatusBadRequest {
		t.Fatalf("an event stream with the session's ticket: %d %s", stream.StatusCode, streamBody)
	}
	grpcCtx := func() context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", token)
	}
	if _, err := relayv1.NewKeyServiceClient(tr.Conn).ListKeys(grpcCtx(), &relayv1.ListKeysRequest{}); err != nil {
		t.Fatalf("gRPC with the session's token: %v", err)
	}

	// Signing out needs the CSRF token too; then the token is refused.
	if r := c.do(http.MethodDelete, signin.PathSession, nil, false); r.Status != http.StatusForbidden {
		t.Fatalf("sign out without the CSRF token: %d %s", r.Status, r.Body)
	}
	if r := c.do(http.MethodDelete, signin.PathSession, nil, true); r.Status != http.StatusOK || !strings.Contains(r.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("sign out: %d %s %v", r.Status, r.Body, r.Header)
	}
	if r := withCookie(t, tr, http.MethodGet, "/keys", token, ""); r.Status != http.StatusUnauthorized {
		t.Fatalf("a signed-out session: %d %s", r.Status, r.Body)
	}
	if r := withCookie(t, tr, http.MethodPost, "/pairing-codes", token, csrf); r.Status != http.StatusUnauthorized {
		t.Fatalf("a signed-out session writes: %d %s", r.Status, r.Body)
	}
	if _, err := relayv1.NewKeyServiceClient(tr.Conn).ListKeys(grpcCtx(), &relayv1.ListKeysRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC with a signed-out session's token: %v", err)
	}
	stream, cancel = tr.startStream("/hooks/subscribe", "", relaytest.Q("ticket", ticket), nil)
	cancel()
	if stream.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a signed-out session's stream ticket: %d", stream.StatusCode)
	}
	stream, cancel = tr.startStream("/hooks/subscribe", "", nil, http.Header{"Cookie": {signin.CookieName + "=" + token}})
	cancel()
	if stream.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an event stream with a signed-out session: %d", stream.StatusCode)
	}

	// Suspension ends the session, on every route; resuming does not
	// bring it back.
	if r := c.signIn("Guild", guildPassword); r.Status != http.StatusOK {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	token = c.token()
	if r := tr.Do(http.MethodPost, "/accounts/"+guildID+"/suspend", tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.Status, r.Body)
	}
	if r := withCookie(t, tr, http.MethodGet, "/keys", token, ""); r.Status != http.StatusUnauthorized {
		t.Fatalf("a suspended account's session: %d %s", r.Status, r.Body)
	}
	if r := c.signIn("Guild", guildPassword); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "suspended") {
		t.Fatalf("a suspended account signs in: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/accounts/"+guildID+"/resume", tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.Status, r.Body)
	}
	if r := withCookie(t, tr, http.MethodGet, "/keys", token, ""); r.Status != http.StatusUnauthorized {
		t.Fatalf("a session after the account was resumed: %d %s", r.Status, r.Body)
	}

	// Deleting the account ends its sessions and forgets its password.
	if r := c.signIn("Guild", guildPassword); r.Status != http.StatusOK {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	token = c.token()
	if r := tr.Do(http.MethodDelete, "/accounts/"+guildID, tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if r := withCookie(t, tr, http.MethodGet, "/keys", token, ""); r.Status != http.StatusUnauthorized {
		t.Fatalf("a deleted account's session: %d %s", r.Status, r.Body)
	}
	if r := c.signIn("Guild", guildPassword); string(r.Body) != string(wrong.Body) {
		t.Fatalf("a deleted account signs in: %d %s", r.Status, r.Body)
	}
}

// TestSignInLimits: failed sign-ins lock a name out (whether or not an
// account has it) after signin.LockoutFailures, even for the right
// password; sign-ins are limited per address; an account holds at most
// signin.MaxSessionsPerAccount sessions, the least recently used ending
// first; and a session unused for the idle time ends.
func TestSignInLimits(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.SignInRateLimit = 0; c.SessionIdleTimeout = 2 * time.Second })
	if r := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Guild", "password": guildPassword}); r.Status != http.StatusOK {
		t.Fatalf("create account: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Locked", "password": guildPassword}); r.Status != http.StatusOK {
		t.Fatalf("create account: %d %s", r.Status, r.Body)
	}
	c := newConsoleClient(t, tr)

	// The least recently used session ends first.
	var first string
	for i := range signin.MaxSessionsPerAccount + 1 {
		if r := c.signIn("Guild", guildPassword); r.Status != http.StatusOK {
			t.Fatalf("sign-in %d: %d %s", i, r.Status, r.Body)
		}
		if i == 0 {
			first = c.token()
		}
	}
	if r := withCookie(t, tr, http.MethodGet, "/keys", first, ""); r.Status != http.StatusUnauthorized {
		t.Fatalf("the oldest of %d sessions: %d %s", signin.MaxSessionsPerAccount+1, r.Status, r.Body)
	}
	if r := c.do(http.MethodGet, "/keys", nil, false); r.Status != http.StatusOK {
		t.Fatalf("the newest session: %d %s", r.Status, r.Body)
	}

	// Lock-out, the same for a known name and an unknown one.
	for _, name := range []string{"Locked", "Nobody"} {
		for i := range signin.LockoutFailures {
			if r := c.signIn(name, "a wrong password"); r.Status != http.StatusUnauthorized {
				t.Fatalf("failure %d of %s: %d %s", i, name, r.Status, r.Body)
			}
		}
	}
	locked, nobody := c.signIn("Locked", guildPassword), c.signIn("nobody", guildPassword)
	if locked.Status != http.StatusTooManyRequests || !strings.Contains(locked.ErrorText(t), "locked") || string(locked.Body) != string(nobody.Body) {
		t.Fatalf("locked out: %d %s; unknown name: %d %s", locked.Status, locked.Body, nobody.Status, nobody.Body)
	}
	// Another name is not affected.
	if r := c.signIn("Guild", guildPassword); r.Status != http.StatusOK {
		t.Fatalf("another name: %d %s", r.Status, r.Body)
	}

	// A session unused for the idle time ends.
	time.Sleep(2500 * time.Millisecond)
	if r := c.do(http.MethodGet, "/keys", nil, false); r.Status != http.StatusUnauthorized || !strings.Contains(r.ErrorText(t), "without use") {
		t.Fatalf("an idle session: %d %s", r.Status, r.Body)
	}

	// Per address.
	limited := startTestRelay(t, func(c *node.Config) { c.SignInRateLimit = 2 })
	lc := newConsoleClient(t, limited)
	for range 2 {
		lc.signIn("Nobody", "a wrong password")
	}
	if r := lc.signIn("Nobody", "a wrong password"); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("the third sign-in of a minute: %d %s %v", r.Status, r.Body, r.Header)
	}
}

// TestSignupByInvite: sign-up is closed by default; with --signup invite
// only the operator makes invites, each makes one account (with the
// default quotas and its first admin key, answered once, and a password
// when given), a refused sign-up leaves the invite usable, and revoked
// invites are refused; with --signup open no invite is needed, and
// sign-ups are limited per address.
func TestSignupByInvite(t *testing.T) {
	t.Parallel()
	closed := startTestRelay(t)
	if r := closed.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": "Guild"}); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "closed") {
		t.Fatalf("sign-up on a closed relay: %d %s", r.Status, r.Body)
	}

	tr := startTestRelay(t, func(c *node.Config) { c.Signup = signin.SignupInvite; c.SignupRateLimit = 0 })
	_, gmKey := createAccount(t, tr, "Existing")
	// Only the operator makes and sees invites.
	if r := tr.Do(http.MethodPost, "/invites", gmKey, nil, map[string]any{}); r.Status != http.StatusForbidden {
		t.Fatalf("an account makes an invite: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodGet, "/invites", gmKey, nil, nil); r.Status != http.StatusForbidden {
		t.Fatalf("an account lists invites: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/invites", tr.AdminKey, nil, map[string]any{"expiresInSeconds": 5}); r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), "'expiresInSeconds'") {
		t.Fatalf("an invite of 5 s: %d %s", r.Status, r.Body)
	}
	newInvite := func() (id, code string) {
		t.Helper()
		r := tr.Do(http.MethodPost, "/invites", tr.AdminKey, nil, map[string]any{})
		if r.Status != http.StatusOK {
			t.Fatalf("make an invite: %d %s", r.Status, r.Body)
		}
		inv := r.Data(t)["invite"].(map[string]any)
		if inv["status"] != "open" {
			t.Fatalf("a new invite: %s", r.Body)
		}
		return inv["id"].(string), r.Data(t)["code"].(string)
	}
	id, code := newInvite()
	if listed := tr.Do(http.MethodGet, "/invites", tr.AdminKey, nil, nil); listed.Status != http.StatusOK || strings.Contains(string(listed.Body), code) || !strings.Contains(string(listed.Body), id) {
		t.Fatalf("the invites are listed as %d %s", listed.Status, listed.Body)
	}

	signup := func(body map[string]any) relaytest.Response {
		return tr.Do(http.MethodPost, signin.PathSignup, "", nil, body)
	}
	accounts := func() string {
		d, _ := json.Marshal(tr.Do(http.MethodGet, "/accounts", tr.AdminKey, nil, nil).Data(t))
		return string(d)
	}
	before := accounts()
	for _, c := range []struct {
		body   map[string]any
		status int
		text   string
	}{
		{map[string]any{"name": "Guild"}, http.StatusBadRequest, "'invite' is required"},
		{map[string]any{"name": "Guild", "invite": "inv_0000000000000000.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}, http.StatusForbidden, "The invite is unknown, used, revoked or expired"},
		{map[string]any{"name": "Guild", "invite": id}, http.StatusForbidden, "The invite is unknown, used, revoked or expired"},
		{map[string]any{"name": "", "invite": code}, http.StatusBadRequest, "'name' is required"},
		{map[string]any{"name": strings.Repeat("x", 65), "invite": code}, http.StatusBadRequest, "'name' is longer than 64 characters"},
		{map[string]any{"name": "Guild", "password": "short", "invite": code}, http.StatusBadRequest, "'password' must be at least 10 characters"},
		{map[string]any{"name": "existing", "invite": code}, http.StatusConflict, "Account name is taken"},
		{map[string]any{"name": 7, "invite": code}, http.StatusBadRequest, "'name' must be a string"},
	} {
		if r := signup(c.body); r.Status != c.status || !strings.Contains(r.ErrorText(t), c.text) {
			t.Fatalf("sign-up %v: %d %s, want %d %q", c.body, r.Status, r.Body, c.status, c.text)
		}
	}
	if after := accounts(); after != before {
		t.Fatalf("refused sign-ups changed the accounts:\n%s\n%s", before, after)
	}
	// The invite is still open after the refusals: it makes one account.
	r := signup(map[string]any{"name": "Guild", "password": guildPassword, "invite": code})
	if r.Status != http.StatusCreated {
		t.Fatalf("sign up: %d %s", r.Status, r.Body)
	}
	acct := r.JSON(t)["account"].(map[string]any)
	key := r.JSON(t)["key"].(string)
	if acct["name"] != "Guild" || !strings.HasPrefix(key, "rk_") || !tr.keyWorks(key) {
		t.Fatalf("sign-up answered %s", r.Body)
	}
	if names := keyNames(t, tr.Do(http.MethodGet, "/keys", key, nil, nil)); strings.Join(names, ",") != "admin" {
		t.Fatalf("the new account's keys: %v", names)
	}
	got := tr.Do(http.MethodGet, "/accounts/"+acct["id"].(string), tr.AdminKey, nil, nil)
	if got.Status != http.StatusOK || !strings.Contains(string(got.Body), `"quotas":{"worlds":0,"keys":0`) {
		t.Fatalf("the new account: %d %s", got.Status, got.Body)
	}
	if r := newConsoleClient(t, tr).signIn("Guild", guildPassword); r.Status != http.StatusOK {
		t.Fatalf("sign in with the sign-up's password: %d %s", r.Status, r.Body)
	}
	// Used once.
	if r := signup(map[string]any{"name": "Guild 2", "invite": code}); r.Status != http.StatusForbidden {
		t.Fatalf("an invite used twice: %d %s", r.Status, r.Body)
	}
	listed := tr.Do(http.MethodGet, "/invites", tr.AdminKey, nil, nil).Data(t)["invites"].([]any)
	if inv := listed[0].(map[string]any); inv["id"] != id || inv["status"] != "used" || inv["accountId"] != acct["id"] {
		t.Fatalf("the used invite is listed as %v", inv)
	}
	// Revoked.
	id2, code2 := newInvite()
	if r := tr.Do(http.MethodDelete, "/invites/"+id2, gmKey, nil, nil); r.Status != http.StatusForbidden {
		t.Fatalf("an account revokes an invite: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodDelete, "/invites/inv_ffffffffffffffff", tr.AdminKey, nil, nil); r.Status != http.StatusNotFound || r.ErrorText(t) != "Invite not found: inv_ffffffffffffffff" {
		t.Fatalf("revoke an unknown invite: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodDelete, "/invites/"+id2, tr.AdminKey, nil, nil); r.Status != http.StatusOK || r.Data(t)["invite"].(map[string]any)["status"] != "revoked" {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	if r := signup(map[string]any{"name": "Guild 3", "invite": code2}); r.Status != http.StatusForbidden {
		t.Fatalf("a revoked invite: %d %s", r.Status, r.Body)
	}

	// Open: no invite, limited per address.
	open := startTestRelay(t, func(c *node.Config) { c.Signup = signin.SignupOpen; c.SignupRateLimit = 2 })
	for i, name := range []string{"One", "Two"} {
		if r := open.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": name}); r.Status != http.StatusCreated {
			t.Fatalf("open sign-up %d: %d %s", i, r.Status, r.Body)
		}
	}
	if r := open.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": "Three"}); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a third sign-up from one address: %d %s", r.Status, r.Body)
	}
}

// TestSignupModeChecked: a --signup the relay does not know is refused at
// start, naming the three it knows.
func TestSignupModeChecked(t *testing.T) {
	t.Parallel()
	cfg := node.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.Signup = "sometimes"
	n, err := node.Start(context.Background(), cfg, slog.New(slog.DiscardHandler), io.Discard)
	var cerr *node.ConfigError
	if err == nil {
		_ = n.Close(context.Background())
	}
	if !errors.As(err, &cerr) || !strings.Contains(err.Error(), `signup must be closed, invite or open, not "sometimes"`) {
		t.Fatalf("start with --signup sometimes: %v", err)
	}
}

// TestSignInsAreAudited: a refused and an accepted password sign-in, a
// sign-out and sign-ups (refused and made) each leave an audit record
// with the right account and outcome, never the password; the account
// sees its own records, and the refused name's record only the operator.
func TestSignInsAreAudited(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.Signup = signin.SignupOpen })
	const password = "a password long enough"
	r := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Audited", "password": password})
	if r.Status != http.StatusOK {
		t.Fatalf("create account: %d %s", r.Status, r.Body)
	}
	id, key := r.Data(t)["account"].(map[string]any)["id"].(string), r.Data(t)["key"].(string)
	c := newConsoleClient(t, tr)
	if r := c.signIn("Audited", "not the password at all"); r.Status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d %s", r.Status, r.Body)
	}
	if r := c.signIn("Audited", password); r.Status != http.StatusOK {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	if r := c.do(http.MethodDelete, signin.PathSession, nil, true); r.Status != http.StatusOK {
		t.Fatalf("sign out: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": "Newcomer", "password": password}); r.Status != http.StatusCreated {
		t.Fatalf("sign up: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": "newcomer"}); r.Status != http.StatusConflict {
		t.Fatalf("sign up with a taken name: %d %s", r.Status, r.Body)
	}

	all, _ := auditRecords(t, tr.Relay, tr.AdminKey, "action", "sign-in", "limit", "100")
	refused := findRecord(all, "sign-in", "refused")
	if refused == nil || refused["target"] != "Audited" || refused["accountId"] != nil && refused["accountId"] != "" {
		t.Fatalf("the refused sign-in's record: %v", refused)
	}
	if ok := findRecord(all, "sign-in", "ok"); ok == nil || ok["accountId"] != id {
		t.Fatalf("the sign-in's record: %v", ok)
	}
	ups, _ := auditRecords(t, tr.Relay, tr.AdminKey, "action", "sign-up", "limit", "100")
	if findRecord(ups, "sign-up", "ok") == nil || findRecord(ups, "sign-up", "refused") == nil {
		t.Fatalf("the sign-ups' records: %v", ups)
	}
	own, _ := auditRecords(t, tr.Relay, key, "limit", "1000")
	if findRecord(own, "sign-in", "ok") == nil || findRecord(own, "sign-out", "ok") == nil {
		t.Fatalf("the account's own records lack its sign-in or sign-out: %v", own)
	}
	if findRecord(own, "sign-in", "refused") != nil {
		t.Fatalf("the account sees a refused sign-in, which belongs to no account: %v", own)
	}
	for _, rec := range append(all, own...) {
		if strings.Contains(fmt.Sprint(rec), password) {
			t.Fatalf("a record holds the password: %v", rec)
		}
	}
}
