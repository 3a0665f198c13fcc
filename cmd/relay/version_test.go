package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion builds the relay with the link-time build information a
// release sets and checks that `relay --version` and `relay version`
// print it, and that a relay serving from that binary reports it in
// /healthz.
func TestVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "relay")
	const (
		wantVersion = "v9.8.7"
		wantCommit  = "0123456789abcdef0123456789abcdef01234567"
		wantDate    = "2026-01-02T03:04:05Z"
	)
	args := []string{"build", "-o", bin, "-ldflags", "-X main.version=" + wantVersion + " -X main.commit=" + wantCommit + " -X main.date=" + wantDate}
	if crashRaceBuild {
		args = append(args, "-race") // reuses the test's compiled packages
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := "relay v9.8.7 (commit " + wantCommit + ", date " + wantDate + ", go"
	for _, arg := range []string{"--version", "version", "-version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("relay %s: %v", arg, err)
		}
		if !strings.HasPrefix(string(out), want) || strings.Count(string(out), "\n") != 1 {
			t.Errorf("relay %s printed %q, want one line starting %q", arg, out, want)
		}
	}

	// The same binary, serving: /healthz names the build.
	p := startCrashProc(t, bin, filepath.Join(dir, "data"), filepath.Join(dir, "relay.log"))
	resp, err := http.Get(p.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var health map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
		t.Fatal(err)
	}
	if health["status"] != "SERVING" || health["version"] != wantVersion || health["commit"] != wantCommit || health["date"] != wantDate {
		t.Fatalf("/healthz: %v", health)
	}
}

// TestVersionFromBuildInfo checks the values a build without link-time
// overrides reports: the module's version or `devel`, never empty.
func TestVersionFromBuildInfo(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	info := buildInfo()
	if info.Version == "" || !strings.HasPrefix(out.String(), "relay "+info.Version+" (") {
		t.Fatalf("--version printed %q for %+v", out.String(), info)
	}
}
