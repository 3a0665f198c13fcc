// Package script runs a GM's JavaScript against a world: the engine behind
// the relay's `POST /execute-js`.
//
// [Run] executes the script as the body of an async function, so `return x`
// gives the result and `await` works at the top level, in a fresh
// [github.com/dop251/goja] runtime with a time limit. The runtime holds the
// ECMAScript built-ins (Object, Array, JSON, Math, Date, Promise, RegExp, Map,
// ...) plus the two globals described below, `game` and `console`; there is
// no `require`, `process`, `fetch`, `XMLHttpRequest`, `setTimeout` or any
// other file, network, process or timer access. Nothing survives between two
// runs.
//
// # The JavaScript API
//
// Every `game` function returns a Promise, as the tabletop's own document
// API does, so scripts `await` them. A world error (not found, permission
// denied, ...) rejects the promise with an Error whose `message` is the
// world's message, whose `name` is "WorldError" and whose `kind` is the
// error kind's text ("invalid argument", "not found", "permission denied",
// "conflict", "failed precondition", "unavailable", "too large",
// "time-out"); a script can catch it with try/catch around the await. A bad
// argument (a uuid that is not a string, data that is not an object) rejects
// the promise with a TypeError. Documents cross into the world as plain JSON
// values (see "Values" below) and come back as fresh plain JavaScript objects
// that the script may change freely.
//
//	game.get(uuid)
//	    Resolves to the document with this uuid (World.Get).
//	game.search(query, filter?, {limit}?)
//	    Resolves to an array of search entries whose name matches query
//	    (World.Search). filter is a document type ("Actor"), a string of
//	    comma-separated key:value pairs ("documentType:Actor,folder:abc") or
//	    an object of such pairs ({documentType: "Actor"}). limit defaults to
//	    the world's default (200).
//	game.update(uuid, data)
//	    Applies the update diff data (an object; dotted keys allowed as the
//	    world allows them) and resolves to the updated document
//	    (World.Update).
//	game.create(type, data?, {folder, parentUuid, keepId}?)
//	    Creates a document of the given type (Actor, Item, ..., or an
//	    embedded type with parentUuid) and resolves to it (World.Create).
//	    folder is a folder id; keepId keeps data._id.
//	game.delete(uuid)
//	    Deletes the document and resolves to undefined (World.Delete).
//	game.users()
//	    Resolves to the world's users as [{id, name, role, isGM}]
//	    (World.Users).
//	game.structure({types, path, recursive, depth, includeData}?)
//	    Resolves to the folder tree (World.Structure). types is an array of
//	    document names (or one name), path is "" or "Folder.<id>".
//	game.world
//	    A plain object {clientId, title, system} describing the world.
//
//	console.log(...args), console.info, console.debug, console.warn,
//	console.error
//	    Each call adds one entry to [Result.Logs]: the arguments joined by
//	    spaces, strings as they are, objects and arrays as JSON, other values
//	    as String(value). warn and error entries start with "[warn] " and
//	    "[error] ". At most 100 entries and 10 KiB are kept; the rest is
//	    dropped and [Result.LogsTruncated] is set.
//
// Every world call is made with the user given to [Run] and with a context
// that ends at the script's time limit.
//
// An example script:
//
//	const hits = await game.search("goblin", "Actor");
//	let healed = 0;
//	for (const hit of hits) {
//	  const actor = await game.get(hit.uuid);
//	  const hp = actor.system?.attributes?.hp;
//	  if (!hp || hp.value >= hp.max) continue;
//	  try {
//	    await game.update(hit.uuid, {"system.attributes.hp.value": hp.max});
//	    healed++;
//	  } catch (e) {
//	    console.warn(`could not heal ${actor.name}: ${e.message}`);
//	  }
//	}
//	console.log(`healed ${healed} of ${hits.length} in ${game.world.title}`);
//	return {healed, total: hits.length};
//
// # Values
//
// Values cross between JavaScript and Go as JSON would, with JSON.stringify's
// rules: objects become map[string]any (own enumerable keys; `toJSON` is
// honoured, so a Date becomes its ISO string), arrays []any, numbers float64
// (NaN and ±Infinity become nil), strings string, booleans bool and null
// nil; functions, symbols and undefined are dropped from objects, become
// null in arrays and nil at the top level. A BigInt, a circular structure or
// nesting deeper than [MaxDepth] levels is an error. The script's result and
// every value handed to the world are limited to [Options.MaxResultBytes] of
// JSON.
//
// # Limits
//
// [Run] executes a script in the calling process; [Pool.Run] executes it in
// a worker process of its own, and is what the relay uses. The limits:
//
//   - Time ([Options.Timeout]). When it passes, or when the caller's
//     context ends, the runtime is interrupted at the next JavaScript
//     instruction and any world call in progress sees its context end. An
//     instruction can last long, though: a built-in (a sort, a join,
//     JSON.stringify of a large array) runs to its end before the runtime
//     looks at the interrupt. In a Pool, the worker is killed if its
//     script has not stopped [KillGrace] past its time limit: no script
//     outlives its limit by more than that, whatever it does.
//   - Memory. goja has no memory limit of its own. A watchdog (memory.go)
//     stops a script once the live heap has grown by more than
//     [Options.MaxMemoryBytes] during the run ("Script exceeded the memory
//     limit of 256 MiB"); it sees the heap only as of the last garbage
//     collection and cannot stop a single built-in that allocates. In a
//     Pool, the worker's data segment (its heap, stacks, everything a
//     script can make it allocate) cannot grow by more than the pool's
//     budget ([PoolOptions.MemoryBytes]): the operating system refuses the
//     memory (RLIMIT_DATA, set by the worker on itself before anything
//     runs), the worker dies, and the pool reports the same error. Inside
//     the worker the watchdog stops at half the budget and the collector
//     works harder past three quarters, so most scripts get the clear
//     error, with their logs, before the hard ceiling.
//   - Isolation. A worker holds nothing of the relay's: no world, no keys,
//     no environment, only its script; the game.* calls are messages to
//     the pool, which makes them with the caller's user. A worker that
//     dies takes nothing else with it, and the relay's own memory and
//     collector never see a script's allocations. Workers run at a lower
//     scheduling priority than the relay and on one processor each, and at
//     most [PoolOptions.Workers] run at once.
//
// goja cannot interrupt a built-in while it runs, so the package also
// hardens the built-ins where that is cheap (see harden.go), which turns
// the common runaway cases into quick, catchable errors rather than kills:
//
//   - the JavaScript call stack is limited to [MaxCallStack] frames (deep
//     recursion ends the script with "Maximum call stack size exceeded");
//   - built-ins that can be made to call themselves through properties
//     the script controls (`a.join = a.toString; "" + a`, an error whose
//     message is itself, ...) would otherwise recurse in Go until the
//     process dies of a stack overflow; they are wrapped and throw a
//     RangeError past [MaxNativeDepth] nested calls;
//   - Array.prototype.flat(Infinity) on a cyclic array, JSON.parse and
//     JSON.stringify are limited in depth ([MaxJSONDepth]);
//   - ArrayBuffer and typed arrays are limited to [MaxBufferBytes];
//     Array.prototype methods, Array.from, Function.prototype.apply,
//     Reflect.apply and Reflect.construct refuse array-likes longer than
//     [MaxArrayLength] (a loop over `new Array(1e9)` inside one built-in
//     would run past any time limit); String.prototype.repeat, padStart and
//     padEnd refuse results over [MaxStringLength] characters;
//   - a backtracking regular expression match (one that goja hands to
//     regexp2: look-arounds, back-references) gives up after
//     [RegexpMatchTimeout] and reports no match. This sets
//     regexp2.DefaultMatchTimeout, which is process-wide, in the package's
//     init (only if nothing else has set it).
//
// In process, these are the only guards: a few built-ins outside the list
// can still run for a while on a large input, one built-in can allocate
// past the watchdog, and goja is not a security boundary. Hostile scripts
// belong in a Pool.
package script
