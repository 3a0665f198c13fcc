package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnitVerifies: deploy/relay.service passes `systemd-analyze
// verify` without a word of complaint (verify only warns about a bad
// setting, so any output fails the test), with its ExecStart pointed at an
// executable that exists here. Skipped only when the tool is missing and CI
// is not set.
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is missing (apt-get install systemd)")
		}
		t.Skip("systemd-analyze is missing (apt-get install systemd); CI runs this test")
	}
	unit, err := os.ReadFile("../../deploy/relay.service")
	if err != nil {
		t.Fatal(err)
	}
	const execPath = "/usr/local/bin/relay"
	if !bytes.Contains(unit, []byte("ExecStart="+execPath+" serve")) {
		t.Fatalf("the unit does not start %s serve", execPath)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	verify := func(t *testing.T, text []byte) (string, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "relay.service")
		if err := os.WriteFile(path, text, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(tool, "verify", path).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(t, bytes.ReplaceAll(unit, []byte(execPath), []byte(self))); err != nil || out != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The check sees mistakes: a setting it cannot parse.
	broken := bytes.Replace(bytes.ReplaceAll(unit, []byte(execPath), []byte(self)), []byte("Restart=on-failure"), []byte("Restart=sometimes"), 1)
	if out, err := verify(t, broken); err == nil && out == "" {
		t.Fatal("systemd-analyze verify accepted Restart=sometimes without a word")
	}
}

// TestHealthCommand: `relay health` succeeds against a running relay
// (the container image's health check) and fails against a closed port.
func TestHealthCommand(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	out, errOut, err := cli(t, "health", "--addr", tr.Addr())
	if err != nil || !strings.Contains(out, "healthy and ready") {
		t.Fatalf("relay health: %v %q %q", err, out, errOut)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if _, _, err := cli(t, "health", "--addr", closed, "--timeout", "2s"); err == nil || !strings.Contains(err.Error(), "/healthz") {
		t.Fatalf("relay health on a closed port: %v", err)
	}
}

// TestComposeRunsThreeNodes: deploy/compose.yaml has three relay services,
// each with its own node name and volume, all naming the same three peers
// and a cluster secret that must be set.
func TestComposeRunsThreeNodes(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{
		"RELAY_CLUSTER_PEERS: relay1:6222,relay2:6222,relay3:6222",
		"RELAY_CLUSTER_LISTEN: 0.0.0.0:6222",
		"RELAY_CLUSTER_SECRET: ${RELAY_CLUSTER_SECRET:?",
	} {
		if strings.Count(text, want) != 1 {
			t.Errorf("compose.yaml: want %q once (shared by the nodes)", want)
		}
	}
	for _, node := range []string{"relay1", "relay2", "relay3"} {
		for _, want := range []string{"\n  " + node + ":\n", "RELAY_NODE_NAME: " + node + "\n", node + "-data:/data"} {
			if !strings.Contains(text, want) {
				t.Errorf("compose.yaml: no %q", want)
			}
		}
	}
}
