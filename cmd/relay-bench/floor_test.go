package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"
)

// TestMain lets the test binary act as the fan-out floor's reader process
// and the scale run's client process, as relay-bench itself does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == floorReaderArg || os.Args[1] == scaleClientsArg) {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFanoutFloor runs a small floor measurement end to end, with the test
// binary as the reader process, and checks that both sides report.
func TestFanoutFloor(t *testing.T) {
	cfg, err := parseFloorConfig([]string{"-streams", "20", "-rate", "50", "-duration", "300ms"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var out, progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := runFloor(ctx, cfg, &out, &progress); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	report := out.String()
	for _, want := range []string{
		`fan-out floor: 20 streams, 300-byte messages, target 50 passes/s`,
		`writer: \d+ passes in .* µs of CPU per write`,
		`reader: \d+ reads, [0-9.]+ µs of CPU per read; latency of each read's first message p50 .*, p99 .*, max .*`,
	} {
		if !regexp.MustCompile(want).MatchString(report) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, bad := range [][]string{{"-streams", "0"}, {"-size", "4"}, {"-duration", "0s"}} {
		if _, err := parseFloorConfig(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("flags %v accepted", bad)
		}
	}
}
