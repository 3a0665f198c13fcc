package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// target is the relay under load: its address, the admin key and, when
// known, its process id.
type target struct {
	addr     string
	adminKey string
	pid      int
	// pprof is the started relay's profiler address, when --cpu-profile
	// asked for one.
	pprof string
	// stop ends a relay this program started; nil for --addr.
	stop func()
}

// startTarget starts a relay (building it first unless --relay-bin is
// given) or reads the key of the one given by --addr.
func startTarget(ctx context.Context, cfg config, progress io.Writer) (*target, error) {
	if cfg.addr != "" {
		key, err := readKeyFile(cfg.adminKeyFile)
		if err != nil {
			return nil, err
		}
		return &target{addr: cfg.addr, adminKey: key, pid: cfg.pid}, nil
	}
	dir, err := os.MkdirTemp("", "relay-bench-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	bin := cfg.relayBin
	if bin == "" {
		bin = filepath.Join(dir, "relay")
		fmt.Fprintln(progress, "building ./cmd/relay ...")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/tabletop-relay/relay/cmd/relay")
		build.Stderr = progress
		if err := build.Run(); err != nil {
			cleanup()
			return nil, fmt.Errorf("go build github.com/tabletop-relay/relay/cmd/relay (run relay-bench inside the relay module, or pass --relay-bin): %w", err)
		}
	}
	t, err := startChild(bin, filepath.Join(dir, "data"), cfg)
	if err != nil {
		cleanup()
		return nil, err
	}
	stopChild := t.stop
	t.stop = func() { stopChild(); cleanup() }
	return t, nil
}

// startChild runs `relay serve` on a fresh data directory (the demo world
// is created on first start) and waits for its "relay ready" log line.
func startChild(bin, dataDir string, cfg config) (*target, error) {
	logPath := cfg.relayLog
	if logPath == "" {
		logPath = filepath.Join(filepath.Dir(dataDir), "relay.log")
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", dataDir, "--demo", "--log-format", "json",
		"--max-streams-per-key", strconv.Itoa(max(100, cfg.subscribers+10)),
		"--max-streams-per-world", strconv.Itoa(max(1000, cfg.subscribers+10)),
		// Every client of the benchmark comes from the loopback address:
		// the per-address connection cap, which guards against one
		// client holding too many, would refuse them past 512.
		"--max-conns-per-ip", "0")
	cmd.Args = append(cmd.Args, cfg.relayArgs...)
	if cfg.cluster {
		// Clustering on, alone: an embedded NATS server with JetStream,
		// the world registry and its leases, as a node of a cluster pays.
		routes, err := freeAddr()
		if err != nil {
			logFile.Close()
			return nil, err
		}
		cmd.Args = append(cmd.Args, "--node-name", "bench", "--cluster-listen", routes)
	}
	var pprofAddr string
	if cfg.cpuProfile != "" {
		var err error
		if pprofAddr, err = freeAddr(); err != nil {
			logFile.Close()
			return nil, err
		}
		cmd.Args = append(cmd.Args, "--pprof", pprofAddr)
	}
	// The relay must not pick up RELAY_* settings from the caller's shell:
	// the figures are for its defaults.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RELAY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start relay: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if addr := readyAddr(logPath); addr != "" {
			key, err := readKeyFile(filepath.Join(dataDir, "admin.key"))
			if err != nil {
				stop()
				return nil, err
			}
			return &target{addr: addr, adminKey: key, pid: cmd.Process.Pid, pprof: pprofAddr, stop: stop}, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("relay exited before it was ready; its log:\n%s", tail(logPath))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("relay not ready after 30s; its log:\n%s", tail(logPath))
		}
	}
}

// readyAddr is the address of the JSON log's "relay ready" line, or "".
func readyAddr(logPath string) string {
	data, _ := os.ReadFile(logPath)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "relay ready" && line.Addr != "" {
			return line.Addr
		}
	}
	return ""
}

// tail is the end of a log file, for an error message.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	return string(data[max(0, len(data)-4000):])
}

// readKeyFile reads an API key from a file.
func readKeyFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin key: %w", err)
	}
	key := strings.TrimSpace(string(data))
	if key == "" {
		return "", fmt.Errorf("admin key file %s is empty", path)
	}
	return key, nil
}

// benchKeys are the API keys this run creates for itself.
type benchKeys struct {
	// all has every scope and acts at GM level.
	all string
	// alice has every scope and acts as the player Alice in the demo world.
	alice string
	// ids are the keys' ids, to revoke them at the end.
	ids []string
}

// createKeys makes the run's keys through POST /keys with the admin key.
func createKeys(ctx context.Context, client *http.Client, base, adminKey string) (benchKeys, error) {
	var k benchKeys
	var id string
	var err error
	if k.all, id, err = createKey(ctx, client, base, adminKey, map[string]any{"name": "relay-bench", "scopes": []string{"all"}}); err != nil {
		return k, err
	}
	k.ids = append(k.ids, id)
	k.alice, id, err = createKey(ctx, client, base, adminKey, map[string]any{
		"name": "relay-bench as Alice", "scopes": []string{"all"}, "clientUsers": map[string]string{"demo": "Alice"},
	})
	k.ids = append(k.ids, id)
	return k, err
}

// revokeKeys deletes the run's keys (DELETE /keys/{id}), so a targeted
// relay is left with none of them.
func revokeKeys(client *http.Client, base, adminKey string, k benchKeys) error {
	var errs []error
	for _, id := range k.ids {
		if id == "" {
			continue
		}
		req, err := http.NewRequest(http.MethodDelete, base+"/keys/"+url.PathEscape(id), nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		req.Header.Set("x-api-key", adminKey)
		resp, err := client.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Errorf("DELETE /keys/%s: %s", id, resp.Status))
		}
	}
	return errors.Join(errs...)
}

// createKey sends one POST /keys and returns the new key and its id.
func createKey(ctx context.Context, client *http.Client, base, adminKey string, body map[string]any) (key, id string, err error) {
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/keys", bytes.NewReader(data))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("x-api-key", adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", "", fmt.Errorf("POST /keys: %w", err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("POST /keys: %s: %s", resp.Status, reply)
	}
	var env struct {
		Data struct {
			Key    string `json:"key"`
			APIKey struct {
				ID string `json:"id"`
			} `json:"apiKey"`
		} `json:"data"`
	}
	if err := json.Unmarshal(reply, &env); err != nil || env.Data.Key == "" {
		return "", "", fmt.Errorf("POST /keys: no key in %s", reply)
	}
	return env.Data.Key, env.Data.APIKey.ID, nil
}

// procStats are a process's CPU time so far and peak resident memory.
type procStats struct {
	cpu     time.Duration
	peakRSS int64 // bytes
	rss     int64 // bytes, when read
}

// clockTicks is the unit of /proc/<pid>/stat times (USER_HZ, 100 on
// Linux on every common architecture).
const clockTicks = 100

// readProcStats reads utime+stime from /proc/<pid>/stat and VmHWM from
// /proc/<pid>/status.
func readProcStats(pid int) (procStats, error) {
	var s procStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, errors.New("unexpected /proc stat format")
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return s, errors.New("unexpected /proc stat format")
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, err
	}
	s.cpu = time.Duration(utime+stime) * time.Second / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return s, err
			}
			s.peakRSS = kb << 10
		}
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return s, err
			}
			s.rss = kb << 10
		}
	}
	return s, nil
}

// freeAddr picks a free loopback port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// profileCPU fetches the relay's CPU profile over d into path, in the
// background; the returned function waits for it and reports its error.
func profileCPU(pprofAddr string, d time.Duration, path string) func() error {
	done := make(chan error, 1)
	go func() {
		secs := max(1, int(d.Round(time.Second)/time.Second))
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, secs))
		if err != nil {
			done <- fmt.Errorf("cpu profile: %w", err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("cpu profile: %s", resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return func() error { return <-done }
}
