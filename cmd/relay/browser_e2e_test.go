package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestBrowserEventSource runs a web page of another origin in headless
// Chromium: it trades its key for a stream ticket (a cross-origin POST with
// x-api-key, so a preflight first), reads a refusal's error text, and
// follows an actor with an EventSource. The network then drops and stays
// down while the actor changes; once it is back, the page's EventSource
// reconnects by itself with the same ticket and Last-Event-ID, and the page
// has every change exactly once, in order.
func TestBrowserEventSource(t *testing.T) {
	requireChromium(t)
	t.Parallel()
	// The page's own server, on its own origin.
	var pageHTML string
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(pageHTML))
	}))
	t.Cleanup(site.Close)
	tr := startTestRelay(t, func(c *node.Config) { c.CORSOrigins = site.URL })
	// The page reaches the relay through a proxy the test can cut.
	proxy := startCutProxy(t, tr.Addr())
	key, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "page", Scopes: []string{"events:subscribe"}, ScopedUserId: "Alice"})

	pageHTML = `<!doctype html><html><body><pre id="out">starting</pre><script>
const relay = ` + strconv.Quote("http://"+proxy.addr()) + `;
const key = ` + strconv.Quote(key) + `;
const state = window.state = {opens: 0, errors: 0, closed: false, events: []};
const show = () => { document.getElementById("out").textContent = JSON.stringify(state, null, 1); };
(async () => {
  // A refusal is readable too: its status, its error text, its request id.
  const bad = await fetch(relay + "/stream-tickets", {method: "POST", headers: {"x-api-key": "rk_wrong"}});
  state.refusal = {status: bad.status, error: (await bad.json()).error, requestId: bad.headers.get("x-request-id")};
  const r = await fetch(relay + "/stream-tickets", {method: "POST", headers: {"x-api-key": key, "content-type": "application/json"}, body: "{}"});
  state.ticketStatus = r.status;
  const ticket = (await r.json()).data.ticket;
  const es = new EventSource(relay + "/actor/subscribe?actorUuid=` + relaytest.AriaUUID + `&ticket=" + encodeURIComponent(ticket));
  es.onopen = () => { state.opens++; show(); };
  es.addEventListener("actor-update", (e) => {
    state.events.push({id: Number(e.lastEventId), hp: JSON.parse(e.data).changes.system.attributes.hp.value});
    show();
  });
  es.onerror = () => { state.errors++; state.closed = es.readyState === EventSource.CLOSED; show(); };
})().catch((e) => { state.failure = String(e); show(); });
</script></body></html>`

	b := startBrowser(t)
	p := b.newPage()
	p.navigate(site.URL + "/page.html")
	p.waitFor("the stream to open", `window.state && state.opens === 1`)
	var refusal struct {
		Status    int    `json:"status"`
		Error     string `json:"error"`
		RequestID string `json:"requestId"`
	}
	p.must(`state.refusal`, &refusal)
	if refusal.Status != http.StatusUnauthorized || refusal.Error != "Invalid API key" || !strings.HasPrefix(refusal.RequestID, "stream-ticket_") {
		t.Fatalf("the page read the refusal as %+v", refusal)
	}

	for hp := 1; hp <= 3; hp++ {
		tr.setHP(relaytest.AriaUUID, hp)
	}
	p.waitFor("three events", `state.events.length === 3`)

	// The network drops and stays down while Aria changes three times.
	proxy.hold(true)
	proxy.cut()
	p.waitFor("the page to see the drop", `state.errors >= 1`)
	for hp := 4; hp <= 6; hp++ {
		tr.setHP(relaytest.AriaUUID, hp)
	}
	proxy.hold(false)
	p.waitFor("the EventSource to reconnect and resume", `state.opens === 2 && state.events.length === 6`)
	tr.setHP(relaytest.AriaUUID, 7)
	p.waitFor("a live event after the reconnect", `state.events.length === 7`)
	p.screenshot("eventsource-resumed")

	var got struct {
		Closed bool `json:"closed"`
		Events []struct {
			ID int `json:"id"`
			HP int `json:"hp"`
		} `json:"events"`
	}
	p.must(`state`, &got)
	if got.Closed {
		t.Fatal("the EventSource gave up")
	}
	for i, ev := range got.Events {
		if ev.HP != i+1 || (i > 0 && ev.ID <= got.Events[i-1].ID) {
			t.Fatalf("events with a gap, a duplicate or out of order: %+v", got.Events)
		}
	}
}

// TestConsole signs in to the web console in headless Chromium with the
// admin key and uses every view: the worlds, a pairing code, a key created
// and then revoked (checked through the API), and a world's live events,
// where a change made through the API appears. Screenshots of each view are
// saved (see screenshotsEnv).
func TestConsole(t *testing.T) {
	requireChromium(t)
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.Console = true })
	b := startBrowser(t)
	p := b.newPage()
	p.navigate(tr.Base + "/console")
	p.screenshot("01-sign-in")

	// A wrong key is refused with the relay's own words.
	p.typeInto("#signin-key", "rk_wrong")
	p.click("#signin-button")
	p.waitFor("the refusal", `document.getElementById("signin-error").textContent === "Invalid API key"`)

	p.typeInto("#signin-key", tr.AdminKey)
	p.click("#signin-button")
	p.waitFor("the worlds", `document.querySelector('#worlds-table tr[data-client="demo"]')`)
	if row := p.text(`#worlds-table tr[data-client="demo"]`); !strings.Contains(row, "Demo Tavern") || !strings.Contains(row, "online") {
		t.Fatalf("the demo world's row reads %q", row)
	}
	// The worlds render before the key's own record is read: wait for it.
	p.waitFor("the signed-in name", `document.getElementById("who-name").textContent !== ""`)
	if who := p.text("#who-name"); who != "Signed in as admin ("+tr.AdminKey[3:11]+"…)" {
		t.Fatalf("signed in as %q", who)
	}
	// The key is kept in this tab only.
	var kept struct {
		Session string `json:"session"`
		Local   int    `json:"local"`
		Cookie  string `json:"cookie"`
	}
	p.must(`({session: sessionStorage.getItem("relay-console-key"), local: localStorage.length, cookie: document.cookie})`, &kept)
	if kept.Session != tr.AdminKey || kept.Local != 0 || kept.Cookie != "" {
		t.Fatalf("the key is kept as %+v", kept)
	}
	p.screenshot("02-worlds")

	// A pairing code for a new world.
	p.click(`.tab[data-view="pairing"]`)
	p.click("#pair-create")
	p.waitFor("the pairing code", `document.getElementById("pair-code").textContent.length === 6`)
	if code := p.text("#pair-code"); !regexp.MustCompile(`^[A-HJKMNP-Z2-9]{6}$`).MatchString(code) {
		t.Fatalf("pairing code %q", code)
	}
	p.screenshot("03-pairing")

	// A key for a bot: two scopes, the demo world, acting as Alice.
	p.click(`.tab[data-view="keys"]`)
	p.waitFor("the key form", `document.querySelectorAll("#key-scopes input").length === 15`)
	p.typeInto("#key-name", "console-bot")
	p.click(`#key-scopes input[value="entity:read"]`)
	p.click(`#key-scopes input[value="events:subscribe"]`)
	p.click(`#key-worlds input[value="demo"]`)
	p.typeInto("#key-user", "Alice")
	p.click("#key-create")
	p.waitFor("the new key", `document.getElementById("new-key").textContent.startsWith("rk_")`)
	p.waitFor("the new key in the list", `document.querySelector('#keys-table tr[data-name="console-bot"]')`)
	newKey := p.text("#new-key")
	p.screenshot("04-keys")
	// The key works, with what the form gave it and nothing more.
	if r := tr.Do("GET", "/get", newKey, relaytest.Q("uuid", relaytest.AriaUUID), nil); r.Status != http.StatusOK {
		t.Fatalf("the console's key reads: %d %s", r.Status, r.Body)
	}
	if r := tr.Do("GET", "/get", newKey, relaytest.Q("uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusForbidden {
		t.Fatalf("the console's key, acting as Alice, reads the goblin: %d %s", r.Status, r.Body)
	}
	if r := tr.Do("PUT", "/update", newKey, nil, map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"name": "x"}}); r.Status != http.StatusForbidden {
		t.Fatalf("the console's key writes: %d %s", r.Status, r.Body)
	}
	var listed []any
	for _, k := range tr.Do("GET", "/keys", tr.AdminKey, nil, nil).Data(t)["keys"].([]any) {
		if k.(map[string]any)["name"] == "console-bot" {
			listed = append(listed, k)
		}
	}
	if len(listed) != 1 || fmt.Sprint(listed[0].(map[string]any)["scopes"]) != "[entity:read events:subscribe]" ||
		fmt.Sprint(listed[0].(map[string]any)["clientIds"]) != "[demo]" || listed[0].(map[string]any)["scopedUserId"] != "Alice" {
		t.Fatalf("the relay lists the console's key as %v", listed)
	}

	// Revoking takes two clicks; then the key is refused.
	revoke := `#keys-table tr[data-name="console-bot"] button[data-revoke]`
	p.click(revoke)
	p.waitFor("the armed revoke button", `document.querySelector('`+revoke+`').textContent === "Confirm revoke"`)
	p.click(revoke)
	p.waitFor("the key revoked", `document.querySelector('#keys-table tr[data-name="console-bot"]').textContent.includes("revoked")`)
	if r := tr.Do("GET", "/get", newKey, relaytest.Q("uuid", relaytest.AriaUUID), nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("the revoked key reads: %d %s", r.Status, r.Body)
	}

	// The demo world's hooks, live: a change through the API appears.
	p.click(`.tab[data-view="events"]`)
	p.click("#ev-start")
	p.waitFor("the stream to be live", `document.getElementById("ev-dot").classList.contains("live")`)
	tr.setHP(relaytest.AriaUUID, 9)
	p.waitFor("the update event", `[...document.querySelectorAll('#ev-log li[data-name="updateActor"]')].some((li) => li.textContent.includes("`+relaytest.AriaUUID+`"))`)
	p.screenshot("05-events")

	// Signing out forgets the key.
	p.click("#signout")
	p.waitFor("the sign-in form", `!document.getElementById("view-signin").hidden`)
	kept.Session = "unread"
	p.must(`({session: sessionStorage.getItem("relay-console-key") || "", local: localStorage.length, cookie: document.cookie})`, &kept)
	if kept.Session != "" || kept.Local != 0 || kept.Cookie != "" {
		t.Fatalf("after signing out the key is kept as %+v", kept)
	}
}

// TestConsoleCanBeTurnedOff: with --console=false, /console is an unknown
// path like any other.
func TestConsoleCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.Console = false })
	if r := tr.Do("GET", "/console", "", nil, nil); r.Status != http.StatusNotFound || r.ErrorText(t) != "Not found: GET /console" {
		t.Fatalf("GET /console with the console off: %d %s", r.Status, r.Body)
	}
	on := startTestRelay(t, func(c *node.Config) { c.Console = true })
	if r := on.Do("GET", "/console", "", nil, nil); r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /console: %d %v", r.Status, r.Header)
	}
}

// TestConsoleApprovesRequests opens the console's approval pages in
// headless Chromium, as a game master does from a key request's
// approvalUrl and a pair request's pairUrl: signed in with the admin key,
// they approve a key request with one of its two scopes unchecked, and a
// tabletop's pairing; the asker's poll then gets exactly that.
func TestConsoleApprovesRequests(t *testing.T) {
	requireChromium(t)
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.Console = true })
	resp := tr.Do("POST", "/auth/key-request", "", nil, map[string]any{"appName": "Initiative bot", "appDescription": "Tracks turns",
		"scopes": []string{"entity:read", "encounter:read"}, "clientIds": []string{"demo"}})
	if resp.Status != http.StatusCreated {
		t.Fatalf("open key request: %d %s", resp.Status, resp.Body)
	}
	approvalURL, code := resp.JSON(t)["approvalUrl"].(string), resp.JSON(t)["code"].(string)

	b := startBrowser(t)
	p := b.newPage()
	p.navigate(approvalURL)
	p.typeInto("#signin-key", tr.AdminKey)
	p.click("#signin-button")
	p.waitFor("the key request", `document.getElementById("approve-app").textContent === "Initiative bot"`)
	if got := p.text("#approve-scopes"); got != "entity:readencounter:read" {
		t.Fatalf("the page offers the scopes %q", got)
	}
	p.click(`#approve-scopes input[value="encounter:read"]`)
	p.screenshot("06-approve-key-request")
	p.click("#approve-yes")
	p.waitFor("the approval", `document.getElementById("approve-done").textContent.startsWith("Approved")`)
	got := tr.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil).JSON(t)
	if got["status"] != "approved" || fmt.Sprint(got["scopes"]) != "[entity:read]" || fmt.Sprint(got["clientIds"]) != "[demo]" {
		t.Fatalf("the tool's poll got %v", got)
	}

	resp = tr.Do("POST", "/auth/pair-request", "", nil, map[string]any{"worldId": "w-console", "worldTitle": "Console World",
		"systemId": "dnd5e", "foundryVersion": "13.345", "serverFingerprint": "fp-console"})
	pairURL, pairCode := resp.JSON(t)["pairUrl"].(string), resp.JSON(t)["code"].(string)
	// The same tab is still signed in.
	p.navigate(pairURL)
	p.waitFor("the pair request", `document.getElementById("approve-world-title").textContent === "Console World"`)
	p.screenshot("07-approve-pair-request")
	p.click("#approve-yes")
	p.waitFor("the approval", `document.getElementById("approve-done").textContent.startsWith("Approved")`)
	st := tr.Do("GET", "/auth/pair-request/"+pairCode+"/status", "", nil, nil).JSON(t)
	if st["status"] != "approved" || len(fmt.Sprint(st["pairingCode"])) != 6 {
		t.Fatalf("the module's poll got %v", st)
	}

	// The web flow: the page links back to the tool with the exchange code,
	// which the tool trades for the key.
	resp = tr.Do("POST", "/auth/key-request", "", nil, map[string]any{"appName": "Web tool", "scopes": []string{"entity:read"},
		"callbackUrl": "https://tool.example.org/done?x=1"})
	p.navigate(resp.JSON(t)["approvalUrl"].(string))
	p.waitFor("the web-flow request", `document.getElementById("approve-app").textContent === "Web tool"`)
	p.click("#approve-yes")
	p.waitFor("the link back to the tool", `!!document.getElementById("approve-callback")`)
	var href string
	p.must(`document.getElementById("approve-callback").href`, &href)
	back, err := url.Parse(href)
	if err != nil || back.Host != "tool.example.org" || back.Query().Get("x") != "1" || back.Query().Get("code") == "" {
		t.Fatalf("the link back to the tool is %q", href)
	}
	x := tr.Do("POST", "/auth/key-request/exchange", "", nil, map[string]any{"code": back.Query().Get("code")})
	if k, _ := x.JSON(t)["apiKey"].(string); x.Status != http.StatusOK || !strings.HasPrefix(k, "rk_") {
		t.Fatalf("exchange: %d %s", x.Status, x.Body)
	}
}

// TestConsoleAccounts runs the console's Accounts page in headless
// Chromium as the operator: it creates an account (its key shown once,
// and working), suspends it (the key is refused) and resumes it (the key
// works again). An account's own key sees no Accounts tab.
func TestConsoleAccounts(t *testing.T) {
	requireChromium(t)
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.Console = true })
	b := startBrowser(t)
	p := b.newPage()
	p.navigate(tr.Base + "/console")
	p.typeInto("#signin-key", tr.AdminKey)
	p.click("#signin-button")
	p.waitFor("the Accounts tab", `!document.getElementById("tab-accounts").hidden`)
	p.click(`.tab[data-view="accounts"]`)
	p.waitFor("the operator's account", `document.querySelector('#accounts-table tr[data-account="operator"]')`)

	p.typeInto("#account-name", "Console Guild")
	p.click("#account-create")
	p.waitFor("the new account's key", `document.getElementById("new-account-key").textContent.startsWith("rk_")`)
	p.waitFor("the new account in the list", `document.querySelector('#accounts-table tr[data-name="Console Guild"]')`)
	key := p.text("#new-account-key")
	p.screenshot("accounts-01-created")
	if r := tr.Do("GET", "/keys", key, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("the console's new account key: %d %s", r.Status, r.Body)
	}
	// A taken name is refused with the relay's words.
	p.typeInto("#account-name", "console guild")
	p.click("#account-create")
	p.waitFor("the refusal", `document.getElementById("account-error").textContent.includes("taken")`)

	row := `#accounts-table tr[data-name="Console Guild"]`
	p.click(row + ` button[data-account-action="suspend"]`)
	p.waitFor("the account suspended", `document.querySelector('`+row+`').textContent.includes("suspended")`)
	if r := tr.Do("GET", "/keys", key, nil, nil); r.Status != http.StatusForbidden {
		t.Fatalf("the suspended account's key: %d %s", r.Status, r.Body)
	}
	p.screenshot("accounts-02-suspended")
	p.click(row + ` button[data-account-action="resume"]`)
	p.waitFor("the account resumed", `document.querySelector('`+row+`').textContent.includes("active")`)
	if r := tr.Do("GET", "/keys", key, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("the resumed account's key: %d %s", r.Status, r.Body)
	}

	// The account's own key sees no Accounts tab.
	p.click("#signout")
	p.waitFor("the sign-in form", `!document.getElementById("view-signin").hidden`)
	p.typeInto("#signin-key", key)
	p.click("#signin-button")
	p.waitFor("the signed-in view", `!document.getElementById("tabs").hidden`)
	var hidden bool
	p.must(`document.getElementById("tab-accounts").hidden`, &hidden)
	if !hidden {
		t.Fatal("an account's own key sees the Accounts tab")
	}
}

// TestConsolePasswordSession runs the console's flows with a password
// sign-in in headless Chromium: a wrong password is refused in the
// relay's words; a game master signs in, the session cookie out of the
// page's reach; makes a pairing code with which a tabletop links a world
// into the account; makes a key for a bot; approves a bot's key request;
// a write without the CSRF token is refused; signing out ends the
// session. Then the operator signs in with a password and suspends the
// account, whose keys are refused from then on.
func TestConsolePasswordSession(t *testing.T) {
	requireChromium(t)
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.Console = true; c.SignInRateLimit = 0 })
	r := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Guild", "password": guildPassword})
	if r.Status != http.StatusOK {
		t.Fatalf("create account: %d %s", r.Status, r.Body)
	}
	guildID, guildKey := r.Data(t)["account"].(map[string]any)["id"].(string), r.Data(t)["key"].(string)
	const operatorPassword = "the operator's own password"
	if r := tr.Do(http.MethodPatch, "/accounts/operator", tr.AdminKey, nil, map[string]any{"password": operatorPassword}); r.Status != http.StatusOK {
		t.Fatalf("set the operator's password: %d %s", r.Status, r.Body)
	}

	b := startBrowser(t)
	p := b.newPage()
	p.navigate(tr.Base + "/console")
	p.typeInto("#signin-name", "Guild")
	p.typeInto("#signin-password", "not the password")
	p.click("#signin-password-button")
	p.waitFor("the refusal", `document.getElementById("signin-password-error").textContent === "Wrong account name or password"`)
	p.typeInto("#signin-password", guildPassword)
	p.click("#signin-password-button")
	p.waitFor("the console", `document.getElementById("who-name").textContent === "Signed in to Guild"`)
	p.waitFor("no worlds yet", `!document.getElementById("worlds-empty").hidden`)
	var kept struct {
		Session string `json:"session"`
		Cookie  string `json:"cookie"`
		Tab     bool   `json:"accountsTab"`
	}
	p.must(`({session: sessionStorage.getItem("relay-console-key") || "", cookie: document.cookie, accountsTab: !document.getElementById("tab-accounts").hidden})`, &kept)
	if kept.Session != "" || kept.Cookie != "" || kept.Tab {
		t.Fatalf("signed in with a password, the page keeps %+v", kept)
	}
	p.screenshot("08-password-session")

	// A pairing code, with which a tabletop links a world into the account.
	p.click(`.tab[data-view="pairing"]`)
	p.click("#pair-create")
	p.waitFor("the pairing code", `document.getElementById("pair-code").textContent.length === 6`)
	tt := tr.tabletop()
	res, err := tt.Pair(context.Background(), p.text("#pair-code"))
	if err != nil {
		t.Fatalf("pair with the console's code: %v", err)
	}
	if err := tt.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.Drop)
	p.click(`.tab[data-view="worlds"]`)
	p.waitFor("the linked world", `document.querySelector('#worlds-table tr[data-client="`+res.ClientID+`"]')`)
	if r := tr.Do(http.MethodGet, "/clients", guildKey, nil, nil); !strings.Contains(string(r.Body), res.ClientID) {
		t.Fatalf("the account's worlds lack %s: %s", res.ClientID, r.Body)
	}

	// A key for a bot, in the account.
	p.click(`.tab[data-view="keys"]`)
	p.waitFor("the key form", `document.querySelectorAll("#key-scopes input").length > 0`)
	p.typeInto("#key-name", "session-bot")
	p.click(`#key-scopes input[value="entity:read"]`)
	p.click("#key-create")
	p.waitFor("the new key", `document.getElementById("new-key").textContent.startsWith("rk_")`)
	if names := keyNames(t, tr.Do(http.MethodGet, "/keys", guildKey, nil, nil)); strings.Join(names, ",") != "admin,session-bot" {
		t.Fatalf("the account's keys: %v", names)
	}

	// A bot's key request, approved on the page the request names; the
	// session goes on in the new page.
	kr := tr.Do(http.MethodPost, "/auth/key-request", "", nil, map[string]any{"appName": "Session bot", "scopes": []string{"entity:read"}})
	p.navigate(kr.JSON(t)["approvalUrl"].(string))
	p.waitFor("the key request", `document.getElementById("approve-app").textContent === "Session bot"`)
	p.click("#approve-yes")
	p.waitFor("the approval", `document.getElementById("approve-done").textContent.startsWith("Approved")`)
	st := tr.Do(http.MethodGet, "/auth/key-request/"+kr.JSON(t)["code"].(string)+"/status", "", nil, nil).JSON(t)
	botKey, _ := st["apiKey"].(string)
	if st["status"] != "approved" || !tr.keyWorks(botKey) {
		t.Fatalf("the bot's poll got %v", st)
	}
	if names := keyNames(t, tr.Do(http.MethodGet, "/keys", guildKey, nil, nil)); strings.Join(names, ",") != "admin,session-bot,Session bot" {
		t.Fatalf("the approved key is not the account's: %v", names)
	}

	// A write without the CSRF token is refused, even from the page.
	var refused struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	}
	p.must(`fetch("/keys", {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify({name: "forged", scopes: ["entity:read"]})})
		.then(async (r) => ({status: r.status, error: (await r.json()).error}))`, &refused)
	if refused.Status != http.StatusForbidden || !strings.Contains(refused.Error, "CSRF") {
		t.Fatalf("a write without the CSRF token: %+v", refused)
	}

	// Signing out ends the session: the cookie no longer signs anything.
	p.click("#signout")
	p.waitFor("the sign-in form", `!document.getElementById("view-signin").hidden`)
	var after int
	p.must(`fetch("/keys").then((r) => r.status)`, &after)
	if after != http.StatusUnauthorized {
		t.Fatalf("after signing out, GET /keys answers %d", after)
	}

	// The operator signs in with a password and suspends the account.
	p.typeInto("#signin-name", "operator")
	p.typeInto("#signin-password", operatorPassword)
	p.click("#signin-password-button")
	p.waitFor("the accounts tab", `!document.getElementById("tab-accounts").hidden`)
	p.click(`.tab[data-view="accounts"]`)
	p.waitFor("the account", `document.querySelector('#accounts-table tr[data-account="`+guildID+`"] button[data-account-action="suspend"]')`)
	p.click(`#accounts-table tr[data-account="` + guildID + `"] button[data-account-action="suspend"]`)
	p.waitFor("the suspension", `document.querySelector('#accounts-table tr[data-account="`+guildID+`"]').textContent.includes("suspended")`)
	p.screenshot("09-accounts-suspended")
	if r := tr.Do(http.MethodGet, "/keys", guildKey, nil, nil); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "suspended") {
		t.Fatalf("the suspended account's key: %d %s", r.Status, r.Body)
	}
}

// TestConsoleAuditPage signs in to the console with an account's key and
// reads its audit page: its own key's creation and a refusal are listed,
// but neither the operator's own actions nor any refusal of the sign-in
// itself, and the action filter narrows the list.
func TestConsoleAuditPage(t *testing.T) {
	requireChromium(t)
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.Console = true })
	_, gmKey := createAccount(t, tr, "Console GM")
	for _, name := range []string{"bot-1", "bot-2"} {
		if r := tr.Do("POST", "/keys", gmKey, nil, map[string]any{"name": name, "scopes": []string{"entity:read"}}); r.Status != http.StatusOK {
			t.Fatalf("create key: %d %s", r.Status, r.Body)
		}
	}
	if r := tr.Do("DELETE", "/keys/nosuchkey", gmKey, nil, nil); r.Status != http.StatusNotFound {
		t.Fatalf("revoke an unknown key: %d %s", r.Status, r.Body)
	}
	tr.Do("POST", "/keys", tr.AdminKey, nil, map[string]any{"name": "operator-only", "scopes": []string{"entity:read"}})

	b := startBrowser(t)
	p := b.newPage()
	p.navigate(tr.Base + "/console")
	p.typeInto("#signin-key", gmKey)
	p.click("#signin-button")
	p.waitFor("the tabs", `!document.getElementById("tabs").hidden`)
	p.click(`.tab[data-view="audit"]`)
	// The two keys made and the refused revocation; the console's
	// sign-in itself leaves no refused record (it decides whether to show
	// the Accounts tab without asking for the accounts).
	p.waitFor("the records", `document.querySelectorAll('#audit-table tbody tr').length === 3`)
	if text := p.text("#audit-table"); !strings.Contains(text, `"bot-1"`) || !strings.Contains(text, "refused") || strings.Contains(text, "account.list") || strings.Contains(text, "operator-only") {
		t.Fatalf("the audit page reads %q", text)
	}
	var tabHidden bool
	p.must(`document.getElementById("tab-accounts").hidden`, &tabHidden)
	if !tabHidden {
		t.Fatal("the Accounts tab shows to an account's key")
	}
	p.screenshot("audit-01-records")

	p.typeInto("#audit-action", "key.revoke")
	p.click("#audit-show")
	p.waitFor("the filtered records", `document.querySelectorAll('#audit-table tbody tr').length === 1`)
	if row := p.text("#audit-table tbody tr"); !strings.Contains(row, "key.revoke") || !strings.Contains(row, "nosuchkey") {
		t.Fatalf("the filtered record reads %q", row)
	}
}
