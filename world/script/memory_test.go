package script_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/script"
)

// TestMemoryLimit runs scripts that keep everything they allocate: each is
// stopped with a clear error long before its time limit, and the process's
// heap does not keep what the script built.
func TestMemoryLimit(t *testing.T) {
	for _, src := range []string{
		`const a = []; for (let i = 0; ; i++) a.push("x".repeat(1 << 16) + i)`,
		`const m = {}; for (let i = 0; ; i++) m["k" + i] = new Array(1000).fill(i)`,
	} {
		// The error shows the memory limit stopped the script; the time
		// limit is far above what reaching it takes, even with the race
		// detector on a loaded machine.
		start := time.Now()
		_, err := run(t, nil, src, script.Options{Timeout: memoryTestTimeout, MaxMemoryBytes: 32 << 20})
		wantErr(t, err, world.ErrInvalid, "Script exceeded the memory limit of 32 MiB")
		if elapsed := time.Since(start); elapsed > memoryTestTimeout/2 {
			t.Errorf("%s: stopped only after %v", src, elapsed)
		}
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > 256<<20 {
		t.Errorf("heap still holds %d MiB after the scripts ended", m.HeapAlloc>>20)
	}
	// A script that allocates a lot but keeps little is not stopped.
	res, err := run(t, nil, `let n = 0; for (let i = 0; i < 300; i++) { n += ("y".repeat(1 << 18) + i).length } return n`,
		script.Options{Timeout: memoryTestTimeout, MaxMemoryBytes: 32 << 20})
	if err != nil {
		t.Fatalf("a script that keeps little was stopped: %v", err)
	}
	if res.Value != float64(300*(1<<18)+10+90*2+200*3) {
		t.Errorf("result %v", res.Value)
	}
}

// memoryTestTimeout is the time limit of the scripts of TestMemoryLimit:
// a script that keeps little was seen to take over 20 s with the race
// detector on a loaded machine.
const memoryTestTimeout = 120 * time.Second
