package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeSkip, on the line before a block of the README or of a manual page,
// keeps TestReadmeBlocks from running it (the block that starts the relay in
// the foreground and runs the tests, say).
const readmeSkip = "<!-- readme-test: skip -->"

// manualTour lists the manual's pages whose shell blocks continue the
// README's quick start, in the order TestReadmeBlocks runs them after the
// README's own: they use the relay it started and the keys it made. Every
// other page's shell blocks must be marked with readmeSkip.
var manualTour = []string{
	"docs/guide/keys-and-scopes.md",
	"docs/guide/scripts.md",
	"docs/guide/fifth-edition.md",
	"docs/guide/encounters.md",
	"docs/guide/files.md",
	"docs/guide/event-streams.md",
	"docs/guide/browser.md",
	"docs/guide/linked-tabletops.md",
}

// readmeBlocks returns the `sh` code blocks of a Markdown file in order,
// without those marked with readmeSkip, each with its indentation removed.
func readmeBlocks(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks  []string
		current []string
		inBlock bool
		indent  string
		skip    bool
		prev    string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && strings.HasPrefix(trimmed, "```sh"):
			inBlock, current = true, nil
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			skip = strings.TrimSpace(prev) == readmeSkip
		case inBlock && trimmed == "```":
			inBlock = false
			if !skip {
				blocks = append(blocks, strings.Join(current, "\n"))
			}
		case inBlock:
			current = append(current, strings.TrimPrefix(line, indent))
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// TestReadmeBlocks runs every shell block of the README and then those of
// the manual's pages in manualTour, in order, in one bash session in an
// empty directory, as a reader pasting them into a fresh shell would: the
// quick start builds and starts the relay, and every later block uses what
// the earlier ones set. The relay listens on a free port
// instead of 8080; curl fails on any HTTP error. The output must show what
// the README says it shows.
func TestReadmeBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the relay and runs the README's commands")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, filepath.Join(repo, "README.md"))
	if len(blocks) < 4 {
		t.Fatalf("only %d shell blocks found in the README", len(blocks))
	}
	for _, page := range manualTour {
		pageBlocks := readmeBlocks(t, filepath.Join(repo, page))
		if len(pageBlocks) == 0 {
			t.Fatalf("%s has no shell block to run: take it out of manualTour", page)
		}
		blocks = append(blocks, pageBlocks...)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	// HTTP errors must fail the block they happen in.
	script.WriteString("curl() { command curl --fail-with-body \"$@\"; }\n")
	script.WriteString("trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n")
	for i, b := range blocks {
		// The blocks run from the clone's top; here they run elsewhere, so
		// the Go commands are pointed at the clone.
		b = strings.ReplaceAll(b, "127.0.0.1:8080", addr)
		b = strings.ReplaceAll(b, "go build -o bin/", "go build -C "+repo+" -o \"$PWD\"/bin/")
		b = strings.ReplaceAll(b, "go tool -modfile=tools/go.mod", "env -C "+repo+" go tool -modfile=tools/go.mod")
		fmt.Fprintf(&script, "echo '### block %d'\n%s\n", i+1, b)
	}
	script.WriteString("echo '### done'\n")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "RELAY_LISTEN="+addr, "RELAY_ADDR="+addr, "RELAY_API_KEY=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever the blocks left running
	if runErr != nil {
		t.Fatalf("the README's and the manual's blocks failed: %v\n%s", runErr, out.String())
	}
	got := out.String()
	if os.Getenv("RELAY_README_SHOW") != "" {
		t.Log(got)
	}
	for _, want := range []string{
		`"name":"Town Guard"`,  // the LIMITED read
		`"name":"Aria Vale"`,   // the owner's read
		`"name": "Aria Vale"`,  // buf curl prints the document as JSON (indented), not base64
		"event: actor-update",  // the event stream
		`"skill-check-result"`, // a rules operation
		`"execute-js-result"`,  // a script
		`"ticket":"st_`,        // a stream ticket
		`"apiKey":"rk_`,        // a key request's key, fetched once approved
		// A game master's bot, with a key its account approved, sees only
		// the account's linked world.
		`"total":1,"clients":[{"clientId":"fvtt_`,
		`"worldId":"alex-campaign"`,
		`"type":"search-result"`,
		"### done",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the README's and the manual's blocks did not print %q:\n%s", want, got)
		}
	}
}

// TestManualBlocksRun fails when a page of the manual outside manualTour has
// a shell block that is not marked with readmeSkip: TestReadmeBlocks would
// never run it, so it could rot unseen.
func TestManualBlocksRun(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	inTour := make(map[string]bool)
	for _, page := range manualTour {
		inTour[page] = true
	}
	pages := 0
	err = filepath.WalkDir(filepath.Join(repo, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != filepath.Join(repo, "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		pages++
		rel, err := filepath.Rel(repo, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !inTour[rel] {
			if n := len(readmeBlocks(t, path)); n > 0 {
				t.Errorf("%s has %d shell block(s) no test runs: mark each with %s, or add the page to manualTour", rel, n, readmeSkip)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pages == 0 {
		t.Fatal("no page found under docs/")
	}
}
