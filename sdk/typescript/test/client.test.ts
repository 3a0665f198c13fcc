// The client against a real relay: a document read, an update, a /dnd5e
// operation and an event stream (the tour the SDK promises), the key,
// world and user options with their per-call overrides, errors, a stream
// that resumes after a network drop, and the runnable example.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { RelayClient, RelayError, type StreamEvent } from "../src/index.js";
import { dropProxy, startRelay, type TestRelay } from "./relay.js";

const aria = "Actor.ariaVale00000001";
const brom = "Actor.bromIronfist0001";
const guard = "Actor.townGuard0000001";

let relay: TestRelay;
let aliceKey: string;

before(async () => {
  relay = await startRelay();
  const admin = new RelayClient({ baseUrl: relay.baseUrl, apiKey: relay.adminKey });
  const created = await admin.post("/keys", {
    name: "sdk-ts-test",
    scopes: ["entity:read", "entity:write", "dnd5e", "events:subscribe"],
    clientIds: ["demo"],
    scopedUserId: "Alice",
  });
  aliceKey = created.data.key;
});

after(async () => {
  await relay?.stop();
});

/** Pulls events off a stream until one passes match, or fails after a generous wait. */
async function next<E extends { event: string }>(it: AsyncIterator<E>, match: (e: E) => boolean): Promise<E> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("no matching event within 15s")), 15_000);
  });
  try {
    for (;;) {
      const r = await Promise.race([it.next(), timeout]);
      if (r.done) throw new Error("the stream ended");
      if (match(r.value)) return r.value;
    }
  } finally {
    clearTimeout(timer);
  }
}

type ActorEvent = StreamEvent<"/actor/subscribe">;

function hpChange(e: ActorEvent): unknown {
  if (e.event !== "actor-update") return undefined;
  const changes = e.data.changes as { system?: { attributes?: { hp?: { value?: unknown } } } };
  return changes.system?.attributes?.hp?.value;
}

test("read, update, a /dnd5e operation and an event stream", async () => {
  const client = new RelayClient({ baseUrl: relay.baseUrl, apiKey: aliceKey });
  const abort = new AbortController();
  const events = client.subscribe("/actor/subscribe", { actorUuid: aria }, { signal: abort.signal })[Symbol.asyncIterator]();
  try {
    const connected = await next(events, () => true);
    assert.equal(connected.event, "connected");

    const read = await client.get("/get", { uuid: aria });
    assert.equal(read.type, "entity-result");
    assert.equal(read.data.name, "Aria Vale");

    const updated = await client.put("/update", { uuid: aria, data: { "system.attributes.hp.value": 4 } });
    const hp = (updated.data.document as { system: { attributes: { hp: { value: number; max: number } } } }).system.attributes.hp;
    assert.equal(hp.value, 4);

    const change = await next(events, (e) => e.event === "actor-update");
    assert.equal(hpChange(change), 4);
    assert.ok(change.event === "actor-update" && Number(change.id) > 0, "an actor-update carries its id");

    const rest = await client.post("/dnd5e/long-rest", { actorUuid: aria });
    assert.equal(rest.type, "long-rest-result");
    assert.equal(rest.data.result.type, "long");
    const healed = await next(events, (e) => hpChange(e) !== undefined);
    assert.equal(hpChange(healed), hp.max);
  } finally {
    abort.abort();
    await events.return?.();
  }
});

test("defaults for key, world and user, overridden per call", async () => {
  const client = new RelayClient({ baseUrl: relay.baseUrl, apiKey: relay.adminKey, clientId: "demo", userId: "Alice" });
  // Acting as Alice the admin key sees the Town Guard LIMITED.
  const limited = await client.get("/get", { uuid: guard });
  assert.deepEqual(Object.keys(limited.data).sort(), ["img", "name", "type", "uuid"]);
  // Per call: GM-level access, and the whole document.
  const whole = await client.get("/get", { uuid: guard }, { userId: "" });
  assert.ok("system" in whole.data, "GM-level access reads the whole document");
  // A user in the parameters wins over the client's.
  const gm = await client.get("/get", { uuid: guard, userId: "Gamemaster" });
  assert.ok("system" in gm.data);
  // A per-call world and key really go out with the call.
  await assert.rejects(client.get("/get", { uuid: guard }, { clientId: "nowhere" }), (e: unknown) => e instanceof RelayError && e.status === 404);
  await assert.rejects(client.get("/get", { uuid: guard }, { apiKey: "not-a-key" }), (e: unknown) => e instanceof RelayError && e.status === 401);
});

test("an idempotency key applies a write once and answers a retry with the first answer", async () => {
  const client = new RelayClient({ baseUrl: relay.baseUrl, apiKey: relay.adminKey, clientId: "demo" });
  const params = { uuid: brom, attribute: "system.currency.ep", amount: 2 };
  const first = await client.post("/increase", params, { idempotencyKey: "ts-once" });
  const again = await client.post("/increase", params, { idempotencyKey: "ts-once" });
  assert.deepEqual(again, first);
  const read = await client.get("/get", { uuid: brom });
  assert.equal((read.data as { system: { currency: { ep: number } } }).system.currency.ep, first.data.newValue);
  await assert.rejects(
    client.post("/increase", { ...params, amount: 3 }, { idempotencyKey: "ts-once" }),
    (e: unknown) => e instanceof RelayError && e.status === 409 && /ts-once/.test(e.message),
  );
});

test("errors carry the status, the message naming the parameter and the request id", async () => {
  const client = new RelayClient({ baseUrl: relay.baseUrl, apiKey: aliceKey });
  await assert.rejects(
    client.put("/update", { uuid: aria, data: { "system.attributes.hp.value": "lots" } }),
    (e: unknown) => {
      assert.ok(e instanceof RelayError);
      assert.equal(e.status, 400);
      assert.match(e.message, /system\.attributes\.hp\.value/);
      assert.match(e.requestId ?? "", /^update_\d+$/);
      return true;
    },
  );
  // A stream refused for good throws instead of reconnecting.
  const refused = new RelayClient({ baseUrl: relay.baseUrl, apiKey: "not-a-key" });
  await assert.rejects(
    (async () => {
      for await (const _ of refused.subscribe("/hooks/subscribe")) break;
    })(),
    (e: unknown) => e instanceof RelayError && e.status === 401,
  );
});

test("a stream resumes after a network drop with the events it missed", async () => {
  const proxy = await dropProxy(relay.baseUrl);
  const writer = new RelayClient({ baseUrl: relay.baseUrl, apiKey: relay.adminKey, clientId: "demo" });
  const followed = new RelayClient({ baseUrl: proxy.baseUrl, apiKey: relay.adminKey, clientId: "demo" });
  const reconnects: Array<string | undefined> = [];
  let changedWhileDown: Promise<unknown> | undefined;
  const abort = new AbortController();
  const events = followed
    .subscribe("/actor/subscribe", { actorUuid: brom }, {
      signal: abort.signal,
      minRetryMs: 50,
      // The first time the stream breaks, Brom changes before it
      // reconnects, so only a resume can deliver that change.
      onReconnect: (_error, lastEventId) => {
        reconnects.push(lastEventId);
        changedWhileDown ??= writer.put("/update", { uuid: brom, data: { "system.attributes.hp.value": 9 } });
      },
    })
    [Symbol.asyncIterator]();
  try {
    await next(events, (e) => e.event === "connected");
    await writer.put("/update", { uuid: brom, data: { "system.attributes.hp.value": 6 } });
    const first = await next(events, (e) => e.event === "actor-update");
    assert.equal(hpChange(first), 6);

    proxy.drop();
    const missed = await next(events, (e) => e.event === "actor-update");
    await changedWhileDown;
    assert.equal(hpChange(missed), 9);
    assert.equal(reconnects[0], first.event === "actor-update" ? first.id : undefined, "resumes after the last id seen");
    assert.ok(missed.event === "actor-update" && first.event === "actor-update" && Number(missed.id) > Number(first.id));
  } finally {
    abort.abort();
    await events.return?.();
    await proxy.close();
  }
});

test("the example runs", async () => {
  const example = fileURLToPath(new URL("../examples/tour.js", import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [example], {
    env: { ...process.env, RELAY_URL: relay.baseUrl, RELAY_API_KEY: aliceKey },
    timeout: 30_000,
  });
  assert.match(stdout, /^read: Aria Vale/m);
  assert.match(stdout, /^event: actor-update hp=5$/m);
  assert.match(stdout, /^rest: long$/m);
});
