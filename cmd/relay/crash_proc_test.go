package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The helpers of the crash test that run the relay as a child process.

// crashStartLimit is how long a restarted relay may take to answer
// /healthz; a relay slower than that did not start cleanly. A start takes
// tens of milliseconds; the margin is for a machine busy with other work
// (seconds-long stalls were seen at a load average of 8 on 2 cores).
const crashStartLimit = 10 * time.Second

// crashBinary builds the relay into dir with the `go` on PATH. It is
// built with the race detector when the test is, so the build reuses the
// test's compiled packages.
func crashBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "relay")
	args := []string{"build", "-o", bin}
	if crashRaceBuild {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// crashProc is one run of the relay as a child process.
type crashProc struct {
	cmd     *exec.Cmd
	logPath string
	logFrom int64 // where this run's log starts in the log file
	base    string
	began   time.Time
	startup time.Duration // from exec to the first healthy /healthz
	waited  chan error
}

// startCrashProc starts the relay on dataDir, appending its output to
// logPath, and waits until it answers /healthz. It fails the test when the
// relay does not become healthy within crashStartLimit.
func startCrashProc(t *testing.T, bin, dataDir, logPath string) *crashProc {
	t.Helper()
	p := launchCrashProc(t, bin, dataDir, logPath)
	client := &http.Client{Timeout: time.Second}
	deadline := p.began.Add(crashStartLimit)
	for {
		if p.base == "" {
			p.base = p.readyAddr()
		}
		if p.base != "" {
			if resp, err := client.Get(p.base + "/healthz"); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var health struct{ Status string }
				if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &health) == nil && health.Status == "SERVING" {
					p.startup = time.Since(p.began)
					return p
				}
			}
		}
		select {
		case err := <-p.waited:
			p.waited <- err
			t.Fatalf("relay exited during start-up (%v); log:\n%s", err, p.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay not healthy within %v; log:\n%s", crashStartLimit, p.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// launchCrashProc starts the relay on dataDir, appending its output to
// logPath, without waiting for it to be ready. The test's end kills it.
func launchCrashProc(t *testing.T, bin, dataDir, logPath string) *crashProc {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	from, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	p := &crashProc{logPath: logPath, logFrom: from, waited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", dataDir, "--log-format", "json", "--node-id", "7")
	p.cmd.Stdout = logFile
	p.cmd.Stderr = logFile
	// The relay must not inherit settings from the developer's shell.
	p.cmd.Env = crashEnv()
	p.began = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.waited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	return p
}

// crashLogTail is the last n lines of a log file, for a failure report
// (the file itself goes with the test's temporary directory).
func crashLogTail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// crashEnv is the environment without RELAY_* settings.
func crashEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAY_") {
			env = append(env, kv)
		}
	}
	return env
}

// log is this run's output.
func (p *crashProc) log() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil || int64(len(data)) < p.logFrom {
		return ""
	}
	return string(data[p.logFrom:])
}

// readyAddr is the base URL from the "relay ready" log line, or "" before
// it is logged.
func (p *crashProc) readyAddr() string {
	sc := bufio.NewScanner(strings.NewReader(p.log()))
	for sc.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "relay ready" && line.Addr != "" {
			return "http://" + line.Addr
		}
	}
	return ""
}

// startupProblems lists the log lines of this run's start-up (up to
// "relay ready") at level WARN or above.
func (p *crashProc) startupProblems() []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(p.log()))
	for sc.Scan() {
		var line struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if line.Msg == "relay ready" {
			break
		}
		if line.Level == "WARN" || line.Level == "ERROR" {
			out = append(out, sc.Text())
		}
	}
	return out
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *crashProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL) // fails harmlessly once it has exited
	err := <-p.waited
	p.waited <- err
}

// stop asks the relay to shut down (SIGTERM) and returns its exit error.
func (p *crashProc) stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.waited:
		p.waited <- err
		return err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("relay did not stop within %v after SIGTERM", timeout)
	}
}

// crashClient sends REST requests to a relay run with the admin key.
type crashClient struct {
	base string
	key  string
	http *http.Client
}

// crashReply is a REST answer's status and body.
type crashReply struct {
	status int
	body   []byte
}

// data decodes the envelope's data object.
func (r crashReply) data() (map[string]any, error) {
	var env struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil {
		return nil, fmt.Errorf("%v: %s", err, r.body)
	}
	if env.Data == nil {
		return nil, fmt.Errorf("no data in %s", r.body)
	}
	return env.Data, nil
}

// send sends one request. An error means no answer arrived (the relay was
// killed, for example): the write may or may not have happened.
func (c *crashClient) send(ctx context.Context, method, path string, body io.Reader, contentType string) (crashReply, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return crashReply{}, err
	}
	req.Header.Set("x-api-key", c.key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return crashReply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return crashReply{}, err
	}
	return crashReply{status: resp.StatusCode, body: data}, nil
}

// sendJSON sends a JSON body.
func (c *crashClient) sendJSON(ctx context.Context, method, path string, body any) (crashReply, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return crashReply{}, err
	}
	return c.send(ctx, method, path, bytes.NewReader(data), "application/json")
}
