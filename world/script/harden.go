package script

import (
	"errors"
	"fmt"

	"github.com/dop251/goja"
)

// Hardening of the runtime's built-ins.
//
// goja checks for an interrupt between JavaScript instructions only, and its
// built-ins call each other directly in Go. That leaves three ways for a
// short script to escape the time limit or to take the whole process down,
// which the prelude below closes as far as it cheaply can:
//
//  1. Built-ins that call each other through properties the script can
//     replace (toString, valueOf, join, toLocaleString, toJSON, getters ...)
//     can recurse in Go without bound, e.g. `a.join = a.toString; "" + a` or
//     `e.message = e; String(e)`, which ends in a fatal Go stack overflow.
//     Every built-in that converts a generic this or calls back into it
//     (the methods and accessors of the Array, String, Object, Error,
//     RegExp and Function prototypes, Reflect, Array's statics, Date's
//     toJSON and the typed arrays' toString) is replaced by a Go wrapper
//     that counts how deeply wrapped built-ins nest and throws a
//     RangeError past MaxNativeDepth. Other built-ins check the type of
//     this or ignore it, so they cannot be made to call themselves.
//  2. Built-ins that recurse over a data structure: Array.prototype.flat,
//     JSON.parse and JSON.stringify get explicit depth limits.
//  3. Built-ins that allocate or loop in one step: ArrayBuffer and typed
//     array sizes are capped, Array.prototype methods (and Array.from,
//     Function.prototype.apply, Reflect.apply and Reflect.construct) refuse
//     array-likes longer than MaxArrayLength, and String.prototype.repeat,
//     padStart and padEnd refuse results longer than MaxStringLength.
//
// This is not a complete sandbox against a hostile script; see the package
// documentation.

// Limits of the hardened built-ins.
const (
	// MaxArrayLength is the longest array-like the guarded built-ins
	// accept.
	MaxArrayLength = 1 << 24
	// MaxBufferBytes is the largest ArrayBuffer or typed array.
	MaxBufferBytes = 64 << 20
	// MaxNativeDepth is how deeply the wrapped built-ins may nest.
	MaxNativeDepth = 1000
	// MaxJSONDepth is how deeply JSON.parse and JSON.stringify may nest.
	MaxJSONDepth = 5000
	// maxNativeFlat is the deepest Array.prototype.flat left to the
	// built-in; deeper flattening runs in JavaScript.
	maxNativeFlat = 100
)

var prelude = goja.MustCompile("prelude", `(function (limits, jsonDepthOK, depthReplacer, wrapNative) {
	"use strict";
	var G = globalThis;
	var apply = Reflect.apply, construct = Reflect.construct;
	var defineProperty = Object.defineProperty, getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
	var getOwnPropertyNames = Object.getOwnPropertyNames, getPrototypeOf = Object.getPrototypeOf;
	var isArray = Array.isArray;
	var floor = Math.floor, ceil = Math.ceil;
	var NativeRangeError = RangeError, NativeSyntaxError = SyntaxError;
	var NativeArrayBuffer = ArrayBuffer;
	var ArrayProto = Array.prototype;
	var maxString = limits.maxString, maxArray = limits.maxArray, maxBuffer = limits.maxBuffer;
	var maxJSONDepth = limits.maxJSONDepth, maxNativeFlat = limits.maxNativeFlat;

	function setMethod(obj, name, fn, length) {
		defineProperty(fn, "length", {value: length, configurable: true});
		defineProperty(obj, name, {value: fn, writable: true, enumerable: false, configurable: true});
	}
	function toInt(v) {
		var n = +v;
		if (n !== n) return 0;
		return n < 0 ? ceil(n) : floor(n);
	}
	function toLength(v) {
		var n = toInt(v);
		return n < 0 ? 0 : n;
	}
	function isObject(v) {
		return (typeof v === "object" && v !== null) || typeof v === "function";
	}
	function checkLength(o, what) {
		if (isObject(o)) {
			var n = o.length;
			if (typeof n === "number" && n > maxArray) {
				throw new NativeRangeError(what + ": more than " + maxArray + " elements");
			}
		}
	}

	// 3. Strings built in one step.
	var StringProto = String.prototype, repeat = StringProto.repeat;
	var padStart = StringProto.padStart, padEnd = StringProto.padEnd;
	function tooLong() {
		throw new NativeRangeError("Invalid string length: the limit is " + maxString + " characters");
	}
	setMethod(StringProto, "repeat", {repeat(count) {
		if (("" + this).length * +count > maxString) tooLong();
		return apply(repeat, this, arguments);
	}}.repeat, 1);
	setMethod(StringProto, "padStart", {padStart(targetLength) {
		if (+targetLength > maxString) tooLong();
		return apply(padStart, this, arguments);
	}}.padStart, 1);
	setMethod(StringProto, "padEnd", {padEnd(targetLength) {
		if (+targetLength > maxString) tooLong();
		return apply(padEnd, this, arguments);
	}}.padEnd, 1);

	// 3. Buffers: constructors that check the size first.
	function tooBig(n) {
		throw new NativeRangeError("Buffer of " + n + " bytes is over the limit of " + maxBuffer + " bytes");
	}
	// A replacement constructor rather than a Proxy: goja's proxies do not
	// support instanceof.
	var getOwnPropertySymbols = Object.getOwnPropertySymbols, setPrototypeOf = Object.setPrototypeOf;
	function guardConstructor(name, sizeOf) {
		var C = G[name];
		if (typeof C !== "function") return;
		var W = function () {
			if (new.target === undefined) return apply(C, this, arguments); // throws: needs new
			var n = sizeOf(arguments, C);
			if (n > maxBuffer) tooBig(n);
			return construct(C, arguments, new.target === W ? C : new.target);
		};
		var keys = getOwnPropertyNames(C), symbols = getOwnPropertySymbols(C);
		for (var i = 0; i < symbols.length; i++) keys[keys.length] = symbols[i];
		for (var j = 0; j < keys.length; j++) {
			if (keys[j] === "prototype") continue;
			defineProperty(W, keys[j], getOwnPropertyDescriptor(C, keys[j]));
		}
		W.prototype = C.prototype;
		setPrototypeOf(W, getPrototypeOf(C));
		defineProperty(G, name, {value: W, writable: true, enumerable: false, configurable: true});
		defineProperty(C.prototype, "constructor", {value: W, writable: true, enumerable: false, configurable: true});
	}
	guardConstructor("ArrayBuffer", function (args) { return toLength(args[0]); });
	["Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array", "Int32Array",
		"Uint32Array", "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array"].forEach(function (name) {
		guardConstructor(name, function (args, C) {
			var a = args[0], size = C.BYTES_PER_ELEMENT;
			if (!isObject(a)) return toLength(a) * size;
			if (a instanceof NativeArrayBuffer) return 0; // a view on an existing buffer
			var n = a.length;
			return typeof n === "number" ? toLength(n) * size : 0;
		});
	});

	// 2. Array.prototype.flat: deep flattening runs in JavaScript, where the
	// call stack limit applies (a cyclic array ends with a stack overflow).
	var flat = ArrayProto.flat;
	function flatInto(target, source, depth) {
		var len = toLength(source.length);
		if (len > maxArray) checkLength(source, "Array.prototype.flat");
		for (var i = 0; i < len; i++) {
			if (!(i in source)) continue;
			var el = source[i];
			if (depth > 0 && isArray(el)) {
				flatInto(target, el, depth - 1);
			} else {
				if (target.length >= maxArray) checkLength({length: maxArray + 1}, "Array.prototype.flat");
				defineProperty(target, target.length, {value: el, writable: true, enumerable: true, configurable: true});
			}
		}
	}
	setMethod(ArrayProto, "flat", {flat() {
		var depth = arguments.length > 0 && arguments[0] !== undefined ? toInt(arguments[0]) : 1;
		if (depth <= maxNativeFlat || this === null || this === undefined) return apply(flat, this, arguments);
		var out = [];
		flatInto(out, Object(this), depth);
		return out;
	}}.flat, 0);

	// 2. JSON depth limits.
	var JSONObject = JSON, parse = JSON.parse, stringify = JSON.stringify;
	setMethod(JSONObject, "parse", {parse(text, reviver) {
		var s = "" + text;
		if (!jsonDepthOK(s, maxJSONDepth)) {
			throw new NativeSyntaxError("JSON nested deeper than " + maxJSONDepth + " levels");
		}
		return arguments.length > 1 ? apply(parse, this, [s, reviver]) : apply(parse, this, [s]);
	}}.parse, 2);
	setMethod(JSONObject, "stringify", {stringify(value, replacer, space) {
		if (isArray(replacer)) {
			// A property list cannot be combined with the depth check:
			// check first, then let the property list work as usual.
			apply(stringify, this, [value, depthReplacer(undefined, maxJSONDepth)]);
			return apply(stringify, this, arguments);
		}
		var user = typeof replacer === "function" ? replacer : undefined;
		return apply(stringify, this, [value, depthReplacer(user, maxJSONDepth), space]);
	}}.stringify, 3);

	// 1 and 3. Wrap the built-ins that convert or call back into a generic
	// this: every function and accessor of the holders below, in a Go
	// wrapper that counts nesting (wrapNative). The other built-ins either
	// check the type of this (and throw for anything else) or ignore it, so
	// they cannot be made to call themselves.
	// The replacements above are wrapped as well.
	var hasOwn = Object.prototype.hasOwnProperty;
	var wrappers = new Map(), mapGet = Map.prototype.get, mapSet = Map.prototype.set;
	var setHas = Set.prototype.has;
	// Array.prototype methods that do not walk this.length.
	var constantTime = new Set(["push", "pop", "at", "keys", "values", "entries"]);
	// [label, index of the array-like argument]
	var argChecks = new Map([
		[Function.prototype.apply, ["Function.prototype.apply", 1]],
		[Reflect.apply, ["Reflect.apply", 2]],
		[Reflect.construct, ["Reflect.construct", 1]],
		[Array.from, ["Array.from", 0]],
	]);
	function wrappable(f) {
		// Constructors keep their identity.
		return typeof f === "function" && !apply(hasOwn, f, ["prototype"]);
	}
	function wrap(f, label, index) {
		var w = apply(mapGet, wrappers, [f]);
		if (!w) {
			w = wrapNative(f, label, index);
			apply(mapSet, wrappers, [f, w]);
		}
		return w;
	}
	function wrapAll(o, keys) {
		for (var i = 0; i < keys.length; i++) {
			var key = keys[i];
			var d = getOwnPropertyDescriptor(o, key);
			if (!d.configurable || key === "constructor") continue;
			if ("value" in d) {
				var f = d.value;
				if (!wrappable(f)) continue;
				var check = apply(mapGet, argChecks, [f]);
				if (check) {
					d.value = wrap(f, check[0], check[1]);
				} else if (o === ArrayProto && typeof key === "string" && !apply(setHas, constantTime, [key])) {
					d.value = wrap(f, "Array.prototype." + key, -1);
				} else {
					d.value = wrap(f, "", -2);
				}
			} else {
				var wrapGet = wrappable(d.get), wrapSet = wrappable(d.set);
				if (!wrapGet && !wrapSet) continue;
				if (wrapGet) d.get = wrap(d.get, "", -2);
				if (wrapSet) d.set = wrap(d.set, "", -2);
			}
			defineProperty(o, key, d);
		}
	}
	var RegExpProto = RegExp.prototype, TypedArrayProto = getPrototypeOf(Int8Array.prototype);
	[ArrayProto, StringProto, Object.prototype, Error.prototype, RegExpProto, Function.prototype,
		Reflect, Array].forEach(function (o) { wrapAll(o, getOwnPropertyNames(o)); });
	// Symbol-keyed methods that convert this (Array.prototype's iterator does
	// not, and goja's fast paths need it unchanged).
	wrapAll(RegExpProto, getOwnPropertySymbols(RegExpProto));
	wrapAll(StringProto, getOwnPropertySymbols(StringProto));
	wrapAll(Date.prototype, ["toJSON"]);
	// %TypedArray%.prototype.toString is Array.prototype.toString.
	wrapAll(TypedArrayProto, ["toString", "toLocaleString", "join"]);
})`, false)

// harden runs the prelude in the session's runtime.
func (s *session) harden() error {
	v, err := s.vm.RunProgram(prelude)
	if err != nil {
		return err
	}
	fn, ok := goja.AssertFunction(v)
	if !ok {
		return errors.New("the prelude is not a function")
	}
	limits := s.vm.NewObject()
	for k, n := range map[string]int{
		"maxString":     MaxStringLength,
		"maxArray":      MaxArrayLength,
		"maxBuffer":     MaxBufferBytes,
		"maxJSONDepth":  MaxJSONDepth,
		"maxNativeFlat": maxNativeFlat,
	} {
		if err := limits.Set(k, n); err != nil {
			return err
		}
	}
	s.rangeErrorCtor = s.vm.Get("RangeError")
	_, err = fn(goja.Undefined(), limits, s.vm.ToValue(jsonDepthOK), s.vm.ToValue(s.depthReplacer), s.vm.ToValue(s.wrapNative))
	return err
}

// rangeError makes a RangeError to throw.
func (s *session) rangeError(format string, args ...any) goja.Value {
	obj, err := s.vm.New(s.rangeErrorCtor, s.vm.ToValue(fmt.Sprintf(format, args...)))
	if err != nil {
		return s.vm.ToValue(fmt.Sprintf(format, args...))
	}
	return obj
}

// wrapNative returns a Go function standing in for the built-in f. It
// counts how deeply wrapped built-ins are nested in Go (they can call each
// other without a JavaScript frame in between) and throws a RangeError past
// MaxNativeDepth. With index -1 it refuses a this with a length over
// MaxArrayLength, with index >= 0 such an argument; label names the
// built-in in that error.
func (s *session) wrapNative(f goja.Value, label string, index int) goja.Value {
	fn, ok := goja.AssertFunction(f)
	if !ok {
		return f
	}
	orig := f.(*goja.Object)
	w := s.vm.ToValue(func(call goja.FunctionCall) goja.Value {
		s.nativeDepth++
		defer func() { s.nativeDepth-- }()
		if s.nativeDepth > MaxNativeDepth {
			panic(s.rangeError("Maximum call stack size exceeded"))
		}
		switch {
		case index == -1:
			s.checkLength(call.This, label)
		case index >= 0:
			s.checkLength(call.Argument(index), label)
		}
		v, err := fn(call.This, call.Arguments...)
		if err != nil {
			panic(err) // an exception or interrupt continues in JavaScript
		}
		return v
	}).(*goja.Object)
	for _, k := range []string{"name", "length"} {
		_ = w.DefineDataProperty(k, orig.Get(k), goja.FLAG_FALSE, goja.FLAG_TRUE, goja.FLAG_FALSE)
	}
	return w
}

// checkLength throws a RangeError for an array-like over MaxArrayLength.
func (s *session) checkLength(v goja.Value, label string) {
	obj, ok := v.(*goja.Object)
	if !ok {
		return
	}
	length := obj.Get("length")
	if length == nil {
		return
	}
	var n float64
	switch l := length.Export().(type) {
	case int64:
		n = float64(l)
	case float64:
		n = l
	}
	if n > MaxArrayLength {
		panic(s.rangeError("%s: more than %d elements", label, MaxArrayLength))
	}
}

// jsonDepthOK reports whether the JSON text nests at most max levels (it
// does not validate the text; JSON.parse does that).
func jsonDepthOK(text string, max int) bool {
	depth := 0
	inString, escaped := false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			if depth > max {
				return false
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return true
}

// depthReplacer returns a JSON.stringify replacer that calls the script's
// replacer (if any) and fails once the value being serialised nests deeper
// than max. JSON.stringify calls the replacer for every property, with the
// holding object as this, before descending into the property's value.
func (s *session) depthReplacer(user goja.Value, max int) goja.Value {
	var userFn goja.Callable
	if f, ok := goja.AssertFunction(user); ok {
		userFn = f
	}
	depths := map[*goja.Object]int{}
	return s.vm.ToValue(func(call goja.FunctionCall) goja.Value {
		value := call.Argument(1)
		if userFn != nil {
			v, err := userFn(call.This, call.Argument(0), value)
			if err != nil {
				panic(err) // an exception or interrupt continues in JavaScript
			}
			value = v
		}
		if obj, ok := value.(*goja.Object); ok {
			d := 1
			if holder, ok := call.This.(*goja.Object); ok {
				d = depths[holder] + 1
			}
			if d > max {
				panic(s.rangeError("JSON.stringify: value nested deeper than %d levels", max))
			}
			depths[obj] = d
		}
		return value
	})
}
