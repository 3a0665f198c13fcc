package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchEndToEnd runs the generator for about two seconds at low
// concurrency against a relay it starts (built with go build), over REST
// with every operation, SSE subscribers and the baseline, then over gRPC,
// and checks that every operation completed requests without an error and
// that the report holds its figures.
func TestBenchEndToEnd(t *testing.T) {
	allOps := "get=3,search=1,update=1,skill=1,skillchat=1,rest=1"
	cases := []struct {
		name string
		args []string
	}{
		{"rest", []string{"--mix", allOps, "--subscribers", "2", "--baseline"}},
		{"grpc", []string{"--mix", allOps, "--grpc"}},
		{"grpc over two connections", []string{"--mix", allOps, "--grpc", "--grpc-conns", "2"}},
		{"open loop", []string{"--mix", allOps, "--rate", "100", "--baseline"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jsonPath := filepath.Join(t.TempDir(), "report.json")
			args := append([]string{"--concurrency", "2", "--duration", "1500ms", "--warmup", "300ms", "--json", jsonPath}, tc.args...)
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("relay-bench %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			data, err := os.ReadFile(jsonPath)
			if err != nil {
				t.Fatal(err)
			}
			var rep report
			if err := json.Unmarshal(data, &rep); err != nil {
				t.Fatal(err)
			}
			var seen []string
			for _, op := range rep.Operations {
				seen = append(seen, op.Op)
				if op.Requests == 0 || op.PerSecond <= 0 {
					t.Errorf("%s: no requests completed: %+v", op.Op, op)
				}
				if op.Errors != 0 {
					t.Errorf("%s: %d errors, the first: %s", op.Op, op.Errors, op.FirstError)
				}
				if op.P50 <= 0 || op.P50 > op.P90 || op.P90 > op.P99 || op.P99 > op.Max {
					t.Errorf("%s: latencies out of order: %+v", op.Op, op)
				}
			}
			if !slices.Equal(seen, opNames) {
				t.Errorf("operations reported = %v, want %v", seen, opNames)
			}
			if rep.Total.Requests == 0 || rep.RelayCPUSeconds <= 0 || rep.RelayPeakRSSBytes <= 0 || rep.ElapsedSeconds < 1.5 {
				t.Errorf("report lacks figures: %s", data)
			}
			if tc.name == "grpc over two connections" && rep.Protocol != "gRPC (h2c, 2 connections)" {
				t.Errorf("protocol %q", rep.Protocol)
			}
			if tc.name == "rest" {
				if rep.Subscribers != 2 || rep.SubscriberEvents == 0 || rep.SubscriberError != "" {
					t.Errorf("subscribers: %d streams, %d events, error %q", rep.Subscribers, rep.SubscriberEvents, rep.SubscriberError)
				}
				if rep.Baseline == nil || rep.Baseline.Requests == 0 || rep.Baseline.Errors != 0 || rep.GetFractionOfBaseline <= 0 || rep.BaselineBodyBytes == 0 {
					t.Errorf("baseline: %+v, fraction %v", rep.Baseline, rep.GetFractionOfBaseline)
				}
			}
			if tc.name == "open loop" {
				if rep.RatePerSecond != 100 || rep.Baseline == nil || rep.Baseline.Requests == 0 || rep.Baseline.Errors != 0 {
					t.Errorf("open loop: rate %v, baseline %+v", rep.RatePerSecond, rep.Baseline)
				}
				if !strings.Contains(stdout.String(), "open loop: 100 requests/s") {
					t.Errorf("the table does not say the run was open-loop:\n%s", stdout.String())
				}
			}
			if _, err := os.Stat("/proc/loadavg"); err == nil && (rep.LoadAverageBefore < 0 || rep.LoadAverageAfter < 0) {
				t.Errorf("load averages %v and %v not read", rep.LoadAverageBefore, rep.LoadAverageAfter)
			}
			table := stdout.String()
			for _, want := range []string{"req/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors", "relay CPU:", "peak RSS", "total", "one-minute load average:"} {
				if !strings.Contains(table, want) {
					t.Errorf("table lacks %q:\n%s", want, table)
				}
			}
		})
	}
}

// TestParseMix checks the mix syntax and its errors.
func TestParseMix(t *testing.T) {
	mix, err := parseMix("get=70, search=10,update=0,rest")
	if err != nil {
		t.Fatal(err)
	}
	if got := mixString(mix); got != "get=70,search=10,rest=1" {
		t.Errorf("mix = %s", got)
	}
	for _, bad := range []string{"", "get=0", "fly=1", "get=x", "get=-1", "get=1,get=2"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("parseMix(%q) accepted", bad)
		}
	}
}

// TestFlags checks that -h documents every flag and that bad combinations
// are refused.
func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseConfig([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, name := range []string{"addr", "admin-key-file", "pid", "relay-bin", "relay-log", "concurrency", "duration", "warmup", "mix", "only", "subscribers", "grpc", "grpc-conns", "baseline", "rate", "settle", "settle-max", "json"} {
		if !strings.Contains(out.String(), "-"+name) {
			t.Errorf("-h does not document --%s", name)
		}
	}
	cfg, err := parseConfig([]string{"--only", "update"}, io.Discard)
	if err != nil || mixString(cfg.mix) != "update=1" || cfg.concurrency != 64 || cfg.duration != 10*time.Second {
		t.Errorf("--only update: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{
		{"--addr", "127.0.0.1:1"},
		{"--pid", "1"},
		{"--concurrency", "0"},
		{"--grpc", "--grpc-conns", "0"},
		{"--rate", "-1"},
		{"--settle", "--settle-max", "0"},
		{"--only", "nothing"},
		{"extra"},
	} {
		if _, err := parseConfig(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestPercentile checks the nearest-rank percentiles.
func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 50, 0.9: 90, 0.99: 99, 1: 100} {
		if got := percentile(sorted, q); got != want {
			t.Errorf("percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing")
	}
}
