package script

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"

	"github.com/tabletop-relay/relay/world"
)

// WorkerEnv is the environment variable that marks a process started by a
// [Pool] as a script worker; its value is the worker's memory budget in
// bytes. It is internal to the pool: nothing else should set it.
const WorkerEnv = "RELAY_INTERNAL_SCRIPT_WORKER"

// Exit codes of a worker.
const (
	workerExitSetup = 3 // the worker could not apply its limits
	workerExitPipe  = 4 // the parent went away or broke the protocol
)

// workerMaxStack bounds a goroutine's stack in a worker, so that Go
// recursion the hardening missed ends as a stack overflow (reported as
// "Maximum call stack size exceeded") rather than as memory exhaustion.
const workerMaxStack = 128 << 20

// maxReplyBytes bounds a reply a worker reads; the ceiling bounds it
// further.
const maxReplyBytes = math.MaxInt32

// callOverhead is what a call message may add to its largest argument.
const callOverhead = 64 << 10

// goMemory is the memory the Go runtime holds from the system now.
func goMemory() int64 {
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(sample)
	var total, released uint64
	if sample[0].Value.Kind() == metrics.KindUint64 {
		total = sample[0].Value.Uint64()
	}
	if sample[1].Value.Kind() == metrics.KindUint64 {
		released = sample[1].Value.Uint64()
	}
	if released > total {
		return 0
	}
	return int64(total - released)
}

// WorkerMain turns the process into a script worker when a [Pool] started
// it as one (see [WorkerEnv]): it then serves one script and exits, never
// returning. In any other process it returns at once.
//
// A binary that runs scripts through a Pool must call WorkerMain first
// thing in main, and so must the TestMain of every test binary that does,
// because a pool starts its workers by running its own executable again.
func WorkerMain() {
	v, ok := os.LookupEnv(WorkerEnv)
	if !ok {
		return
	}
	os.Exit(serveWorker(v, os.Stdin, os.Stdout, os.Stderr, func() { os.Exit(workerExitPipe) }))
}

// serveWorker applies the limits, says hello, runs the one script the
// parent sends and reports its outcome. It returns the exit code.
// parentGone runs when the parent closes its end (the worker has nothing
// left to do then).
func serveWorker(config string, in io.Reader, out io.Writer, errOut io.Writer, parentGone func()) int {
	budget, err := strconv.ParseInt(config, 10, 64)
	if err != nil || budget <= 0 {
		fmt.Fprintf(errOut, "script worker: %s=%q is not a memory budget in bytes\n", WorkerEnv, config)
		return workerExitSetup
	}
	// Three layers, from the gentlest: the watchdog (memory.go) stops a
	// script whose live heap grows by half the budget, with a clear error
	// and the logs so far (the other half leaves room for garbage); past
	// three quarters of the budget the collector works harder rather than
	// let the heap grow; and the ceiling (limitWorker) refuses the process
	// any memory past the budget, so that whatever gets past the first two
	// ends the worker, which the pool reports as the same error.
	debug.SetMemoryLimit(goMemory() + budget/4*3)
	debug.SetMaxStack(workerMaxStack)
	if err := limitWorker(budget); err != nil {
		fmt.Fprintln(errOut, "script worker:", err)
		return workerExitSetup
	}

	// The runtime is made and hardened before the worker says hello, so a
	// warm worker has it ready when its script comes.
	session, err := newSession()
	if err != nil {
		fmt.Fprintln(errOut, "script worker:", err)
		return workerExitSetup
	}
	conn := newWorkerConn(in, out, parentGone)
	if err := conn.send(&message{Kind: msgHello}); err != nil {
		return workerExitPipe
	}
	m, ok := <-conn.in
	if !ok || m.Kind != msgStart || m.Start == nil {
		return workerExitPipe
	}
	start := m.Start
	opts := Options{
		Timeout:        start.Options.Timeout,
		MaxScriptBytes: start.Options.MaxScriptBytes,
		MaxResultBytes: start.Options.MaxResultBytes,
		MaxMemoryBytes: budget / 2,
		reportedMemory: budget,
		deadline:       start.Options.Deadline,
	}.withDefaults()
	rw := &remoteWorld{conn: conn, info: start.World, maxCall: opts.MaxResultBytes + callOverhead}
	res, err := runIn(context.Background(), session, rw, nil, start.Script, opts)

	done := &doneMessage{Logs: res.Logs, LogsTruncated: res.LogsTruncated}
	if err == nil {
		var text string
		if text, err = marshalJSON(res.Value); err == nil {
			done.Value = json.RawMessage(text)
		}
	}
	if err != nil {
		done.Error = toWireError(err)
	}
	if err := conn.send(&message{Kind: msgDone, Done: done}); err != nil {
		return workerExitPipe
	}
	return 0
}

// workerConn is the worker's end of the protocol. One goroutine reads the
// parent's messages into in, so that the worker notices at once when the
// parent goes away; the script's goroutine writes.
type workerConn struct {
	out io.Writer
	in  chan *message
}

func newWorkerConn(r io.Reader, w io.Writer, parentGone func()) *workerConn {
	c := &workerConn{out: w, in: make(chan *message, 1)}
	go func() {
		defer close(c.in)
		for {
			m, err := readFrame(r, maxReplyBytes)
			if err != nil {
				parentGone()
				return
			}
			c.in <- m
		}
	}()
	return c
}

func (c *workerConn) send(m *message) error { return writeFrame(c.out, m) }

// remoteWorld is the world as a worker sees it: every call goes to the
// parent, which makes it with the caller's user. The user a script passes
// is ignored here for that reason.
type remoteWorld struct {
	conn    *workerConn
	info    world.Info
	maxCall int // the largest call message, in bytes of JSON
	nextID  uint64
}

// call sends c and decodes the reply's value into out (nil: no value).
func (r *remoteWorld) call(ctx context.Context, c *callMessage, out any) error {
	r.nextID++
	id := r.nextID
	frame, err := encodeFrame(&message{Kind: msgCall, ID: id, Call: c})
	if err != nil {
		return err
	}
	if len(frame) > r.maxCall {
		return world.Errorf(world.ErrTooLarge, "game.%s: the arguments exceed the size limit of %d bytes of JSON", c.Method, r.maxCall)
	}
	if _, err := r.conn.out.Write(frame); err != nil {
		return fmt.Errorf("game.%s: the relay is gone: %w", c.Method, err)
	}
	for {
		select {
		case m, ok := <-r.conn.in:
			if !ok {
				return fmt.Errorf("game.%s: the relay is gone", c.Method)
			}
			if m.Kind != msgReply || m.ID != id || m.Reply == nil {
				continue // a late reply to a call given up on
			}
			if m.Reply.Error != nil {
				return m.Reply.Error.toError()
			}
			if out == nil {
				return nil
			}
			if err := json.Unmarshal(m.Reply.Value, out); err != nil {
				return fmt.Errorf("game.%s: malformed reply: %w", c.Method, err)
			}
			return nil
		case <-ctx.Done():
			// The run's time is up; the interrupt ends the script next.
			return ctx.Err()
		}
	}
}

func (r *remoteWorld) Info() world.Info { return r.info }

func (r *remoteWorld) Users(ctx context.Context) ([]world.User, error) {
	var out []world.User
	err := r.call(ctx, &callMessage{Method: callUsers}, &out)
	return out, err
}

func (r *remoteWorld) Get(ctx context.Context, _ *world.User, uuid string) (world.Document, error) {
	var out world.Document
	err := r.call(ctx, &callMessage{Method: callGet, UUID: uuid}, &out)
	return out, err
}

func (r *remoteWorld) Update(ctx context.Context, _ *world.User, uuid string, data world.Document) (world.Document, error) {
	var out world.Document
	err := r.call(ctx, &callMessage{Method: callUpdate, UUID: uuid, Data: data}, &out)
	return out, err
}

func (r *remoteWorld) Create(ctx context.Context, _ *world.User, p world.CreateParams) (world.Document, error) {
	var out world.Document
	err := r.call(ctx, &callMessage{Method: callCreate, Create: &p}, &out)
	return out, err
}

func (r *remoteWorld) Delete(ctx context.Context, _ *world.User, uuid string) error {
	return r.call(ctx, &callMessage{Method: callDelete, UUID: uuid}, nil)
}

func (r *remoteWorld) Search(ctx context.Context, _ *world.User, p world.SearchParams) ([]world.Document, error) {
	var out []world.Document
	err := r.call(ctx, &callMessage{Method: callSearch, Search: &p}, &out)
	return out, err
}

func (r *remoteWorld) Structure(ctx context.Context, _ *world.User, p world.StructureParams) (world.Document, error) {
	var out world.Document
	err := r.call(ctx, &callMessage{Method: callStructure, Structure: &p}, &out)
	return out, err
}
