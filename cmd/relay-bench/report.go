package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is a run's result, printed as a table and optionally as JSON.
type report struct {
	Target      string `json:"target"`
	Protocol    string `json:"protocol"`
	Concurrency int    `json:"concurrency"`
	// RatePerSecond is the open-loop schedule's rate (--rate); absent for
	// a closed-loop run.
	RatePerSecond float64 `json:"ratePerSecond,omitempty"`
	// Missed counts, open-loop, the requests due during the measured
	// phase that no connection was free to start before its end.
	Missed int `json:"missed,omitempty"`
	// LoadAverageBefore and LoadAverageAfter are the machine's one-minute
	// load average before the measured phase and after the last one (-1:
	// unknown). Above 1 before, other work ran in the minute before and
	// the figures are no evidence; the one after is raised by the run
	// itself and tests nothing.
	LoadAverageBefore float64 `json:"loadAverageBefore"`
	LoadAverageAfter  float64 `json:"loadAverageAfter"`
	// OtherCPUCores is the CPU time that processes other than the relay
	// and relay-bench used during the measured phase, as a share of one
	// core (the machine's busy time from /proc/stat minus both processes'
	// own); -1 when unknown (no relay process id). Above maxOtherCores,
	// the figures are no evidence.
	OtherCPUCores float64 `json:"otherCpuCores"`
	// BaselineLoadAverageBefore and BaselineOtherCPUCores are the same
	// for the baseline's measured phase, with --baseline.
	BaselineLoadAverageBefore *float64 `json:"baselineLoadAverageBefore,omitempty"`
	BaselineOtherCPUCores     *float64 `json:"baselineOtherCpuCores,omitempty"`
	Mix                       string   `json:"mix"`
	WarmupSeconds             float64  `json:"warmupSeconds"`
	DurationSeconds           float64  `json:"durationSeconds"`
	// ElapsedSeconds is the measured phase's real length (the requests
	// under way at its end are waited for); rates are counted over it.
	ElapsedSeconds float64    `json:"elapsedSeconds"`
	Operations     []opReport `json:"operations"`
	// Total is every operation together (its latencies over all of them).
	Total opReport `json:"total"`
	// RelayPID is the relay's process id; 0 when unknown, and then the
	// CPU and memory figures are absent.
	RelayPID int `json:"relayPid,omitempty"`
	// RelayCPUSeconds is the relay's user+system CPU time during the
	// measured phase.
	RelayCPUSeconds float64 `json:"relayCpuSeconds,omitempty"`
	// RelayPeakRSSBytes is the relay's peak resident memory (VmHWM) at the
	// end of the measured phase.
	RelayPeakRSSBytes int64 `json:"relayPeakRssBytes,omitempty"`
	Subscribers       int   `json:"subscribers,omitempty"`
	// SubscriberEvents counts the events all subscribers received during
	// the measured phase.
	SubscriberEvents int64  `json:"subscriberEvents,omitempty"`
	SubscriberError  string `json:"subscriberError,omitempty"`
	// Baseline is the bare handler's get, with --baseline.
	Baseline *opReport `json:"baseline,omitempty"`
	// BaselineMissed is Missed for the baseline.
	BaselineMissed int `json:"baselineMissed,omitempty"`
	// BaselineBodyBytes is the size of the answer the baseline serves.
	BaselineBodyBytes int `json:"baselineBodyBytes,omitempty"`
	// GetFractionOfBaseline is the relay's get requests/s divided by the
	// baseline's.
	GetFractionOfBaseline float64 `json:"getFractionOfBaseline,omitempty"`
	// RelayCPUMicrosPerRequest is the relay's CPU time per answered
	// request of the measured phase.
	RelayCPUMicrosPerRequest float64 `json:"relayCpuMicrosPerRequest,omitempty"`
	// GeneratorCPUMicrosPerRequest is this load generator's own CPU time
	// per answered request of the measured phase: with the relay's, what a
	// request costs the machine, which bounds the rate two shared cores
	// can reach at all.
	GeneratorCPUMicrosPerRequest float64 `json:"generatorCpuMicrosPerRequest,omitempty"`
	// Fsync is one writer's fdatasync rate, with --fsync-floor.
	Fsync *fsyncResult `json:"fsync,omitempty"`
	// UpdateTimesFsync is the update requests/s divided by Fsync's rate.
	UpdateTimesFsync float64 `json:"updateTimesFsync,omitempty"`
}

// opReport is one operation's figures. Latencies are in milliseconds.
type opReport struct {
	Op         string  `json:"op"`
	Requests   int     `json:"requests"`
	PerSecond  float64 `json:"requestsPerSecond"`
	P50        float64 `json:"p50Ms"`
	P90        float64 `json:"p90Ms"`
	P99        float64 `json:"p99Ms"`
	Max        float64 `json:"maxMs"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"firstError,omitempty"`
}

// summarize turns an operation's results into its figures.
func summarize(op string, r *opResult, elapsed time.Duration) opReport {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	n := len(r.latencies)
	out := opReport{Op: op, Requests: n, Errors: r.errors, FirstError: r.firstError}
	if elapsed > 0 {
		out.PerSecond = float64(n) / elapsed.Seconds()
	}
	if n > 0 {
		out.P50 = ms(percentile(r.latencies, 0.50))
		out.P90 = ms(percentile(r.latencies, 0.90))
		out.P99 = ms(percentile(r.latencies, 0.99))
		out.Max = ms(r.latencies[n-1])
	}
	return out
}

// addPhase records the measured phase's operations and their total.
func (r *report) addPhase(mix []weighted, p phaseResult) {
	all := &opResult{}
	for _, name := range opNames {
		res, ok := p.ops[name]
		if !ok {
			continue
		}
		r.Operations = append(r.Operations, summarize(name, res, p.elapsed))
		all.latencies = append(all.latencies, res.latencies...)
		all.errors += res.errors
		if all.firstError == "" {
			all.firstError = res.firstError
		}
	}
	slices.Sort(all.latencies)
	r.Total = summarize("total", all, p.elapsed)
	r.Missed = p.missed
}

// addBaseline records the baseline's get and the relay's fraction of it.
func (r *report) addBaseline(p phaseResult, bodyBytes int) {
	b := summarize("baseline get", p.ops["get"], p.elapsed)
	r.Baseline = &b
	r.BaselineMissed = p.missed
	r.BaselineBodyBytes = bodyBytes
	for _, op := range r.Operations {
		if op.Op == "get" && b.PerSecond > 0 {
			r.GetFractionOfBaseline = op.PerSecond / b.PerSecond
		}
	}
}

// writeTable prints the report for people.
func (r *report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "relay %s, %s, concurrency %d, mix %s, %.1fs measured after %.1fs warm-up\n",
		r.Target, r.Protocol, r.Concurrency, r.Mix, r.ElapsedSeconds, r.WarmupSeconds)
	if r.RatePerSecond > 0 {
		fmt.Fprintf(w, "open loop: %g requests/s on a fixed schedule, latency counted from each request's scheduled start\n", r.RatePerSecond)
	}
	fmt.Fprintf(w, "one-minute load average: %s before, %s after (which the run itself raises); other processes' CPU during the measurement: %s\n",
		loadText(r.LoadAverageBefore), loadText(r.LoadAverageAfter), coresText(r.OtherCPUCores))
	if warning := quietnessWarning(r.LoadAverageBefore, r.OtherCPUCores); warning != "" {
		fmt.Fprintf(w, "WARNING: the relay's measurement: %s\n", warning)
	}
	if r.BaselineLoadAverageBefore != nil && r.BaselineOtherCPUCores != nil {
		fmt.Fprintf(w, "baseline's measurement: one-minute load average %s before; other processes' CPU: %s\n",
			loadText(*r.BaselineLoadAverageBefore), coresText(*r.BaselineOtherCPUCores))
		if warning := quietnessWarning(*r.BaselineLoadAverageBefore, *r.BaselineOtherCPUCores); warning != "" {
			fmt.Fprintf(w, "WARNING: the baseline's measurement: %s\n", warning)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\trequests\treq/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\terrors\t")
	rows := append([]opReport(nil), r.Operations...)
	if len(rows) > 1 {
		rows = append(rows, r.Total)
	}
	if r.Baseline != nil {
		rows = append(rows, *r.Baseline)
	}
	for _, o := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t\n", o.Op, o.Requests, o.PerSecond, o.P50, o.P90, o.P99, o.Max, o.Errors)
	}
	tw.Flush()
	fmt.Fprintln(w)
	if r.Missed > 0 {
		fmt.Fprintf(w, "WARNING: %d requests due were never started (every connection busy until the end): the relay did not keep up with %g requests/s\n", r.Missed, r.RatePerSecond)
	}
	if r.BaselineMissed > 0 {
		fmt.Fprintf(w, "WARNING: %d baseline requests due were never started: the bare handler did not keep up with %g requests/s\n", r.BaselineMissed, r.RatePerSecond)
	}
	for _, o := range rows {
		if o.FirstError != "" {
			fmt.Fprintf(w, "first %s error: %s\n", o.Op, oneLine(o.FirstError))
		}
	}
	if r.RelayPID != 0 {
		fmt.Fprintf(w, "relay CPU: %.2f s in %.1f s (%.0f%% of one core), %.0f µs per request, peak RSS %.1f MiB\n",
			r.RelayCPUSeconds, r.ElapsedSeconds, 100*r.RelayCPUSeconds/r.ElapsedSeconds, r.RelayCPUMicrosPerRequest, float64(r.RelayPeakRSSBytes)/(1<<20))
		fmt.Fprintf(w, "load generator CPU: %.0f µs per request\n", r.GeneratorCPUMicrosPerRequest)
	} else {
		fmt.Fprintln(w, "relay CPU and peak RSS: unknown (give --pid with --addr)")
	}
	if r.Subscribers > 0 {
		fmt.Fprintf(w, "SSE subscribers: %d, %d events received (%.0f/s)\n", r.Subscribers, r.SubscriberEvents, float64(r.SubscriberEvents)/r.ElapsedSeconds)
		if r.SubscriberError != "" {
			fmt.Fprintf(w, "SSE subscriber error: %s\n", r.SubscriberError)
		}
	}
	if r.Baseline != nil {
		fmt.Fprintf(w, "baseline: bare net/http handler serving the same %d bytes; relay get = %.2f of its throughput\n", r.BaselineBodyBytes, r.GetFractionOfBaseline)
	}
	if r.Fsync != nil {
		fmt.Fprintf(w, "fdatasync floor: one writer, %d bytes per write: %.0f durable writes/s (%.2f ms each); relay update = %.2f times that\n",
			r.Fsync.Bytes, r.Fsync.PerSecond, r.Fsync.MeanMs, r.UpdateTimesFsync)
	}
}

// writeJSON writes the report as JSON to path ("-": w).
func (r *report) writeJSON(path string, w io.Writer) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "-" {
		_, err = w.Write(data)
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// mixString formats a mix as --mix takes it.
func mixString(mix []weighted) string {
	parts := make([]string, len(mix))
	for i, m := range mix {
		parts[i] = fmt.Sprintf("%s=%d", m.op, m.weight)
	}
	return strings.Join(parts, ",")
}

// loadText formats a load average, -1 as unknown.
func loadText(load float64) string {
	if load < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.2f", load)
}

// coresText formats a share of one core as a percentage, -1 as unknown.
func coresText(cores float64) string {
	if cores < 0 {
		return "unknown (needs the relay's process id)"
	}
	return fmt.Sprintf("%.1f%% of one core", 100*cores)
}

// oneLine keeps an error text on one line of the report.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
