package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// A measurement is evidence only when nothing else ran beside it. The
// one-minute load average cannot tell that once a run has started: the
// relay and this generator keep two cores busy and raise it to 2 or 3 by
// themselves. What does tell is the machine's busy CPU time during the
// measured phase (from /proc/stat) minus what the relay and this process
// used: the rest is other work.

// maxOtherCores is the share of one core that other processes may use
// during a measured phase before the run warns that its figures are no
// evidence.
const maxOtherCores = 0.10

// cpuSample is one reading of the machine's busy CPU time over all its
// cores and of the CPU time of the relay and of this process.
type cpuSample struct {
	machine time.Duration
	relay   time.Duration
	self    time.Duration
}

// otherCPU is the CPU time that neither the relay nor this process used
// between two samples; never negative (the three readings are not taken
// at the same instant, and /proc/stat counts in ticks).
func otherCPU(before, after cpuSample) time.Duration {
	machine := after.machine - before.machine
	own := (after.relay - before.relay) + (after.self - before.self)
	return max(0, machine-own)
}

// readMachineCPU returns the busy CPU time of all cores so far (Linux
// /proc/stat).
func readMachineCPU() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineCPU(string(data))
}

// parseMachineCPU reads the busy time from the "cpu" line of /proc/stat's
// text: user, nice, system, irq, softirq and steal (time the hypervisor
// gave to other machines, which a measurement cannot use either); idle
// and I/O wait are not busy, and guest time is already part of user time.
// Interrupt time belongs in the sum: under the kernel's usual tick-based
// accounting a tick that lands in an interrupt while a process runs is
// counted in the irq or softirq column and in that process's system time
// alike, and loopback traffic is handled in softirqs of the processes
// that send it. (A kernel built with IRQ_TIME_ACCOUNTING keeps interrupt
// time out of the processes' times; there the benchmark's own network
// interrupts would count as other work, and the check errs toward
// warning.)
func parseMachineCPU(stat string) (time.Duration, error) {
	for line := range strings.SplitSeq(stat, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "cpu" {
			continue
		}
		// cpu user nice system idle iowait irq softirq steal guest guest_nice
		if len(fields) < 9 {
			return 0, errors.New("/proc/stat: short cpu line")
		}
		var ticks int64
		for _, i := range []int{1, 2, 3, 6, 7, 8} {
			n, err := strconv.ParseInt(fields[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat: %w", err)
			}
			ticks += n
		}
		return time.Duration(ticks) * time.Second / clockTicks, nil
	}
	return 0, errors.New("/proc/stat: no cpu line")
}

// cpuWatch measures the other processes' CPU over a measured phase.
type cpuWatch struct {
	relayPID int
	before   cpuSample
	ok       bool
}

// startCPUWatch samples the CPU times at the start of a phase. Without the
// relay's process id (--addr without --pid) nothing is measured: the
// relay's own CPU could not be told from other work.
func startCPUWatch(relayPID int) *cpuWatch {
	w := &cpuWatch{relayPID: relayPID}
	w.before, w.ok = w.sample()
	return w
}

// sample reads the three CPU times.
func (w *cpuWatch) sample() (cpuSample, bool) {
	if w.relayPID == 0 {
		return cpuSample{}, false
	}
	machine, err := readMachineCPU()
	if err != nil {
		return cpuSample{}, false
	}
	relay, err := readProcStats(w.relayPID)
	if err != nil {
		return cpuSample{}, false
	}
	return cpuSample{machine: machine, relay: relay.cpu, self: selfCPU()}, true
}

// otherCores returns the other processes' CPU since the start, as a share
// of one core over elapsed; -1 when it could not be measured.
func (w *cpuWatch) otherCores(elapsed time.Duration) float64 {
	after, ok := w.sample()
	if !w.ok || !ok || elapsed <= 0 {
		return -1
	}
	return otherCPU(w.before, after).Seconds() / elapsed.Seconds()
}

// quietnessWarning says why a phase's figures are no evidence of the
// relay's speed, or returns "" when the machine was quiet: the load
// average before the phase (the last minute's other work; -1 unknown) and
// the other processes' CPU during it, as a share of one core (-1 unknown).
// The load average after a phase is no test: the phase raised it itself.
func quietnessWarning(loadBefore, otherCores float64) string {
	var why []string
	if loadBefore > busyLoad {
		why = append(why, fmt.Sprintf("the one-minute load average before it was %.2f (above %g)", loadBefore, busyLoad))
	}
	if otherCores > maxOtherCores {
		why = append(why, fmt.Sprintf("other processes used %.0f%% of one core during it (above %.0f%%)", 100*otherCores, 100*maxOtherCores))
	}
	if len(why) == 0 {
		return ""
	}
	return strings.Join(why, " and ") + ": other work was running, and these figures are no evidence of the relay's speed"
}

// settleOptions configure waitForQuiet.
type settleOptions struct {
	// below is the one-minute load average to wait for.
	below float64
	// limit is the longest wait; the run then goes on, and warns.
	limit time.Duration
	// poll is how often the load average is read, progress how often the
	// wait is reported.
	poll, progress time.Duration
	// readLoad reads the load average; sleep waits, or returns the
	// context's error.
	readLoad func() (float64, error)
	sleep    func(context.Context, time.Duration) error
}

// defaultSettle is --settle's wait: until the load average is under 1,
// for at most limit.
func defaultSettle(limit time.Duration) settleOptions {
	return settleOptions{
		below: busyLoad, limit: limit, poll: 2 * time.Second, progress: 10 * time.Second,
		readLoad: readLoadAverage, sleep: sleepContext,
	}
}

// waitForQuiet waits until the one-minute load average is under
// opts.below, telling progress how it falls. It returns the last load
// average read, and whether it got under the bound; an error only when
// ctx ends or the load average cannot be read.
func waitForQuiet(ctx context.Context, what string, opts settleOptions, progress io.Writer) (float64, bool, error) {
	var waited, sinceReport time.Duration
	for {
		load, err := opts.readLoad()
		if err != nil {
			return -1, false, fmt.Errorf("--settle: reading the load average: %w", err)
		}
		if load < opts.below {
			if waited > 0 {
				fmt.Fprintf(progress, "load average %.2f after %v: measuring %s\n", load, waited.Round(time.Second), what)
			}
			return load, true, nil
		}
		if waited >= opts.limit {
			fmt.Fprintf(progress, "load average still %.2f after %v: measuring %s anyway (the run will warn)\n", load, waited.Round(time.Second), what)
			return load, false, nil
		}
		if waited == 0 || sinceReport >= opts.progress {
			fmt.Fprintf(progress, "waiting for the one-minute load average (%.2f) to fall under %g before measuring %s ...\n", load, opts.below, what)
			sinceReport = 0
		}
		if err := opts.sleep(ctx, opts.poll); err != nil {
			return load, false, err
		}
		waited += opts.poll
		sinceReport += opts.poll
	}
}

// sleepContext sleeps for d or until ctx ends.
func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
