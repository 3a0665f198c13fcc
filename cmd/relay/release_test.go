package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReleaseVersionScript runs scripts/release-version.sh on a copy of the
// published packages' metadata: a release tag sets the same version in the
// TypeScript client's package.json and lock file and in the Python
// client's pyproject.toml, and a malformed tag changes nothing and says
// why. Skipped only when npm is missing and CI is not set.
func TestReleaseVersionScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("npm is missing")
		}
		t.Skip("npm is missing; CI runs this test")
	}
	root := t.TempDir()
	for _, f := range []string{"sdk/typescript/package.json", "sdk/typescript/package-lock.json", "sdk/python/pyproject.toml"} {
		data, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(tag string) (string, error) {
		cmd := exec.Command("../../scripts/release-version.sh", tag)
		cmd.Env = append(os.Environ(), "RELAY_ROOT="+root)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	versions := func() (pkg, lock, lockRoot, py string) {
		t.Helper()
		var p struct{ Version string }
		var l struct {
			Version  string
			Packages map[string]struct{ Version string }
		}
		for name, v := range map[string]any{"sdk/typescript/package.json": &p, "sdk/typescript/package-lock.json": &l} {
			data, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		data, err := os.ReadFile(filepath.Join(root, "sdk/python/pyproject.toml"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^version = "([^"]*)"$`).FindSubmatch(data)
		if m == nil {
			t.Fatal("pyproject.toml has no version line")
		}
		return p.Version, l.Version, l.Packages[""].Version, string(m[1])
	}
	before1, before2, before3, before4 := versions()

	for _, bad := range []string{"1.2.3", "v1.2", "v01.2.3", "v1.2.3;rm", "latest"} {
		out, err := run(bad)
		if err == nil || !strings.Contains(out, "is not a release tag") {
			t.Errorf("tag %q: err %v, output %q; want a refusal naming the tag's form", bad, err, out)
		}
		if a, b, c, d := versions(); a != before1 || b != before2 || c != before3 || d != before4 {
			t.Fatalf("tag %q changed the versions: %s %s %s %s", bad, a, b, c, d)
		}
	}

	for _, tag := range []string{"v1.4.0", "v2.0.0-rc.1"} {
		if out, err := run(tag); err != nil {
			t.Fatalf("tag %s: %v\n%s", tag, err, out)
		}
		want := strings.TrimPrefix(tag, "v")
		if a, b, c, d := versions(); a != want || b != want || c != want || d != want {
			t.Fatalf("tag %s: versions %s (package.json), %s and %s (lock), %s (pyproject); want %s everywhere", tag, a, b, c, d, want)
		}
	}
}
