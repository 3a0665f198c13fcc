package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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

// TestPlainBuildInAClone builds the relay as a person who cloned the
// repository would, with a plain `go build` and no linker flags, and as
// the container image wants it, static (CGO_ENABLED=0): `relay --version`
// names the clone's commit and its time, and the binary needs no dynamic
// loader. The machine's own GOFLAGS may turn VCS stamping off
// (-buildvcs=false); the test sets Go's default (-buildvcs=auto), as on
// a machine without that setting. It builds the whole relay once more, so
// it runs in CI or with RELAY_TEST_BUILDS=1.
func TestPlainBuildInAClone(t *testing.T) {
	if os.Getenv("CI") == "" && os.Getenv("RELAY_TEST_BUILDS") == "" {
		t.Skip("builds the relay in a fresh clone: set RELAY_TEST_BUILDS=1 (CI runs it)")
	}
	t.Parallel()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	commit := strings.TrimSpace(string(head))
	when, err := exec.Command("git", "show", "-s", "--format=%ct", commit).Output()
	if err != nil {
		t.Fatal(err)
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(string(when)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	wantDate := time.Unix(secs, 0).UTC().Format(time.RFC3339)

	dir := t.TempDir()
	clone := filepath.Join(dir, "relay")
	if out, err := exec.Command("git", "clone", "--quiet", strings.TrimSpace(string(top)), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	// The clone's HEAD is the commit under test, whichever branch the
	// checkout it came from has.
	if out, err := exec.Command("git", "-C", clone, "checkout", "--quiet", "--detach", commit).CombinedOutput(); err != nil {
		t.Fatalf("git checkout: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "relay-bin")
	build := exec.Command("go", "build", "-o", bin, "./cmd/relay")
	build.Dir = clone
	// An empty GOFLAGS would not override the machine's go env file, so
	// Go's default is spelled out.
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=auto", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "commit " + commit + ", date " + wantDate + ", go"; !strings.Contains(string(out), want) {
		t.Fatalf("relay --version printed %q, want it to contain %q", out, want)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the CGO_ENABLED=0 build needs a dynamic loader")
		}
	}
}
