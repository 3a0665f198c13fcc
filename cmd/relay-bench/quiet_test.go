package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestParseMachineCPU checks that the busy time is user, nice, system,
// irq, softirq and steal of the all-cores line, in USER_HZ ticks.
func TestParseMachineCPU(t *testing.T) {
	stat := "cpu  1000 20 300 90000 50 7 11 4 0 0\ncpu0 500 10 150 45000 25 3 5 2 0 0\nintr 1 2 3\n"
	got, err := parseMachineCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Duration(1000+20+300+7+11+4) * 10 * time.Millisecond; got != want {
		t.Errorf("busy = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "intr 1 2\n", "cpu 1 2 3\n", "cpu 1 x 3 4 5 6 7 8 0 0\n"} {
		if _, err := parseMachineCPU(bad); err == nil {
			t.Errorf("parseMachineCPU(%q) accepted", bad)
		}
	}
	if _, err := os.Stat("/proc/stat"); err == nil {
		if busy, err := readMachineCPU(); err != nil || busy <= 0 {
			t.Errorf("this machine's /proc/stat: %v, %v", busy, err)
		}
	}
}

// TestOtherCPU checks that the relay's and this process's CPU are taken
// off the machine's, and that the rest is never negative.
func TestOtherCPU(t *testing.T) {
	before := cpuSample{machine: 100 * time.Second, relay: 10 * time.Second, self: 5 * time.Second}
	after := cpuSample{machine: 119 * time.Second, relay: 20 * time.Second, self: 13 * time.Second}
	if got := otherCPU(before, after); got != time.Second {
		t.Errorf("other = %v, want 1s (19s busy, 10s relay, 8s relay-bench)", got)
	}
	// Tick rounding can make the processes' sum exceed the machine's.
	after.machine = 117 * time.Second
	if got := otherCPU(before, after); got != 0 {
		t.Errorf("other = %v, want 0", got)
	}
}

// TestQuietnessWarning checks that a run warns on the load average before
// it or on other processes' CPU during it, and not on the load it made.
func TestQuietnessWarning(t *testing.T) {
	cases := []struct {
		load, other float64
		want        []string
	}{
		{0.3, 0.02, nil},
		{0.3, -1, nil},
		{-1, 0.05, nil},
		{1.5, 0.02, []string{"load average before it was 1.50"}},
		{0.3, 0.25, []string{"other processes used 25% of one core"}},
		{2, 0.5, []string{"load average before it was 2.00", "other processes used 50% of one core"}},
	}
	for _, c := range cases {
		got := quietnessWarning(c.load, c.other)
		if (got == "") != (c.want == nil) {
			t.Errorf("quietnessWarning(%v, %v) = %q", c.load, c.other, got)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("quietnessWarning(%v, %v) = %q, lacks %q", c.load, c.other, got, w)
			}
		}
	}
}

// fakeLoad is a load average that falls by step at each sleep.
type fakeLoad struct {
	load, step float64
	slept      time.Duration
}

func (f *fakeLoad) options(limit time.Duration) settleOptions {
	return settleOptions{
		below: 1, limit: limit, poll: 2 * time.Second, progress: 10 * time.Second,
		readLoad: func() (float64, error) { return f.load, nil },
		sleep: func(ctx context.Context, d time.Duration) error {
			f.slept += d
			f.load -= f.step
			return ctx.Err()
		},
	}
}

// TestWaitForQuiet checks that --settle waits until the load average is
// under 1, reports its progress now and then, gives up after its limit,
// and does not wait on a quiet machine.
func TestWaitForQuiet(t *testing.T) {
	ctx := context.Background()

	f := &fakeLoad{load: 2.5, step: 0.1}
	var out bytes.Buffer
	load, ok, err := waitForQuiet(ctx, "the relay", f.options(time.Hour), &out)
	if err != nil || !ok || load >= 1 {
		t.Fatalf("waitForQuiet = %v, %v, %v", load, ok, err)
	}
	// 2.5 falls under 1 after 16 steps of 0.1 (floating point: 15 or 16).
	if f.slept < 30*time.Second || f.slept > 32*time.Second {
		t.Errorf("slept %v, want about 32s", f.slept)
	}
	if n := strings.Count(out.String(), "waiting for the one-minute load average"); n < 3 || n > 5 {
		t.Errorf("%d progress lines in 32s at one per 10s:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "measuring the relay") {
		t.Errorf("no final line:\n%s", out.String())
	}

	f = &fakeLoad{load: 0.4, step: 0.1}
	out.Reset()
	if _, ok, err := waitForQuiet(ctx, "the relay", f.options(time.Hour), &out); err != nil || !ok || f.slept != 0 || out.Len() != 0 {
		t.Errorf("a quiet machine: ok %v, err %v, slept %v, said %q", ok, err, f.slept, out.String())
	}

	f = &fakeLoad{load: 3, step: 0}
	out.Reset()
	load, ok, err = waitForQuiet(ctx, "the baseline", f.options(20*time.Second), &out)
	if err != nil || ok || load != 3 || f.slept != 20*time.Second {
		t.Errorf("a busy machine: load %v, ok %v, err %v, slept %v", load, ok, err, f.slept)
	}
	if !strings.Contains(out.String(), "anyway") {
		t.Errorf("giving up is not reported:\n%s", out.String())
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	f = &fakeLoad{load: 3, step: 0}
	if _, _, err := waitForQuiet(cancelled, "the relay", f.options(time.Hour), &out); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}

	broken := f.options(time.Hour)
	broken.readLoad = func() (float64, error) { return 0, errors.New("no /proc/loadavg") }
	if _, _, err := waitForQuiet(ctx, "the relay", broken, &out); err == nil || !strings.Contains(err.Error(), "--settle") {
		t.Errorf("unreadable load average: %v", err)
	}
}
