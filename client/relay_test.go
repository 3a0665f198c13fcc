package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests and examples of this package run against a real relay: TestMain
// builds `relay` (or takes RELAY_BIN), starts `relay serve` as a child
// process on a free loopback port with a fresh data directory holding the
// demo world, and hands the examples its address and admin key in
// RELAY_ADDR and RELAY_API_KEY, the way a program would get them.
var (
	relayAddr string
	adminKey  string
)

func TestMain(m *testing.M) {
	os.Exit(runWithRelay(m))
}

func runWithRelay(m *testing.M) int {
	dir, err := os.MkdirTemp("", "relay-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := os.Getenv("RELAY_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "relay")
		build := exec.Command("go", "build", "-o", bin, "../cmd/relay")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build relay:", err)
			return 1
		}
	}
	stop, err := startRelay(bin, filepath.Join(dir, "data"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "start relay:", err)
		return 1
	}
	defer stop()
	os.Setenv("RELAY_ADDR", relayAddr)
	os.Setenv("RELAY_API_KEY", adminKey)
	return m.Run()
}

// startRelay starts `relay serve` and waits for its "relay ready" log line,
// which names the address it listens on.
func startRelay(bin, dataDir string) (stop func(), err error) {
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", dataDir,
		"--log-format", "json", "--log-level", "info", "--dice-seed", "20261125", "--node-id", "7")
	cmd.Env = cleanEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "relay ready" {
				ready <- line.Addr
			} else if strings.Contains(sc.Text(), `"level":"WARN"`) || strings.Contains(sc.Text(), `"level":"ERROR"`) {
				fmt.Fprintln(os.Stderr, "relay:", sc.Text())
			}
		}
	}()
	select {
	case relayAddr = <-ready:
	case <-time.After(60 * time.Second):
		stop()
		return nil, fmt.Errorf("the relay did not get ready within 60s")
	}
	key, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
	if err != nil {
		stop()
		return nil, err
	}
	adminKey = strings.TrimSpace(string(key))
	return stop, nil
}

// cleanEnv is the environment without RELAY_* variables, so that a
// developer's settings cannot change the relay under test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAY_") {
			env = append(env, kv)
		}
	}
	return env
}

// dropProxy forwards TCP connections to the relay and can cut them all at
// once, as a network failure does; it keeps accepting new ones.
type dropProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.drop() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *dropProxy) addr() string { return p.ln.Addr().String() }

// drop closes every connection through the proxy.
func (p *dropProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// testContext is the context of one test; its deadline is generous, only
// there to stop a hung test.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
