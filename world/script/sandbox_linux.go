package script

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// workerNice is the scheduling niceness of a worker: when scripts and the
// relay compete for the processor, the relay's requests go first.
const workerNice = 10

// workerCommand returns the command that starts a worker: the running
// binary itself, through /proc/self/exe so that it works even when the
// file was replaced on disk since the relay started. The worker is killed
// if the relay dies.
func workerCommand() *exec.Cmd {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"relay-script-worker"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// limitWorker applies a worker's limits to its own process: its data
// segment may grow by at most budget bytes from what it is now
// (RLIMIT_DATA, which on Linux counts every private writable mapping: the
// Go heap, goroutine and thread stacks, the runtime's own structures), a
// ceiling the script has no way to raise; and a lower scheduling priority.
//
// The ceiling is relative because a worker's start-up footprint depends on
// the system more than on the relay: most of it is the address space of
// thread stacks, whose size follows the stack limit (8 MiB each by
// default, more when it is unlimited), and barely any of it is resident.
// Under the race detector the ceiling is left out (see race.go); the
// watchdog and the soft memory limit still apply there.
func limitWorker(budget int64) error {
	if !raceEnabled {
		base, err := dataSegment()
		if err != nil {
			return err
		}
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_DATA, &cur); err != nil {
			return fmt.Errorf("read the data segment limit: %w", err)
		}
		ceiling := uint64(base + budget)
		lim := syscall.Rlimit{Cur: ceiling, Max: ceiling}
		if cur.Max < lim.Max {
			// An operator's lower limit stays.
			lim = syscall.Rlimit{Cur: cur.Max, Max: cur.Max}
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &lim); err != nil {
			return fmt.Errorf("set the memory ceiling: %w", err)
		}
	}
	// Linux keeps a niceness per thread and a new thread takes its
	// creator's: renice every thread there is now (twice, for one created
	// meanwhile), and every later one inherits it.
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("lower the priority: %w", err)
		}
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, workerNice)
			}
		}
	}
	return nil
}

// dataSegment reads the process's data segment size (VmData) in bytes.
func dataSegment() (int64, error) {
	kb, err := statusField("/proc/self/status", "VmData")
	if err != nil {
		return 0, fmt.Errorf("read the data segment size: %w", err)
	}
	return kb << 10, nil
}

// statusField reads a field counted in kilobytes from a /proc status file.
func statusField(path, name string) (int64, error) {
	status, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("malformed %q", strings.TrimSpace(line))
			}
			return kb, nil
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, path)
}

// residentPeak reads the largest resident set a live process has had
// since it started running its binary (VmHWM), in bytes; 0 when it cannot.
// (The rusage of an ended process is no substitute: its high-water mark
// includes the parent's, whose memory a child shares until it execs.)
func residentPeak(pid int) int64 {
	kb, err := statusField("/proc/"+strconv.Itoa(pid)+"/status", "VmHWM")
	if err != nil {
		return 0
	}
	return kb << 10
}
