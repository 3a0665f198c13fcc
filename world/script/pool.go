package script

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// Defaults and bounds of a [Pool].
const (
	// DefaultWorkers is how many scripts may run at once.
	DefaultWorkers = 4
	// DefaultWorkerMemoryBytes is how much memory a script may use: how
	// far its worker may grow from its start-up footprint.
	DefaultWorkerMemoryBytes = 256 << 20
	// MinWorkerMemoryBytes is the smallest budget accepted: below it the
	// runtime's own growth (a thread stack, a heap arena's metadata) would
	// end workers that run nothing big.
	MinWorkerMemoryBytes = 32 << 20
	// DefaultWarmWorkers is how many started workers wait for scripts.
	DefaultWarmWorkers = 1
)

const (
	// KillGrace is how long past its time limit a script may take to
	// report before its worker is killed. A script is normally stopped by
	// its worker at the limit, with its logs; the kill stops one that sits
	// in a long built-in.
	KillGrace = 250 * time.Millisecond
	// workerStartLimit bounds the start of a worker, up to its hello.
	workerStartLimit = 10 * time.Second
	// stderrKeep is how much of a worker's standard error is kept to tell
	// why it died.
	stderrKeep = 8 << 10
	// residentSampleInterval is how often the pool samples a running
	// worker's resident set for its stats.
	residentSampleInterval = 20 * time.Millisecond
	// doneOverhead is what a done message may add to the result: the logs
	// (escaped as JSON) and the envelope.
	doneOverhead = 256 << 10
)

// PoolOptions configure a [Pool]. The zero value means the defaults.
type PoolOptions struct {
	// Workers bounds the scripts running at once; DefaultWorkers when 0.
	Workers int
	// MemoryBytes is how much memory a script may use: its worker's data
	// segment may grow by at most this much from its start-up footprint
	// (see limitWorker); DefaultWorkerMemoryBytes when 0.
	MemoryBytes int64
	// Warm is how many started workers wait idle for a script, once the
	// first script has run; DefaultWarmWorkers when 0, none when negative.
	Warm int
}

// PoolStats describe a pool's workers.
type PoolStats struct {
	// Started counts the workers started so far.
	Started int64
	// Running is how many scripts run now; Idle how many workers wait.
	Running, Idle int
	// PeakRSSBytes is the largest resident set seen of a worker, sampled
	// every residentSampleInterval while it runs and before the pool
	// kills it (Linux only). A worker that dies of its ceiling may have
	// grown a little past the last sample, never past the ceiling.
	PeakRSSBytes int64
}

// Pool runs scripts, each in a worker process of its own, with a wall-clock
// limit and a memory ceiling that hold whatever the script does.
//
// A worker is the running executable started again with [WorkerEnv] set:
// the binary must call [WorkerMain] first thing (see there). A worker
// applies its ceiling to itself before it runs anything (RLIMIT_DATA on
// Linux, see limitWorker), runs one script with [Run] and exits; the game.*
// calls come back to the pool, which makes them against the world with the
// caller's user. The pool kills a worker whose script is still running
// KillGrace past its time limit, or whose caller has gone; a worker that
// dies (killed, out of memory) takes nothing of the relay with it.
//
// At most Workers scripts run at once; a script waits for a free worker
// up to its time limit, then fails with ErrUnavailable. Once the first
// script has run, Warm workers are kept started and waiting, so that a
// script does not wait for a process to start.
type Pool struct {
	workers int
	memory  int64
	warm    int
	env     []string

	slots chan struct{} // one per running script
	idle  chan *worker  // started workers waiting for a script

	mu        sync.Mutex
	closed    bool
	refilling bool
	refills   sync.WaitGroup // background starts of warm workers
	retiring  sync.WaitGroup // workers being ended after their run

	started atomic.Int64
	peakRSS atomic.Int64
}

// NewPool returns a pool; it starts no process until the first script.
func NewPool(opts PoolOptions) (*Pool, error) {
	if opts.Workers < 0 {
		return nil, fmt.Errorf("script workers must not be negative, got %d", opts.Workers)
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = DefaultWorkerMemoryBytes
	}
	if opts.MemoryBytes < MinWorkerMemoryBytes {
		return nil, fmt.Errorf("the script memory limit must be at least %d bytes (%d MiB), got %d", int64(MinWorkerMemoryBytes), MinWorkerMemoryBytes>>20, opts.MemoryBytes)
	}
	if opts.Warm == 0 {
		opts.Warm = DefaultWarmWorkers
	}
	warm := max(opts.Warm, 0)
	return &Pool{
		workers: opts.Workers,
		memory:  opts.MemoryBytes,
		warm:    warm,
		// A worker gets only what it needs: its budget, one processor
		// (goja runs on one thread; the collector shares it) and short
		// crash reports. Nothing of the relay's environment (keys,
		// paths) reaches it.
		env: []string{
			WorkerEnv + "=" + strconv.FormatInt(opts.MemoryBytes, 10),
			"GOMAXPROCS=1",
			"GOTRACEBACK=single",
		},
		slots: make(chan struct{}, opts.Workers),
		idle:  make(chan *worker, max(warm, 1)),
	}, nil
}

// Workers returns how many scripts may run at once.
func (p *Pool) Workers() int { return p.workers }

// MemoryBytes returns how much memory a script may use.
func (p *Pool) MemoryBytes() int64 { return p.memory }

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats {
	return PoolStats{
		Started:      p.started.Load(),
		Running:      len(p.slots),
		Idle:         len(p.idle),
		PeakRSSBytes: p.peakRSS.Load(),
	}
}

// Close stops the idle workers; scripts that are running finish (or are
// stopped by their callers). Run fails with ErrUnavailable afterwards.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.refills.Wait()
	p.retiring.Wait()
	for {
		select {
		case w := <-p.idle:
			p.finish(w)
		default:
			return nil
		}
	}
}

// Run executes script as [Run] does, in a worker process, calling the world
// w with user. The limits of opts apply, except MaxMemoryBytes: the pool's
// ceiling replaces it. On top of Run's errors:
//   - a worker that runs out of memory: ErrInvalid "Script exceeded the
//     memory limit of <ceiling> MiB";
//   - all workers busy for the whole time limit, a closed pool, or a
//     worker killed by someone else (the system's out-of-memory killer):
//     ErrUnavailable;
//   - a worker that cannot start or dies of anything else: an internal
//     error.
func (p *Pool) Run(ctx context.Context, w World, user *world.User, script string, opts Options) (Result, error) {
	opts = opts.withDefaults()
	if strings.TrimSpace(script) == "" {
		return Result{}, world.Errorf(world.ErrInvalid, "Invalid script provided")
	}
	if len(script) > opts.MaxScriptBytes {
		return Result{}, world.Errorf(world.ErrTooLarge, "Script exceeds the size limit of %d bytes", opts.MaxScriptBytes)
	}
	if ctx.Err() != nil {
		return Result{}, stoppedError(ctx, opts)
	}
	if err := p.acquire(ctx, opts); err != nil {
		return Result{}, err
	}
	// A warm worker that died meanwhile (killed from outside) fails before
	// it gets its script; one fresh worker gets a second chance.
	for attempt := 0; ; attempt++ {
		wk, err := p.take()
		if err != nil {
			<-p.slots
			return Result{}, err
		}
		res, retry, err := p.runIn(ctx, wk, w, user, script, opts)
		if retry && attempt == 0 && ctx.Err() == nil {
			p.finish(wk) // it has ended already
			continue
		}
		p.retire(wk)
		return res, err
	}
}

// retire ends a worker whose run is over and then frees its slot: a slot
// is free only once its process is gone, but the caller need not wait for
// that (a process takes about a millisecond to go).
func (p *Pool) retire(wk *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.finish(wk)
		<-p.slots
		return
	}
	p.retiring.Add(1)
	go func() {
		defer p.retiring.Done()
		p.finish(wk)
		<-p.slots
	}()
}

// acquire waits for a free worker slot, up to the script's time limit.
func (p *Pool) acquire(ctx context.Context, opts Options) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	default:
	}
	wait := time.NewTimer(opts.Timeout)
	defer wait.Stop()
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return stoppedError(ctx, opts)
	case <-wait.C:
		return world.Errorf(world.ErrUnavailable, "Too many scripts are running (at most %d at once); try again later", p.workers)
	}
}

// take returns a started worker: a warm one, or a new one.
func (p *Pool) take() (*worker, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, world.Errorf(world.ErrUnavailable, "Scripts are not available: the relay is shutting down")
	}
	defer p.refill()
	for {
		select {
		case w := <-p.idle:
			select {
			case <-w.exited: // killed while it waited
				p.finish(w)
				continue
			default:
			}
			return w, nil
		default:
			return p.start()
		}
	}
}

// refill starts workers in the background until Warm of them wait.
func (p *Pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.warm == 0 || p.closed || p.refilling {
		return
	}
	p.refilling = true
	p.refills.Add(1)
	go func() {
		defer p.refills.Done()
		for {
			p.mu.Lock()
			if p.closed || len(p.idle) >= p.warm {
				p.refilling = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			w, err := p.start()
			if err != nil {
				// The next script starts its own worker and reports why
				// that fails.
				p.mu.Lock()
				p.refilling = false
				p.mu.Unlock()
				return
			}
			select {
			case p.idle <- w:
			default:
				p.finish(w)
			}
		}
	}()
}

// worker is a started worker process, as the pool sees it.
type worker struct {
	cmd    *exec.Cmd
	in     *os.File // the worker's standard input
	out    *os.File // the worker's standard output
	stderr *headBuffer
	exited chan struct{} // closed once the process has ended and is reaped

	stopOnce sync.Once
	reason   atomic.Int32 // why the pool stopped it (stopReason)
}

// Why the pool stopped a worker.
const (
	stopNone     int32 = iota
	stopStartup        // no hello within workerStartLimit
	stopTime           // the script's time limit plus KillGrace passed
	stopCaller         // the caller's context ended
	stopBroken         // the worker broke the protocol
	stopFinished       // the run is over
)

// start starts a worker process.
func (p *Pool) start() (*worker, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start a script worker: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("start a script worker: %w", err)
	}
	cmd := workerCommand()
	cmd.Env = p.env
	cmd.Dir = os.TempDir()
	cmd.Stdin = inR
	cmd.Stdout = outW
	w := &worker{cmd: cmd, in: inW, out: outR, stderr: &headBuffer{max: stderrKeep}, exited: make(chan struct{})}
	cmd.Stderr = w.stderr
	err = cmd.Start()
	// The worker holds its own ends now.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start a script worker: %w", err)
	}
	p.started.Add(1)
	go func() {
		_ = cmd.Wait()
		close(w.exited)
	}()
	return w, nil
}

// sample records the worker's resident peak so far in the pool's stats.
func (p *Pool) sample(w *worker) {
	select {
	case <-w.exited:
		return // reaped: its pid may be another process's by now
	default:
	}
	rss := residentPeak(w.cmd.Process.Pid)
	for {
		old := p.peakRSS.Load()
		if rss <= old || p.peakRSS.CompareAndSwap(old, rss) {
			return
		}
	}
}

// watchResident samples the worker's resident peak until stop is closed.
func (p *Pool) watchResident(w *worker, stop <-chan struct{}) {
	t := time.NewTicker(residentSampleInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-w.exited:
			return
		case <-t.C:
			p.sample(w)
		}
	}
}

// stop kills the worker for the given reason; the first reason stays.
// Its resident peak is sampled first: the pool's stats cover killed
// workers to the end.
func (p *Pool) stop(w *worker, reason int32) {
	w.stopOnce.Do(func() {
		w.reason.Store(reason)
		p.sample(w)
		_ = w.cmd.Process.Kill()
	})
}

// finish stops a worker that is done with and waits until it has ended:
// a worker slot is free only once its process is gone.
func (p *Pool) finish(w *worker) {
	p.stop(w, stopFinished)
	<-w.exited
	w.in.Close()
	w.out.Close()
}

// runIn runs the script in wk. retry reports a worker that failed before
// it could receive the script, which a fresh worker may not.
func (p *Pool) runIn(ctx context.Context, wk *worker, w World, user *world.User, script string, opts Options) (res Result, retry bool, err error) {
	unwatch := context.AfterFunc(ctx, func() { p.stop(wk, stopCaller) })
	defer unwatch()

	startLimit := time.AfterFunc(workerStartLimit, func() { p.stop(wk, stopStartup) })
	m, err := readFrame(wk.out, 1<<10)
	startLimit.Stop()
	if err != nil || m.Kind != msgHello {
		if err == nil {
			err = fmt.Errorf("unexpected %q message", m.Kind)
		}
		return Result{}, true, p.failure(ctx, wk, opts, "start", err)
	}

	// The time limit counts from here, for the script in the worker as
	// for its world calls here: the worker normally stops the script
	// itself at the deadline and reports it, and is killed only if it has
	// not by KillGrace later.
	deadline := time.Now().Add(opts.Timeout)
	runCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	hard := time.AfterFunc(opts.Timeout+KillGrace, func() { p.stop(wk, stopTime) })
	defer hard.Stop()
	sampling := make(chan struct{})
	defer close(sampling)
	go p.watchResident(wk, sampling)

	start := &message{Kind: msgStart, Start: &startMessage{
		Script: script,
		Options: wireOptions{
			Timeout:        opts.Timeout,
			Deadline:       deadline,
			MaxScriptBytes: opts.MaxScriptBytes,
			MaxResultBytes: opts.MaxResultBytes,
		},
		World: w.Info(),
	}}
	if err := writeFrame(wk.in, start); err != nil {
		// A worker that died before its script could reach it (its hello
		// waited in the pipe) has not run anything either.
		return Result{}, true, p.failure(ctx, wk, opts, "start", err)
	}
	limit := opts.MaxResultBytes + doneOverhead
	for {
		m, err := readFrame(wk.out, limit)
		if err != nil {
			return Result{}, false, p.failure(ctx, wk, opts, "run", err)
		}
		switch {
		case m.Kind == msgCall && m.Call != nil:
			reply := &message{Kind: msgReply, ID: m.ID, Reply: p.call(runCtx, w, user, m.Call)}
			// A worker that stopped its script meanwhile no longer reads:
			// what it sent instead (done) or its end comes next.
			_ = writeFrame(wk.in, reply)
		case m.Kind == msgDone && m.Done != nil:
			return decodeDone(m.Done), false, doneError(m.Done)
		default:
			return Result{}, false, p.failure(ctx, wk, opts, "run", fmt.Errorf("unexpected %q message", m.Kind))
		}
	}
}

// failure tells why a run ended without a result: the reason the pool
// stopped the worker, else what the worker's crash report says.
func (p *Pool) failure(ctx context.Context, wk *worker, opts Options, step string, cause error) error {
	p.stop(wk, stopBroken) // no-op when it was stopped already
	<-wk.exited
	switch wk.reason.Load() {
	case stopCaller:
		return stoppedError(ctx, opts)
	case stopTime:
		return world.Errorf(world.ErrTimeout, "Script exceeded the time limit of %s", opts.Timeout)
	case stopStartup:
		return fmt.Errorf("script worker did not start within %s", workerStartLimit)
	}
	report := wk.stderr.String()
	switch {
	case strings.Contains(report, "out of memory"), strings.Contains(report, "cannot allocate memory"):
		return memoryLimitError(p.memory)
	case strings.Contains(report, "stack overflow"), strings.Contains(report, "stack exceeds"):
		return scriptError("Maximum call stack size exceeded")
	}
	if wk.cmd.ProcessState.ExitCode() == -1 {
		// A signal the pool did not send: most likely the system's
		// out-of-memory killer, or an operator.
		return world.Errorf(world.ErrUnavailable, "Script stopped: its worker process was killed from outside the relay (%s)", wk.cmd.ProcessState)
	}
	if line, _, _ := strings.Cut(strings.TrimSpace(report), "\n"); line != "" {
		return fmt.Errorf("script worker failed at %s (%v; %s): %s", step, cause, wk.cmd.ProcessState, line)
	}
	return fmt.Errorf("script worker failed at %s (%v; %s)", step, cause, wk.cmd.ProcessState)
}

// decodeDone turns a done message into a Result.
func decodeDone(d *doneMessage) Result {
	res := Result{Logs: d.Logs, LogsTruncated: d.LogsTruncated}
	if d.Error == nil && len(d.Value) > 0 {
		if err := json.Unmarshal(d.Value, &res.Value); err != nil {
			res.Value = nil
		}
	}
	return res
}

// doneError is the error of a done message, if any.
func doneError(d *doneMessage) error {
	if d.Error != nil {
		return d.Error.toError()
	}
	if len(d.Value) > 0 && !json.Valid(d.Value) {
		return errors.New("script worker sent a malformed result")
	}
	return nil
}

// call makes a worker's game.* call against the world, with the caller's
// user and the run's context.
func (p *Pool) call(ctx context.Context, w World, user *world.User, c *callMessage) (reply *replyMessage) {
	defer func() {
		// A world implementation that panics fails the call, as it did
		// in process.
		if r := recover(); r != nil {
			reply = &replyMessage{Error: &wireError{Message: fmt.Sprintf("world call failed: %v", r)}}
		}
	}()
	var (
		v   any
		err error
	)
	switch c.Method {
	case callGet:
		if gj, ok := w.(interface {
			GetJSON(context.Context, *world.User, string) ([]byte, error)
		}); ok {
			raw, err := gj.GetJSON(ctx, user, c.UUID)
			if err != nil {
				return &replyMessage{Error: toWireError(err)}
			}
			return &replyMessage{Value: raw}
		}
		v, err = w.Get(ctx, user, c.UUID)
	case callSearch:
		v, err = w.Search(ctx, user, deref(c.Search))
	case callUpdate:
		v, err = w.Update(ctx, user, c.UUID, c.Data)
	case callCreate:
		v, err = w.Create(ctx, user, deref(c.Create))
	case callDelete:
		err = w.Delete(ctx, user, c.UUID)
	case callUsers:
		v, err = w.Users(ctx)
	case callStructure:
		v, err = w.Structure(ctx, user, deref(c.Structure))
	default:
		err = fmt.Errorf("unknown world call %q", c.Method)
	}
	if err != nil {
		return &replyMessage{Error: toWireError(err)}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return &replyMessage{Error: toWireError(err)}
	}
	return &replyMessage{Value: raw}
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// headBuffer keeps the first max bytes written to it and drops the rest.
type headBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *headBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *headBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
