package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"
)

// TestScaleEndToEnd runs a small scale run against a relay it starts
// (built with go build), with the test binary as the client process, and
// checks that every event reached the followers and that the report holds
// its figures.
func TestScaleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts a relay")
	}
	cfg, err := parseScaleConfig([]string{"--streams", "60", "--followers", "6", "--rate", "20", "--duration", "1s", "--sources", "2"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var out, progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := runScale(ctx, cfg, &out, &progress); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), progress.String())
	}
	report := out.String()
	for _, want := range []string{
		`scale: 60 SSE streams over HTTP/1.1 on one relay \(6 following an actor changed 20 times at 20/s`,
		`delivered: 120 of 120 events \(0 lost\)`,
		`latency: p50 .*, p90 .*, p99 .*, max .*`,
		`fan-out floor, 6 streams in the same run: p50 .*, p99 .*; the relay's p99 is [0-9.]+ times the floor's`,
		`relay memory: [0-9.]+ MiB resident with every stream open \([0-9.-]+ KiB per stream`,
		`relay CPU while the actor changed: [0-9.]+ cores`,
		`load average: [0-9.]+ before, [0-9.]+ after`,
	} {
		if !regexp.MustCompile(want).MatchString(report) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

// TestScaleFlags checks the scale run's refusals of bad flags, and that too
// few source addresses for the streams are named before anything starts.
func TestScaleFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"--streams", "0"},
		{"--followers", "0"},
		{"--streams", "10", "--followers", "11"},
		{"--rate", "0"},
		{"--duration", "0s"},
		{"--sources", "0"},
		{"--sources", "251"},
		{"--floor-size", "4"},
		{"extra"},
	} {
		if _, err := parseScaleConfig(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("flags %v accepted", bad)
		}
	}
	if err := checkPorts(1_000_000, 1); err == nil {
		t.Error("a million streams from one source address accepted")
	} else if !regexp.MustCompile(`use --sources \d+`).MatchString(err.Error()) {
		t.Errorf("the refusal does not say how many sources: %v", err)
	}
	if err := checkPorts(1000, 1); err != nil {
		t.Errorf("a thousand streams from one source address refused: %v", err)
	}
}
