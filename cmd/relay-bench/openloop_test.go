package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestScheduleTimetable checks that the schedule hands out each request
// once, due at start + i/rate, and none due at or after the end.
func TestScheduleTimetable(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSchedule(start, time.Second, 100)
	for i := range 100 {
		due, ok := s.take(start)
		if !ok || !due.Equal(start.Add(time.Duration(i)*10*time.Millisecond)) {
			t.Fatalf("request %d: due %v, %v", i, due.Sub(start), ok)
		}
	}
	if due, ok := s.take(start); ok {
		t.Fatalf("a request due at %v, at the end of the phase", due.Sub(start))
	}
	if m := s.missed(); m != 0 {
		t.Fatalf("missed = %d, want 0", m)
	}
}

// TestScheduleMissed checks that the requests not taken before the end
// are counted as missed, and that none is taken after the end.
func TestScheduleMissed(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSchedule(start, time.Second, 100)
	for range 30 {
		if _, ok := s.take(start.Add(500 * time.Millisecond)); !ok {
			t.Fatal("a request refused before the end")
		}
	}
	if _, ok := s.take(start.Add(time.Second)); ok {
		t.Fatal("a request taken at the end")
	}
	if m := s.missed(); m != 70 {
		t.Fatalf("missed = %d, want 70", m)
	}
	// A rate that does not divide the phase: the requests due before the
	// end, rounded up.
	if m := newSchedule(start, time.Second, 3).missed(); m != 3 {
		t.Fatalf("missed of an untouched 3/s schedule over 1s = %d, want 3", m)
	}
}

// TestScheduleConcurrent checks that callers taking at once get every
// request exactly once.
func TestScheduleConcurrent(t *testing.T) {
	start := time.Now()
	s := newSchedule(start, time.Second, 1000)
	var mu sync.Mutex
	var dues []time.Duration
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				due, ok := s.take(start)
				if !ok {
					return
				}
				mu.Lock()
				dues = append(dues, due.Sub(start))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(dues)
	if len(dues) != 1000 {
		t.Fatalf("%d requests taken, want 1000", len(dues))
	}
	for i, d := range dues {
		if d != time.Duration(i)*time.Millisecond {
			t.Fatalf("request %d due at %v", i, d)
		}
	}
	if m := s.missed(); m != 0 {
		t.Fatalf("missed = %d", m)
	}
}

// fakeCaller takes a fixed time per call and records when each began.
type fakeCaller struct {
	took   time.Duration
	mu     sync.Mutex
	starts []time.Time
}

func (c *fakeCaller) call(ctx context.Context, op string, seq int) error {
	c.mu.Lock()
	c.starts = append(c.starts, time.Now())
	c.mu.Unlock()
	time.Sleep(c.took)
	return nil
}

// TestDriveOpenKeepsSchedule checks that no request starts before it is
// due and that every request due is sent when the callers keep up.
func TestDriveOpenKeepsSchedule(t *testing.T) {
	c1, c2 := &fakeCaller{took: time.Millisecond}, &fakeCaller{took: time.Millisecond}
	before := time.Now()
	const rate, d = 50, 400 * time.Millisecond
	p := driveOpen(context.Background(), []caller{c1, c2}, []weighted{{"get", 1}}, d, rate)
	starts := append(c1.starts, c2.starts...)
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	if len(starts) != 20 || p.missed != 0 || len(p.ops["get"].latencies) != 20 {
		t.Fatalf("%d requests started, %d recorded, %d missed; want 20, 20, 0", len(starts), len(p.ops["get"].latencies), p.missed)
	}
	for k, s := range starts {
		if due := before.Add(time.Duration(k) * time.Second / rate); s.Before(due) {
			t.Fatalf("request %d started %v before it was due", k, due.Sub(s))
		}
	}
}

// TestDriveOpenCountsFromSchedule checks that a request which waits for a
// busy connection counts its wait: one connection taking 20 ms per call,
// scheduled every 5 ms, falls behind, and its latencies grow well past
// the 20 ms a closed loop would report; the requests never started are
// missed.
func TestDriveOpenCountsFromSchedule(t *testing.T) {
	c := &fakeCaller{took: 20 * time.Millisecond}
	p := driveOpen(context.Background(), []caller{c}, []weighted{{"get", 1}}, 200*time.Millisecond, 200)
	lat := p.ops["get"].latencies
	if len(lat) == 0 || len(lat) > 11 {
		t.Fatalf("%d requests on one 20 ms connection in 200 ms", len(lat))
	}
	if p.missed+len(lat) != 40 {
		t.Fatalf("%d sent and %d missed, want 40 in all", len(lat), p.missed)
	}
	if worst := lat[len(lat)-1]; worst < 100*time.Millisecond {
		t.Fatalf("the latest request's latency is %v; a request that waited for the connection must count its wait", worst)
	}
}

func TestParseLoadAverage(t *testing.T) {
	if l, err := parseLoadAverage("1.52 0.98 0.40 2/345 6789\n"); err != nil || l != 1.52 {
		t.Fatalf("parseLoadAverage = %v, %v", l, err)
	}
	if _, err := parseLoadAverage(""); err == nil {
		t.Fatal("an empty load average parsed")
	}
}
