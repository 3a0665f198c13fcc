package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeConfig writes a configuration file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.json")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMalformedEnvironmentIsRefused: a RELAY_* value the flag would not
// take is refused at start, with the variable's name and value, as the
// same flag is; it is never replaced by the default. Not parallel: it
// sets the environment.
func TestMalformedEnvironmentIsRefused(t *testing.T) {
	for _, c := range []struct{ name, value, flag string }{
		{"RELAY_MAX_CONNS", "abc", "max-conns"},
		{"RELAY_DEMO", "maybe", "demo"},
		{"RELAY_IDLE_TIMEOUT", "5", "idle-timeout"},
		{"RELAY_DICE_SEED", "-1", "dice-seed"},
		{"RELAY_CLUSTER_LEASE", "soon", "cluster-lease"},
		{"RELAY_WORLD_SNAPSHOT_MIB", "64MB", "world-snapshot-mib"},
		{"RELAY_WORLD_SNAPSHOT_MIB", "-1", "world-snapshot-mib"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			data := filepath.Join(t.TempDir(), "data")
			err := serveCommand(context.Background(), []string{"--data", data, "--listen", "127.0.0.1:0"}, io.Discard, io.Discard)
			var uerr usageError
			if !errors.As(err, &uerr) || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), `"`+c.value+`"`) || !strings.Contains(err.Error(), "-"+c.flag) {
				t.Fatalf("%s=%s: %v", c.name, c.value, err)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Fatalf("the refused start created its data directory: %v", err)
			}
			// The same value as a flag is refused the same way.
			if _, err := loadServeConfig([]string{"--" + c.flag + "=" + c.value}, io.Discard); err == nil || !strings.Contains(err.Error(), "-"+c.flag) {
				t.Fatalf("--%s=%s: %v", c.flag, c.value, err)
			}
		})
	}
	// An empty variable counts as unset.
	t.Setenv("RELAY_MAX_CONNS", "")
	if cfg, err := loadServeConfig(nil, io.Discard); err != nil || cfg.MaxConns != defaultServeConfig(t).MaxConns {
		t.Fatalf("empty RELAY_MAX_CONNS: %v %d", err, cfg.MaxConns)
	}
}

// defaultServeConfig is the configuration with nothing set.
func defaultServeConfig(t *testing.T) serveConfig {
	t.Helper()
	var cfg serveConfig
	cfg.flags(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return cfg
}

// TestConfigFilePrecedence: each setting comes from its flag, else its
// RELAY_* variable, else the --config file (or RELAY_CONFIG's), else its
// default. Not parallel: it sets the environment.
func TestConfigFilePrecedence(t *testing.T) {
	path := writeConfig(t, `{
		"max-conns": 7, "rate-limit": 5, "idle-timeout": "3s", "demo": false,
		"cluster-peers": ["a:6222", "b:6222"], "cluster-listen": "127.0.0.1:6222", "log-level": "warn", "max-query-bytes": 9000
	}`)
	t.Setenv("RELAY_MAX_CONNS", "8")
	t.Setenv("RELAY_RATE_LIMIT", "6")
	cfg, err := loadServeConfig([]string{"--config", path, "--max-conns", "9"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := defaultServeConfig(t)
	if cfg.MaxConns != 9 || cfg.RateLimit != 6 || cfg.IdleTimeout != 3*time.Second || cfg.Demo || cfg.logLevel != "warn" || cfg.MaxQueryBytes != 9000 ||
		strings.Join(cfg.Cluster.ClusterPeers, ",") != "a:6222,b:6222" || cfg.MaxBodyBytes != d.MaxBodyBytes {
		t.Fatalf("flag > env > file > default: %+v", cfg)
	}
	// RELAY_CONFIG names the file when --config does not.
	t.Setenv("RELAY_CONFIG", path)
	t.Setenv("RELAY_MAX_CONNS", "")
	if cfg, err = loadServeConfig(nil, io.Discard); err != nil || cfg.MaxConns != 7 || cfg.RateLimit != 6 {
		t.Fatalf("RELAY_CONFIG: %v %+v", err, cfg)
	}
	t.Setenv("RELAY_CONFIG", "")

	// Mistakes in the file name the file and the setting; nothing starts.
	for _, c := range []struct{ text, want string }{
		{`{"max-conns": "abc"}`, `invalid value "abc" for "max-conns" in ` + "FILE" + ` (flag -max-conns)`},
		{`{"max_conns": 7}`, `unknown setting "max_conns"`},
		{`{"config": "other.json"}`, `unknown setting "config"`},
		{`{"listen": {"host": "x"}}`, `"listen": want a string, a number, a boolean or a list of strings`},
		{`{"listen": "127.0.0.1:0"`, "not a JSON object"},
		{`["listen"]`, "not a JSON object"},
		{`{} {}`, "more than one JSON value"},
	} {
		p := writeConfig(t, c.text)
		want := strings.ReplaceAll(c.want, "FILE", p)
		data := filepath.Join(t.TempDir(), "data")
		err := serveCommand(context.Background(), []string{"--config", p, "--data", data, "--listen", "127.0.0.1:0"}, io.Discard, io.Discard)
		var uerr usageError
		if !errors.As(err, &uerr) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p) && !strings.Contains(want, "flag") {
			t.Errorf("config %s: %v, want %q", c.text, err, want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("config %s: the refused start created its data directory", c.text)
		}
	}
	if _, err := loadServeConfig([]string{"--config", filepath.Join(t.TempDir(), "missing.json")}, io.Discard); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("a missing file: %v", err)
	}
}

// TestEveryFlagNamesItsVariable: the variable named in each flag's help
// is the one applySettings reads for it.
func TestEveryFlagNamesItsVariable(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("relay serve", flag.ContinueOnError)
	var cfg serveConfig
	cfg.flags(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(f.Usage, "("+envName(f.Name)+")") && !strings.Contains(f.Usage, "("+envName(f.Name)+";") {
			t.Errorf("-%s: its help does not name %s: %q", f.Name, envName(f.Name), f.Usage)
		}
	})
	if n < 40 {
		t.Fatalf("only %d flags", n)
	}
}

// TestServeBindsBeforeItCreates: a relay whose port is busy (the API's,
// the metrics', the profiler's or the gRPC-only one) fails to start with
// the address named, and leaves no data directory, demo world or admin
// key behind.
func TestServeBindsBeforeItCreates(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	for _, args := range [][]string{
		{"--listen", addr},
		{"--listen", "127.0.0.1:0", "--grpc-listen", addr},
		{"--listen", "127.0.0.1:0", "--metrics-listen", addr},
		{"--listen", "127.0.0.1:0", "--pprof", addr},
	} {
		data := filepath.Join(t.TempDir(), "data")
		err := serveCommand(context.Background(), append([]string{"--data", data, "--log-format", "json"}, args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), addr) {
			t.Fatalf("%v: %v", args, err)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("%v: the failed start left its data directory behind (%v)", args, err)
		}
	}
}

// TestSnapshotFlags: the snapshot interval is given in records and in
// MiB, kept in bytes, with documented defaults; a negative count of
// records is refused naming its flag.
func TestSnapshotFlags(t *testing.T) {
	def := defaultServeConfig(t)
	if def.Cluster.SnapshotRecords != 10000 || def.Cluster.SnapshotBytes != 64<<20 {
		t.Fatalf("defaults: %d records, %d bytes", def.Cluster.SnapshotRecords, def.Cluster.SnapshotBytes)
	}
	cfg, err := loadServeConfig([]string{"--world-snapshot-records", "500", "--world-snapshot-mib", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.SnapshotRecords != 500 || cfg.Cluster.SnapshotBytes != 3<<20 {
		t.Fatalf("set: %d records, %d bytes", cfg.Cluster.SnapshotRecords, cfg.Cluster.SnapshotBytes)
	}
	cfg.Cluster.ClusterListen = "127.0.0.1:6222"
	cfg.Cluster.SnapshotRecords = -5
	if err := cfg.Cluster.Check(); err == nil || !strings.Contains(err.Error(), "--world-snapshot-records") {
		t.Fatalf("negative records: %v", err)
	}
}
