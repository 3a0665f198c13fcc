package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The fdatasync floor: how many durable writes per second one writer gets
// from the disk that holds the relay's data, when each write waits for its
// own fdatasync. A relay that acknowledges only durable writes cannot beat
// it without sharing an fdatasync between writes (group commit), so the
// update target is stated as a multiple of it, measured in the same run.

// fsyncRegion is the size of the region the floor's writes cycle through,
// preallocated so that, as in SQLite's WAL, a write does not grow the file
// and fdatasync need not write its size.
const fsyncRegion = 4 << 20

// fsyncResult is the floor's figures.
type fsyncResult struct {
	Writes    int     `json:"writes"`
	PerSecond float64 `json:"perSecond"`
	// MeanMs is the mean time of one write and its fdatasync.
	MeanMs float64 `json:"meanMs"`
	Bytes  int     `json:"bytesPerWrite"`
}

// measureFsync writes size bytes and calls fdatasync, one after the other,
// for d, in a file in dir, and reports the rate.
func measureFsync(ctx context.Context, dir string, size int, d time.Duration) (fsyncResult, error) {
	f, err := os.CreateTemp(dir, "fsync-floor-")
	if err != nil {
		return fsyncResult{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, size)
	for i := range block {
		block[i] = byte(i)
	}
	// Preallocate the region and make it durable before timing.
	for off := 0; off < fsyncRegion; off += len(block) {
		if _, err := f.WriteAt(block, int64(off)); err != nil {
			return fsyncResult{}, err
		}
	}
	if err := f.Sync(); err != nil {
		return fsyncResult{}, err
	}
	fd := int(f.Fd())
	start := time.Now()
	n := 0
	for time.Since(start) < d && ctx.Err() == nil {
		off := (n * size) % (fsyncRegion - size)
		if _, err := f.WriteAt(block, int64(off)); err != nil {
			return fsyncResult{}, err
		}
		if err := syscall.Fdatasync(fd); err != nil {
			return fsyncResult{}, err
		}
		n++
	}
	elapsed := time.Since(start)
	res := fsyncResult{Writes: n, Bytes: size, PerSecond: float64(n) / elapsed.Seconds()}
	if n > 0 {
		res.MeanMs = float64(elapsed.Microseconds()) / 1000 / float64(n)
	}
	return res, ctx.Err()
}

// runFsyncFloor measures the floor in the directory the started relay's
// data directory is made in (the system's temporary directory), for the
// update figures of the same run.
func runFsyncFloor(ctx context.Context, cfg config, rep *report, progress io.Writer) error {
	dir := cfg.fsyncDir
	if dir == "" {
		dir = os.TempDir()
	}
	fmt.Fprintf(progress, "measuring one writer's fdatasync rate in %s for %v ...\n", dir, cfg.fsyncDuration)
	res, err := measureFsync(ctx, filepath.Clean(dir), cfg.fsyncBytes, cfg.fsyncDuration)
	if err != nil {
		return fmt.Errorf("fdatasync floor: %w", err)
	}
	rep.Fsync = &res
	for _, op := range rep.Operations {
		if op.Op == "update" && res.PerSecond > 0 {
			rep.UpdateTimesFsync = op.PerSecond / res.PerSecond
		}
	}
	return nil
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
