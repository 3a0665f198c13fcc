// A tour of the TypeScript client: read a document, follow its actor's
// events, change it and run a fifth-edition operation. Run it against a
// relay with a key that may act as Alice in the demo world:
//
//   RELAY_URL=http://127.0.0.1:8080 RELAY_API_KEY=... npm run example
//
// (`npm run build` first; the key needs entity:read, entity:write, dnd5e
// and events:subscribe.)

import { RelayClient } from "../src/index.js";

const client = new RelayClient({
  baseUrl: process.env.RELAY_URL ?? "http://127.0.0.1:8080",
  apiKey: process.env.RELAY_API_KEY,
  clientId: "demo",
});
const aria = "Actor.ariaVale00000001";

// Read: `data` is the document, typed with its known fields.
const read = await client.get("/get", { uuid: aria });
console.log("read:", read.data.name);

// Follow Aria's events; the stream reconnects by itself and resumes after
// the last event seen. Breaking out of the loop (or aborting) closes it.
const abort = new AbortController();
const events = client.subscribe("/actor/subscribe", { actorUuid: aria }, { signal: abort.signal })[Symbol.asyncIterator]();
await events.next(); // the stream's own `connected` event

// Update with dotted paths, and see the change arrive.
await client.put("/update", { uuid: aria, data: { "system.attributes.hp.value": 5 } });
for (let r = await events.next(); !r.done; r = await events.next()) {
  const e = r.value;
  if (e.event === "actor-update") {
    const changes = e.data.changes as { system?: { attributes?: { hp?: { value?: number } } } };
    console.log(`event: ${e.event} hp=${changes.system?.attributes?.hp?.value}`);
    break;
  }
}
abort.abort();

// A fifth-edition operation.
const rest = await client.post("/dnd5e/long-rest", { actorUuid: aria });
console.log("rest:", rest.data.result.type);
