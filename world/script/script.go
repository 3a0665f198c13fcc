package script

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dlclark/regexp2/v2"
	"github.com/dop251/goja"

	"github.com/tabletop-relay/relay/world"
)

// Default limits, used where [Options] leaves a field zero.
const (
	DefaultTimeout        = 5 * time.Second
	DefaultMaxScriptBytes = 64 << 10
	DefaultMaxMemoryBytes = 256 << 20
	DefaultMaxResultBytes = 1 << 20
)

// Fixed limits; see the package documentation.
const (
	// MaxLogEntries and MaxLogBytes cap [Result.Logs].
	MaxLogEntries = 100
	MaxLogBytes   = 10 << 10
	// MaxDepth is how deeply a value crossing into Go may nest.
	MaxDepth = 256
	// MaxCallStack is the JavaScript call stack limit in frames. Unwinding a
	// deep stack that interleaves built-ins costs time quadratic in its
	// depth (goja re-panics at every level), so the limit stays well below
	// a browser's.
	MaxCallStack = 2500
	// MaxStringLength caps the results of String.prototype.repeat, padStart
	// and padEnd, in UTF-16 code units.
	MaxStringLength = 16 << 20
	// RegexpMatchTimeout bounds one backtracking regular expression match.
	RegexpMatchTimeout = time.Second
)

func init() {
	if regexp2.DefaultMatchTimeout == time.Duration(math.MaxInt64) {
		regexp2.DefaultMatchTimeout = RegexpMatchTimeout
	}
}

// Options tune a run. The zero value means the defaults.
type Options struct {
	// Timeout is the time limit of the whole run; DefaultTimeout when zero.
	Timeout time.Duration
	// MaxScriptBytes is the largest script accepted, in bytes;
	// DefaultMaxScriptBytes when zero.
	MaxScriptBytes int
	// MaxResultBytes is the largest result, and the largest value handed to
	// the world, in bytes of JSON; DefaultMaxResultBytes when zero.
	MaxResultBytes int
	// MaxMemoryBytes is how much the process's live heap may grow while
	// the script runs before it is stopped (see memory.go);
	// DefaultMaxMemoryBytes when zero. A Pool ignores it: its budget
	// (PoolOptions.MemoryBytes) applies.
	MaxMemoryBytes int64

	// reportedMemory, when set, is the limit that a memory error names
	// instead of MaxMemoryBytes: a worker's budget (see worker.go).
	reportedMemory int64
	// deadline, when set, is when the run's time is up instead of Timeout
	// after it starts: a worker's run ends exactly when its pool's does.
	deadline time.Time
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxScriptBytes <= 0 {
		o.MaxScriptBytes = DefaultMaxScriptBytes
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = DefaultMaxResultBytes
	}
	if o.MaxMemoryBytes <= 0 {
		o.MaxMemoryBytes = DefaultMaxMemoryBytes
	}
	return o
}

// World is the part of a world that scripts use: the game.* calls and the
// world's description.
type World interface {
	Info() world.Info
	Users(ctx context.Context) ([]world.User, error)
	Get(ctx context.Context, user *world.User, uuid string) (world.Document, error)
	Update(ctx context.Context, user *world.User, uuid string, data world.Document) (world.Document, error)
	Create(ctx context.Context, user *world.User, p world.CreateParams) (world.Document, error)
	Delete(ctx context.Context, user *world.User, uuid string) error
	Search(ctx context.Context, user *world.User, p world.SearchParams) ([]world.Document, error)
	Structure(ctx context.Context, user *world.User, p world.StructureParams) (world.Document, error)
}

// Every kind of world offering documents, search and folders serves scripts.
var _ World = interface {
	world.World
	world.Documents
	world.DocumentSearch
	world.Folders
}(nil)

// Result is what a script produced.
type Result struct {
	// Value is the script's return value as a JSON value: nil, bool,
	// float64, string, []any or map[string]any.
	Value any
	// Logs are the console entries, oldest first (see the package
	// documentation for the format and caps).
	Logs []string
	// LogsTruncated reports that console output was dropped or shortened.
	LogsTruncated bool
}

// Run executes script as the body of an async function against w, calling
// the world with user, and returns its result, in the calling process. See
// the package documentation for the JavaScript API and the limits: only a
// [Pool] holds them against every script.
//
// Errors:
//   - an empty or whitespace-only script: ErrInvalid "Invalid script
//     provided";
//   - a script over Options.MaxScriptBytes: ErrTooLarge;
//   - a syntax error, an uncaught exception or rejection (including an
//     uncaught world error), a result that cannot be turned into JSON or a
//     script whose promise never settles: ErrInvalid
//     "Error executing script: <message>";
//   - a result over Options.MaxResultBytes of JSON: ErrTooLarge;
//   - the time limit passing: ErrTimeout "Script exceeded the time limit of
//     <timeout>"; ctx's deadline passing: ErrTimeout too; ctx being
//     cancelled: an error wrapping ctx's cause (context.Canceled).
//
// The returned Result carries the console output collected so far even when
// Run fails. Run returns only once the runtime has stopped; it starts no
// goroutine that outlives it.
func Run(ctx context.Context, w World, user *world.User, script string, opts Options) (res Result, err error) {
	return runIn(ctx, nil, w, user, script, opts)
}

// runIn is Run in the runtime of a prepared session (see newSession), or in
// a new one when s is nil.
func runIn(ctx context.Context, s *session, w World, user *world.User, script string, opts Options) (res Result, err error) {
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

	// The script shares the wrapper's first line so that line numbers in
	// messages match the script's own.
	prg, err := goja.Compile("script", wrapperStart+script+"\n})", false)
	if err != nil {
		return Result{}, scriptError(syntaxMessage(err.Error()))
	}
	if s == nil {
		if s, err = newSession(); err != nil {
			return Result{}, err
		}
	}

	deadline := opts.deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(opts.Timeout)
	}
	runCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	vm := s.vm
	// Interrupt the runtime when the run's context ends; wait for that
	// callback before returning so that nothing outlives Run.
	fired := make(chan struct{})
	stop := context.AfterFunc(runCtx, func() {
		defer close(fired)
		vm.Interrupt(errStopped)
	})
	defer func() {
		if !stop() {
			<-fired
		}
	}()
	stopWatch := watchMemory(vm, opts.MaxMemoryBytes)
	defer stopWatch()

	s.parent, s.ctx = ctx, runCtx
	s.world, s.user, s.opts = w, user, opts
	defer func() {
		// goja reports JavaScript failures as errors, but a panic from the
		// engine or from a world implementation must not take the process
		// down: the runtime is discarded anyway.
		if r := recover(); r != nil {
			res = Result{Logs: s.logs, LogsTruncated: s.logsTruncated}
			if runCtx.Err() != nil {
				err = stoppedError(ctx, opts)
			} else {
				err = fmt.Errorf("script engine failure: %v", r)
			}
		}
	}()

	value, err := s.run(prg)
	res = Result{Logs: s.logs, LogsTruncated: s.logsTruncated}
	// The clock as well as the context: a busy runtime may not have run
	// the context's timer yet (a worker has one processor).
	if err == nil && (runCtx.Err() != nil || !time.Now().Before(deadline)) {
		err = errStopped
	}
	if err != nil {
		return res, s.failure(err)
	}
	res.Value = value
	return res, nil
}

const wrapperStart = "(async function () {"

var firstLinePosition = regexp.MustCompile(`script: Line 1:(\d+)`)

// syntaxMessage drops the file name from a syntax error and takes the
// wrapper's length off a column on the first line.
func syntaxMessage(msg string) string {
	msg = firstLinePosition.ReplaceAllStringFunc(msg, func(m string) string {
		col, err := strconv.Atoi(m[len("script: Line 1:"):])
		if err != nil || col <= len(wrapperStart) {
			return m
		}
		return fmt.Sprintf("script: Line 1:%d", col-len(wrapperStart))
	})
	return strings.ReplaceAll(msg, "script: Line ", "Line ")
}

// newSession returns a fresh runtime with the built-ins hardened, not yet
// tied to a run: the part of a run's set-up that needs neither the script
// nor the world, which a worker does while it waits for its script.
func newSession() (s *session, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("script engine failure: %v", r)
		}
	}()
	vm := goja.New()
	vm.SetMaxCallStackSize(MaxCallStack)
	s = &session{vm: vm, errorCtor: vm.Get("Error")}
	if err := s.harden(); err != nil {
		return nil, err
	}
	return s, nil
}

// errStopped marks a run stopped because its context ended.
var errStopped = errors.New("script stopped")

// session is the state of one run.
type session struct {
	parent context.Context // the caller's context
	ctx    context.Context // the run's context: parent plus the time limit
	vm     *goja.Runtime
	world  World
	user   *world.User
	opts   Options

	errorCtor      goja.Value // the pristine Error constructor
	rangeErrorCtor goja.Value // the pristine RangeError constructor
	nativeDepth    int        // nesting of wrapped built-ins (see wrapNative)
	logs           []string
	logBytes       int
	logsTruncated  bool
}

// run installs the API, runs the compiled script and exports its result.
// The session's runtime is hardened already (newSession).
func (s *session) run(prg *goja.Program) (any, error) {
	if err := s.install(); err != nil {
		return nil, err
	}
	fnValue, err := s.vm.RunProgram(prg)
	if err != nil {
		return nil, err
	}
	fn, ok := goja.AssertFunction(fnValue)
	if !ok {
		// Only a script that closes the wrapper function itself gets here.
		return nil, errors.New("the script is not a function body")
	}
	out, err := fn(goja.Undefined())
	if err != nil {
		return nil, err
	}
	if obj, ok := out.(*goja.Object); ok {
		if p, ok := obj.Export().(*goja.Promise); ok {
			switch p.State() {
			case goja.PromiseStateFulfilled:
				out = p.Result()
			case goja.PromiseStateRejected:
				return nil, &rejection{reason: p.Result()}
			default:
				return nil, errors.New("the script awaited a promise that never settled")
			}
		}
	}
	if s.ctx.Err() != nil {
		return nil, errStopped
	}
	return s.exportResult(out)
}

// rejection is a script's rejected promise.
type rejection struct{ reason goja.Value }

func (r *rejection) Error() string { return "promise rejected" }

// failure turns an error from a run into the error Run returns.
func (s *session) failure(err error) error {
	var (
		interrupted *goja.InterruptedError
		overflow    *goja.StackOverflowError
		exception   *goja.Exception
		rejected    *rejection
		exportErr   *exportError
	)
	var memory *memoryError
	if errors.As(err, &interrupted) {
		if m, ok := interrupted.Value().(*memoryError); ok {
			memory = m
		}
	}
	switch {
	case memory != nil:
		limit := memory.limit
		if s.opts.reportedMemory > 0 {
			limit = s.opts.reportedMemory
		}
		return memoryLimitError(limit)
	case errors.Is(err, errStopped), errors.As(err, &interrupted), s.ctx.Err() != nil:
		return stoppedError(s.parent, s.opts)
	case errors.As(err, &overflow):
		return scriptError("Maximum call stack size exceeded")
	case errors.As(err, &exception):
		return s.thrownError(exception.Value())
	case errors.As(err, &rejected):
		return s.thrownError(rejected.reason)
	case errors.As(err, &exportErr) && exportErr.tooLarge:
		return world.Errorf(world.ErrTooLarge, "Script result exceeds the size limit of %d bytes of JSON", s.opts.MaxResultBytes)
	default:
		return scriptError(err.Error())
	}
}

// thrownError reports a value the script threw, unless describing it ran
// past the time limit.
func (s *session) thrownError(v goja.Value) error {
	msg := s.describe(v)
	if s.ctx.Err() != nil {
		return stoppedError(s.parent, s.opts)
	}
	return scriptError(msg)
}

// describe gives the message of a thrown value: an error's message (or its
// String() when the message is empty), otherwise String(value).
func (s *session) describe(v goja.Value) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = "uncaught exception"
		}
	}()
	if v == nil {
		return "undefined"
	}
	if obj, ok := v.(*goja.Object); ok {
		if m := obj.Get("message"); m != nil && !goja.IsUndefined(m) && !goja.IsNull(m) {
			if text := m.String(); text != "" {
				return text
			}
		}
	}
	return v.String()
}

// memoryLimitError reports a script stopped for using more memory than
// limit bytes.
func memoryLimitError(limit int64) error {
	return world.Errorf(world.ErrInvalid, "Script exceeded the memory limit of %d MiB", limit>>20)
}

func scriptError(msg string) error {
	return world.Errorf(world.ErrInvalid, "Error executing script: %s", msg)
}

// stoppedError reports a run stopped by its time limit (the run's own or
// the caller's deadline) or by the caller cancelling ctx.
func stoppedError(ctx context.Context, opts Options) error {
	switch err := ctx.Err(); {
	case err == nil:
		return world.Errorf(world.ErrTimeout, "Script exceeded the time limit of %s", opts.Timeout)
	case errors.Is(err, context.DeadlineExceeded):
		return world.Errorf(world.ErrTimeout, "Script stopped: the request's deadline passed")
	default:
		return fmt.Errorf("Script cancelled: %w", context.Cause(ctx))
	}
}

// exportResult turns the script's result into a JSON value of at most
// MaxResultBytes.
func (s *session) exportResult(v goja.Value) (out any, err error) {
	defer func() {
		// Getters, proxies and toJSON methods run script code, which
		// reports failures by panicking when called from Go.
		if r := recover(); r != nil {
			out = nil
			err = recoveredError(r)
		}
	}()
	e := s.newExporter(s.opts.MaxResultBytes)
	out, _, err = e.export("", v)
	if err != nil {
		return nil, err
	}
	b, err := marshalJSON(out)
	if err != nil {
		return nil, err
	}
	if len(b) > s.opts.MaxResultBytes {
		return nil, &exportError{tooLarge: true}
	}
	return out, nil
}

// recoveredError turns a panic of goja's (a JavaScript exception, an
// interrupt or a stack overflow raised while Go called into the runtime)
// back into an error; any other panic continues.
func recoveredError(r any) error {
	switch r := r.(type) {
	case *goja.Exception:
		return r
	case *goja.InterruptedError:
		return r
	case *goja.StackOverflowError:
		return r
	}
	panic(r)
}

// marshalJSON encodes v as compact JSON without HTML escaping.
func marshalJSON(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}
