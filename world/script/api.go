package script

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/dop251/goja"

	"github.com/tabletop-relay/relay/world"
)

// install sets up the globals `game` and `console`.
func (s *session) install() error {
	vm := s.vm
	game := vm.NewObject()
	for name, fn := range map[string]func(goja.FunctionCall) goja.Value{
		"get":       s.gameGet,
		"search":    s.gameSearch,
		"update":    s.gameUpdate,
		"create":    s.gameCreate,
		"delete":    s.gameDelete,
		"users":     s.gameUsers,
		"structure": s.gameStructure,
	} {
		if err := game.Set(name, fn); err != nil {
			return err
		}
	}
	info := s.world.Info()
	if err := game.Set("world", s.toJS(map[string]any{
		"clientId": info.ClientID,
		"title":    info.Title,
		"system":   info.System,
	})); err != nil {
		return err
	}
	if err := vm.Set("game", game); err != nil {
		return err
	}

	console := vm.NewObject()
	for name, prefix := range map[string]string{
		"log": "", "info": "", "debug": "", "warn": "[warn] ", "error": "[error] ",
	} {
		if err := console.Set(name, s.consoleFunc(prefix)); err != nil {
			return err
		}
	}
	return vm.Set("console", console)
}

// argError is a bad argument to a game function; it becomes a TypeError.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func argErrorf(format string, args ...any) error {
	return &argError{msg: fmt.Sprintf(format, args...)}
}

// promise runs fn now (world calls are synchronous) and returns a promise
// settled with its outcome: the result as a JavaScript value, or the error
// as a JavaScript error. A JavaScript exception raised while reading the
// arguments (a throwing getter or toJSON) rejects the promise too; an
// interrupt or a stack overflow propagates and ends the script.
func (s *session) promise(fn func() (any, error)) goja.Value {
	p, resolve, reject := s.vm.NewPromise()
	v, err := func() (v any, err error) {
		defer func() {
			if r := recover(); r != nil {
				ex, ok := r.(*goja.Exception)
				if !ok {
					panic(r)
				}
				err = ex
			}
		}()
		return fn()
	}()
	var ex *goja.Exception
	switch {
	case err == nil:
		_ = resolve(s.toJS(v))
	case errors.As(err, &ex):
		_ = reject(ex.Value())
	case isUncatchable(err):
		panic(err)
	default:
		_ = reject(s.jsError(err))
	}
	return s.vm.ToValue(p)
}

// isUncatchable reports an error that must end the script: an interrupt or
// a stack overflow.
func isUncatchable(err error) bool {
	var (
		interrupted *goja.InterruptedError
		overflow    *goja.StackOverflowError
	)
	return errors.As(err, &interrupted) || errors.As(err, &overflow)
}

// jsError turns a Go error into a JavaScript error object.
func (s *session) jsError(err error) goja.Value {
	var arg *argError
	if errors.As(err, &arg) {
		return s.vm.NewTypeError("%s", arg.msg)
	}
	obj, cerr := s.vm.New(s.errorCtor, s.vm.ToValue(err.Error()))
	if cerr != nil {
		return s.vm.ToValue(err.Error())
	}
	var werr *world.Error
	if errors.As(err, &werr) {
		_ = obj.DefineDataProperty("name", s.vm.ToValue("WorldError"), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_FALSE)
		if werr.Kind != nil {
			_ = obj.DefineDataProperty("kind", s.vm.ToValue(werr.Kind.Error()), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE)
		}
	}
	return obj
}

// checkCtx refuses a world call once the run's time is up; the interrupt
// stops the script right after.
func (s *session) checkCtx() error {
	if s.ctx.Err() != nil {
		return stoppedError(s.parent, s.opts)
	}
	return nil
}

// stringArg reads a required string argument.
func stringArg(call goja.FunctionCall, i int, fn, name string) (string, error) {
	v := call.Argument(i)
	if s, ok := v.Export().(string); ok && !isObject(v) {
		return s, nil
	}
	return "", argErrorf("%s: %s must be a string", fn, name)
}

func isObject(v goja.Value) bool {
	_, ok := v.(*goja.Object)
	return ok
}

func absent(v goja.Value) bool {
	return v == nil || goja.IsUndefined(v) || goja.IsNull(v)
}

// objectArg reads an object argument as a JSON object; an absent optional
// one is nil.
func (s *session) objectArg(call goja.FunctionCall, i int, fn, name string, optional bool) (map[string]any, error) {
	v := call.Argument(i)
	if absent(v) {
		if optional {
			return nil, nil
		}
		return nil, argErrorf("%s: %s must be an object", fn, name)
	}
	obj, ok := v.(*goja.Object)
	if !ok || obj.ClassName() == "Array" {
		return nil, argErrorf("%s: %s must be an object", fn, name)
	}
	if _, ok := goja.AssertFunction(obj); ok {
		return nil, argErrorf("%s: %s must be an object", fn, name)
	}
	out, _, err := s.newExporter(s.opts.MaxResultBytes).export("", obj)
	if err != nil {
		var exportErr *exportError
		if errors.As(err, &exportErr) {
			if exportErr.tooLarge {
				return nil, argErrorf("%s: %s exceeds the size limit of %d bytes of JSON", fn, name, s.opts.MaxResultBytes)
			}
			return nil, argErrorf("%s: %s: %s", fn, name, exportErr.msg)
		}
		return nil, err
	}
	m, ok := out.(map[string]any)
	if !ok { // a toJSON that returned something else
		return nil, argErrorf("%s: %s must be an object", fn, name)
	}
	return m, nil
}

// Typed fields of an options object.

func optString(opts map[string]any, fn, key string) (string, error) {
	switch v := opts[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", argErrorf("%s: options.%s must be a string", fn, key)
	}
}

func optBool(opts map[string]any, fn, key string) (bool, error) {
	switch v := opts[key].(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	default:
		return false, argErrorf("%s: options.%s must be a boolean", fn, key)
	}
}

func optInt(opts map[string]any, fn, key string) (int, error) {
	switch v := opts[key].(type) {
	case nil:
		return 0, nil
	case float64:
		if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
			return 0, argErrorf("%s: options.%s must be a non-negative integer", fn, key)
		}
		return int(v), nil
	default:
		return 0, argErrorf("%s: options.%s must be a number", fn, key)
	}
}

func optStrings(opts map[string]any, fn, key string) ([]string, error) {
	switch v := opts[key].(type) {
	case nil:
		return nil, nil
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, item := range v {
			s, ok := item.(string)
			if !ok {
				return nil, argErrorf("%s: options.%s must be an array of strings", fn, key)
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, argErrorf("%s: options.%s must be an array of strings", fn, key)
	}
}

func (s *session) gameGet(call goja.FunctionCall) goja.Value {
	return s.promise(func() (any, error) {
		uuid, err := stringArg(call, 0, "game.get", "uuid")
		if err != nil {
			return nil, err
		}
		if err := s.checkCtx(); err != nil {
			return nil, err
		}
		return s.world.Get(s.ctx, s.user, uuid)
	})
}

func (s *session) gameSearch(call goja.FunctionCall) goja.Value {
	return s.promise(func() (any, error) {
		const fn = "game.search"
		var p world.SearchParams
		if q := call.Argument(0); !absent(q) {
			query, err := stringArg(call, 0, fn, "query")
			if err != nil {
				return nil, err
			}
			p.Query = query
		}
		if f := call.Argument(1); !absent(f) {
			if _, ok := f.(*goja.Object); ok {
				pairs, err := s.objectArg(call, 1, fn, "filter", false)
				if err != nil {
					return nil, err
				}
				keys := make([]string, 0, len(pairs))
				for k := range pairs {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				parts := make([]string, 0, len(keys))
				for _, k := range keys {
					switch v := pairs[k].(type) {
					case nil:
					case string:
						parts = append(parts, k+":"+v)
					case float64, bool:
						parts = append(parts, fmt.Sprintf("%s:%v", k, v))
					default:
						return nil, argErrorf("%s: filter values must be strings", fn)
					}
				}
				p.Filter = strings.Join(parts, ",")
			} else {
				filter, err := stringArg(call, 1, fn, "filter")
				if err != nil {
					return nil, err
				}
				p.Filter = filter
			}
		}
		opts, err := s.objectArg(call, 2, fn, "options", true)
		if err != nil {
			return nil, err
		}
		if p.Limit, err = optInt(opts, fn, "limit"); err != nil {
			return nil, err
		}
		if err := s.checkCtx(); err != nil {
			return nil, err
		}
		return s.world.Search(s.ctx, s.user, p)
	})
}

func (s *session) gameUpdate(call goja.FunctionCall) goja.Value {
	return s.promise(func() (any, error) {
		const fn = "game.update"
		uuid, err := stringArg(call, 0, fn, "uuid")
		if err != nil {
			return nil, err
		}
		data, err := s.objectArg(call, 1, fn, "data", false)
		if err != nil {
			return nil, err
		}
		if err := s.checkCtx(); err != nil {
			return nil, err
		}
		return s.world.Update(s.ctx, s.user, uuid, data)
	})
}

func (s *session) gameCreate(call goja.FunctionCall) goja.Value {
	return s.promise(func() (any, error) {
		const fn = "game.create"
		var (
			p   world.CreateParams
			err error
		)
		if p.Type, err = stringArg(call, 0, fn, "type"); err != nil {
			return nil, err
		}
		if p.Data, err = s.objectArg(call, 1, fn, "data", true); err != nil {
			return nil, err
		}
		if p.Data == nil {
			p.Data = world.Document{}
		}
		opts, err := s.objectArg(call, 2, fn, "options", true)
		if err != nil {
			return nil, err
		}
		if p.Folder, err = optString(opts, fn, "folder"); err != nil {
			return nil, err
		}
		if p.ParentUUID, err = optString(opts, fn, "parentUuid"); err != nil {
			return nil, err
		}
		if p.KeepID, err = optBool(opts, fn, "keepId"); err != nil {
			return nil, err
		}
		if err := s.checkCtx(); err != nil {
			return nil, err
		}
		return s.world.Create(s.ctx, s.user, p)
	})
}

func (s *session) gameDelete(call goja.FunctionCall) goja.Value {
	return s.promise(func() (any, error) {
		uuid, err := stringArg(call, 0, "game.delete", "uuid")
		if err != nil {
			return nil, err
		}
		if err := s.checkCtx(); err != nil {
			return nil, err
		}
		if err := s.world.Delete(s.ctx, s.user, uuid); err != nil {
			return nil, err
		}
		return goja.Undefined(), nil
	})
}

func (s *session) gameUsers(call goja.FunctionCall) goja.Value {
	return s.promise(func() (any, error) {
		if err := s.checkCtx(); err != nil {
			return nil, err
		}
		users, err := s.world.Users(s.ctx)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(users))
		for i, u := range users {
			out[i] = map[string]any{
				"id":   u.ID,
				"name": u.Name,
				"role": float64(u.Role),
				"isGM": u.IsGM(),
			}
		}
		return out, nil
	})
}

func (s *session) gameStructure(call goja.FunctionCall) goja.Value {
	return s.promise(func() (any, error) {
		const fn = "game.structure"
		opts, err := s.objectArg(call, 0, fn, "options", true)
		if err != nil {
			return nil, err
		}
		var p world.StructureParams
		if p.Types, err = optStrings(opts, fn, "types"); err != nil {
			return nil, err
		}
		if p.Path, err = optString(opts, fn, "path"); err != nil {
			return nil, err
		}
		if p.Recursive, err = optBool(opts, fn, "recursive"); err != nil {
			return nil, err
		}
		if p.Depth, err = optInt(opts, fn, "depth"); err != nil {
			return nil, err
		}
		if p.IncludeData, err = optBool(opts, fn, "includeData"); err != nil {
			return nil, err
		}
		if err := s.checkCtx(); err != nil {
			return nil, err
		}
		return s.world.Structure(s.ctx, s.user, p)
	})
}

// consoleFunc returns a console method that adds one log entry.
func (s *session) consoleFunc(prefix string) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		if len(s.logs) >= MaxLogEntries || s.logBytes >= MaxLogBytes {
			s.logsTruncated = true
			return goja.Undefined()
		}
		var b strings.Builder
		b.WriteString(prefix)
		for i, arg := range call.Arguments {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(s.format(arg))
			if b.Len() > MaxLogBytes {
				break
			}
		}
		line := b.String()
		if room := MaxLogBytes - s.logBytes; len(line) > room {
			line = truncateUTF8(line, room)
			s.logsTruncated = true
		}
		s.logs = append(s.logs, line)
		s.logBytes += len(line)
		return goja.Undefined()
	}
}

// format renders one console argument.
func (s *session) format(v goja.Value) string {
	obj, ok := v.(*goja.Object)
	if !ok {
		if v == nil {
			return "undefined"
		}
		if _, ok := v.(*goja.Symbol); ok {
			return "Symbol(" + v.String() + ")"
		}
		if _, ok := v.Export().(*big.Int); ok {
			return v.String() + "n"
		}
		return v.String()
	}
	if _, ok := goja.AssertFunction(obj); ok {
		name := obj.Get("name")
		if absent(name) || name.String() == "" {
			return "[Function (anonymous)]"
		}
		return "[Function: " + name.String() + "]"
	}
	if obj.ClassName() == "Error" {
		return obj.String()
	}
	out, _, err := s.newExporter(MaxLogBytes).export("", obj)
	var ex *goja.Exception
	switch {
	case err == nil:
	case errors.As(err, &ex), isUncatchable(err):
		// A throwing toJSON, or the end of the script's time: let it
		// propagate out of console.log.
		panic(err)
	default: // not JSON-able, too large, or the time limit reached
		return obj.String()
	}
	b, err := marshalJSON(out)
	if err != nil {
		return obj.String()
	}
	return b
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
