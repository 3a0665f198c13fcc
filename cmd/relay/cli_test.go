package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server/signin"
)

// cli runs the relay command line and returns stdout and stderr.
func cli(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// TestKeysCLI is not parallel: a subtest sets RELAY_API_KEY.
func TestKeysCLI(t *testing.T) {
	tr := startTestRelay(t)
	keyFile := filepath.Join(tr.DataDir, "admin.key")
	common := []string{"--addr", tr.Addr(), "--admin-key-file", keyFile}

	out, errOut, err := cli(t, append([]string{"keys", "create", "--name", "bot", "--scopes", "dnd5e,events:subscribe,entity:read", "--client", "demo", "--user", "Alice"}, common...)...)
	if err != nil {
		t.Fatalf("create: %v\n%s", err, errOut)
	}
	key := strings.TrimSpace(out)
	if !regexp.MustCompile(`^rk_[A-Za-z0-9_-]{43}$`).MatchString(key) || strings.Count(out, "\n") != 1 {
		t.Fatalf("stdout must hold only the key, got %q", out)
	}
	if !strings.Contains(errOut, "Created key") {
		t.Fatalf("stderr %q", errOut)
	}
	// The key acts as Alice: the Goblin is hidden from it.
	if r := tr.Do(http.MethodGet, "/get", key, relaytest.Q("uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusForbidden {
		t.Fatalf("bot key read the Goblin: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodGet, "/get", key, relaytest.Q("uuid", relaytest.AriaUUID), nil); r.Status != http.StatusOK {
		t.Fatalf("bot key read Aria: %d %s", r.Status, r.Body)
	}

	out, errOut, err = cli(t, append([]string{"keys", "list"}, common...)...)
	if err != nil || !strings.Contains(out, "bot") || !strings.Contains(out, "admin") {
		t.Fatalf("list: %v\n%s%s", err, out, errOut)
	}
	// The last column records what created each key: the bootstrap for the
	// admin key, the admin key (the CLI's key) for the bot.
	var id, adminID, botCreator string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[1] == "bot":
			id, botCreator = f[0], f[len(f)-1]
		case len(f) > 1 && f[1] == "admin":
			adminID = f[0]
			if f[len(f)-1] != "bootstrap" {
				t.Errorf("admin key created by %q, want bootstrap:\n%s", f[len(f)-1], out)
			}
		}
	}
	if !strings.Contains(out, "CREATED BY") || adminID == "" || botCreator != adminID {
		t.Fatalf("bot key created by %q, want the admin key %q:\n%s", botCreator, adminID, out)
	}
	if _, errOut, err = cli(t, append(append([]string{"keys", "revoke"}, common...), id)...); err != nil {
		t.Fatalf("revoke: %v\n%s", err, errOut)
	}
	// Revocation takes effect on the very next request.
	if r := tr.Do(http.MethodGet, "/get", key, relaytest.Q("uuid", relaytest.AriaUUID), nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("revoked key: %d %s", r.Status, r.Body)
	}

	// RELAY_API_KEY stands in for the key file; --scopes all grants every scope.
	t.Run("env", func(t *testing.T) {
		t.Setenv("RELAY_API_KEY", tr.AdminKey)
		out, errOut, err := cli(t, "keys", "create", "--addr", tr.Addr(), "--name", "everything", "--scopes", "all", "--client-user", "demo=Bob")
		if err != nil {
			t.Fatalf("create: %v\n%s", err, errOut)
		}
		if r := tr.Do(http.MethodGet, "/get", strings.TrimSpace(out), relaytest.Q("uuid", relaytest.AriaUUID), nil); r.Status != http.StatusOK || r.Data(t)["name"] != "Aria Vale" || len(r.Data(t)) != 4 {
			t.Fatalf("Bob sees Aria as LIMITED: %d %s", r.Status, r.Body)
		}
	})

	// A key bound to a world cannot create a key beyond it, and the CLI
	// says why.
	boundFile := filepath.Join(t.TempDir(), "bound.key")
	out, errOut, err = cli(t, append([]string{"keys", "create", "--name", "demo admin", "--scopes", "all", "--client", "demo"}, common...)...)
	if err != nil {
		t.Fatalf("create bound admin: %v\n%s", err, errOut)
	}
	if err := os.WriteFile(boundFile, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = cli(t, "keys", "create", "--addr", tr.Addr(), "--admin-key-file", boundFile, "--name", "escape", "--scopes", "all")
	if err == nil || !strings.Contains(err.Error(), "API key may only create keys for its own worlds: demo") || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("bound key created an unbound key: %v", err)
	}

	// Usage mistakes are clear.
	if _, _, err := cli(t, append([]string{"keys", "create", "--name", "x"}, common...)...); err == nil || !strings.Contains(err.Error(), "--scopes") {
		t.Fatalf("missing scopes: %v", err)
	}
	if _, _, err := cli(t, append([]string{"keys", "create", "--name", "x", "--scopes", "wizardry"}, common...)...); err == nil || !strings.Contains(err.Error(), "wizardry") {
		t.Fatalf("unknown scope: %v", err)
	}
	if _, _, err := cli(t, "keys", "list", "--addr", tr.Addr(), "--admin-key-file", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing key file accepted")
	}
}

// TestKeysCLIClientList: --client takes a comma-separated list as well as
// repeats, and the key is bound to each world named.
func TestKeysCLIClientList(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	common := []string{"--addr", tr.Addr(), "--admin-key-file", filepath.Join(tr.DataDir, "admin.key")}
	for _, args := range [][]string{{"--client", "demo,other-world"}, {"--client", "demo", "--client", "other-world"}} {
		out, errOut, err := cli(t, append(append([]string{"keys", "create", "--name", "two worlds", "--scopes", "entity:read"}, args...), common...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut)
		}
		key := strings.TrimSpace(out)
		if r := tr.Do(http.MethodGet, "/get", key, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil); r.Status != http.StatusOK {
			t.Fatalf("%v: the key cannot read its world: %d %s", args, r.Status, r.Body)
		}
	}
	out, _, err := cli(t, append([]string{"keys", "list"}, common...)...)
	if err != nil || strings.Count(out, "demo,other-world") != 2 {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if _, _, err := cli(t, append([]string{"keys", "create", "--name", "x", "--scopes", "entity:read", "--client", "demo,,x"}, common...)...); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("an empty clientId was taken: %v", err)
	}
}

// TestInvitesCLI runs `relay invites` against a running relay with
// --signup invite: create prints only the code, with which one sign-up
// works; list shows the invite used by the account; revoke ends another.
func TestInvitesCLI(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.Signup = signin.SignupInvite })
	common := []string{"--addr", tr.Addr(), "--admin-key-file", filepath.Join(tr.DataDir, "admin.key")}
	run := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, err := cli(t, append(args, common...)...)
		if err != nil {
			t.Fatalf("relay %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out, errOut
	}
	out, errOut := run("invites", "create", "--expires-in", "1h")
	code := strings.TrimSpace(out)
	id := regexp.MustCompile(`inv_[0-9a-f]{16}`).FindString(errOut)
	if !regexp.MustCompile(`^inv_[0-9a-f]{16}\.[A-Za-z0-9_-]{32}$`).MatchString(code) || id == "" || !strings.HasPrefix(code, id+".") {
		t.Fatalf("stdout must hold only the code: %q; stderr %q", out, errOut)
	}
	r := tr.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": "Guild", "invite": code})
	if r.Status != http.StatusCreated {
		t.Fatalf("sign up with the CLI's invite: %d %s", r.Status, r.Body)
	}
	acct := r.JSON(t)["account"].(map[string]any)["id"].(string)
	if out, _ := run("invites", "list"); !strings.Contains(out, id) || !strings.Contains(out, "used") || !strings.Contains(out, acct) {
		t.Fatalf("list:\n%s", out)
	}
	out, _ = run("invites", "create")
	second := strings.TrimSpace(out)
	secondID, _, _ := strings.Cut(second, ".")
	if _, errOut, err := cli(t, append(append([]string{"invites", "revoke"}, common...), secondID)...); err != nil || !strings.Contains(errOut, "revoked") {
		t.Fatalf("revoke: %q", errOut)
	}
	if r := tr.Do(http.MethodPost, signin.PathSignup, "", nil, map[string]any{"name": "Other", "invite": second}); r.Status != http.StatusForbidden {
		t.Fatalf("a revoked invite: %d %s", r.Status, r.Body)
	}
	if _, _, err := cli(t, append(append([]string{"invites", "revoke"}, common...), "inv_0000000000000000")...); err == nil || !strings.Contains(err.Error(), "Invite not found") {
		t.Fatalf("revoke an unknown invite: %v", err)
	}
}

// TestAccountsCLI runs `relay accounts` against a running relay with the
// bootstrap key: create prints only the new account's key, which works;
// list and show describe it; suspend refuses its key; resume and delete.
func TestAccountsCLI(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	common := []string{"--addr", tr.Addr(), "--admin-key-file", filepath.Join(tr.DataDir, "admin.key")}
	run := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, err := cli(t, append(args, common...)...)
		if err != nil {
			t.Fatalf("relay %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out, errOut
	}
	run2 := func(verb, id string) (string, string) {
		t.Helper()
		out, errOut, err := cli(t, append(append([]string{"accounts", verb}, common...), id)...)
		if err != nil {
			t.Fatalf("relay accounts %s %s: %v\n%s", verb, id, err, errOut)
		}
		return out, errOut
	}

	out, errOut := run("accounts", "create", "--name", "Guild", "--quota-worlds", "2")
	key := strings.TrimSpace(out)
	if !regexp.MustCompile(`^rk_[A-Za-z0-9_-]{43}$`).MatchString(key) {
		t.Fatalf("stdout must hold only the key, got %q", out)
	}
	id := regexp.MustCompile(`acc_[0-9a-f]{16}`).FindString(errOut)
	if id == "" {
		t.Fatalf("stderr names no account: %q", errOut)
	}
	if r := tr.Do(http.MethodGet, "/keys", key, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("the new account's key: %d %s", r.Status, r.Body)
	}
	if out, _ := run("accounts", "list"); !strings.Contains(out, id) || !strings.Contains(out, "operator") {
		t.Fatalf("list:\n%s", out)
	}
	if out, _ := run2("show", id); !strings.Contains(out, "Guild") || !strings.Contains(out, "keys") || !regexp.MustCompile(`keys +1 of `).MatchString(out) || !regexp.MustCompile(`worlds +0 of 2\n`).MatchString(out) {
		t.Fatalf("show:\n%s", out)
	}
	run2("suspend", id)
	if r := tr.Do(http.MethodGet, "/keys", key, nil, nil); r.Status != http.StatusForbidden {
		t.Fatalf("the suspended account's key: %d %s", r.Status, r.Body)
	}
	run2("resume", id)
	if r := tr.Do(http.MethodGet, "/keys", key, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("the resumed account's key: %d %s", r.Status, r.Body)
	}
	run2("delete", id)
	if r := tr.Do(http.MethodGet, "/keys", key, nil, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("the deleted account's key: %d %s", r.Status, r.Body)
	}
	// A duplicate name is refused with the relay's message.
	run("accounts", "create", "--name", "Guild")
	if _, _, err := cli(t, append([]string{"accounts", "create", "--name", "guild"}, common...)...); err == nil || !strings.Contains(err.Error(), "taken") {
		t.Fatalf("duplicate name: %v", err)
	}
}

// TestWorldsCLI runs `relay worlds create` and `relay worlds delete` with
// an account's key: create prints only the new world's clientId, the
// world belongs to the account, delete removes it, and a refusal carries
// the relay's message.
func TestWorldsCLI(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	_, key := createAccount(t, tr, "Makers")
	keyFile := filepath.Join(t.TempDir(), "makers.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--addr", tr.Addr(), "--admin-key-file", keyFile}
	out, errOut, err := cli(t, append([]string{"worlds", "create", "--title", "Made by the CLI", "--seed", "demo", "--client", "cli-world"}, common...)...)
	if err != nil || strings.TrimSpace(out) != "cli-world" {
		t.Fatalf("worlds create: %q %q %v", out, errOut, err)
	}
	if got := tr.clientIDs(key); !slices.Equal(got, []string{"cli-world"}) {
		t.Fatalf("the account's worlds: %v", got)
	}
	// The list is an aligned table, header first.
	out, errOut, err = cli(t, append([]string{"worlds", "list"}, common...)...)
	if want := "CLIENT ID  TITLE            SYSTEM\ncli-world  Made by the CLI  dnd5e\n"; err != nil || out != want {
		t.Fatalf("worlds list: %v %s\n%q, want\n%q", err, errOut, out, want)
	}
	// A list command takes no arguments: one given is refused, not ignored.
	for _, cmd := range [][]string{{"worlds", "list"}, {"keys", "list"}, {"invites", "list"}, {"accounts", "list"}} {
		args := append(append(cmd, common...), "cli-world")
		if out, _, err := cli(t, args...); err == nil || !strings.Contains(err.Error(), "relay "+strings.Join(cmd, " ")+" takes no arguments") || out != "" {
			t.Fatalf("%v with an argument: %v %q", cmd, err, out)
		}
	}
	if _, _, err := cli(t, append([]string{"worlds", "create", "--title", "Again", "--client", "cli-world"}, common...)...); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a taken id: %v", err)
	}
	if _, _, err := cli(t, append([]string{"worlds", "create", "--title", "Odd", "--seed", "odd"}, common...)...); err == nil || !strings.Contains(err.Error(), "'seed'") {
		t.Fatalf("a bad seed: %v", err)
	}
	if _, errOut, err := cli(t, append(append([]string{"worlds", "delete"}, common...), "cli-world")...); err != nil {
		t.Fatalf("worlds delete: %v %s", err, errOut)
	}
	if got := tr.clientIDs(key); len(got) != 0 {
		t.Fatalf("the account's worlds after delete: %v", got)
	}
}

// TestAuditCLI runs `relay audit` against a running relay with the
// bootstrap key: it lists the key made before it, a page at a time, and
// filters by action; a bad filter is refused with the relay's message.
func TestAuditCLI(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	common := []string{"--addr", tr.Addr(), "--admin-key-file", filepath.Join(tr.DataDir, "admin.key")}
	for _, name := range []string{"cli-one", "cli-two"} {
		tr.Do(http.MethodPost, "/keys", tr.AdminKey, nil, map[string]any{"name": name, "scopes": []string{"entity:read"}})
	}
	out, errOut, err := cli(t, append([]string{"audit", "--action", "key"}, common...)...)
	if err != nil {
		t.Fatalf("relay audit: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "ACTION") || strings.Count(out, "key.create") != 2 || !strings.Contains(out, `"cli-two"`) || !strings.Contains(out, "operator") {
		t.Fatalf("relay audit:\n%s", out)
	}
	out, _, err = cli(t, append([]string{"audit", "--action", "key", "--limit", "1"}, common...)...)
	if err != nil || strings.Count(out, "key.create") != 1 || strings.Contains(out, "cli-two") {
		t.Fatalf("relay audit --limit 1: %v\n%s", err, out)
	}
	if _, _, err := cli(t, append([]string{"audit", "--since", "yesterday"}, common...)...); err == nil || !strings.Contains(err.Error(), "since") {
		t.Fatalf("bad --since: %v", err)
	}
}
