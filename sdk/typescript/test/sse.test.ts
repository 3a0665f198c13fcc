// The event-stream reader on its own: line endings, chunk boundaries,
// comments, multi-line data and fields without values.

import assert from "node:assert/strict";
import { test } from "node:test";

import { readServerSentEvents, type ServerSentEvent } from "../src/index.js";

function bodyOf(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(encoder.encode(c));
      controller.close();
    },
  });
}

async function collect(chunks: string[]): Promise<ServerSentEvent[]> {
  const out: ServerSentEvent[] = [];
  for await (const e of readServerSentEvents(bodyOf(chunks))) out.push(e);
  return out;
}

test("events split anywhere, with any line ending", async () => {
  const stream = "\uFEFF: keepalive\r\nid: 7\r\nevent: actor-update\r\ndata: {\"a\":1}\r\n\r\nevent: connected\rdata: x\rdata:y\r\rdata: last\n\ndata: unterminated";
  const expected: ServerSentEvent[] = [
    { id: "7", event: "actor-update", data: "{\"a\":1}" },
    { event: "connected", data: "x\ny" },
    { event: "message", data: "last" },
  ];
  // Whole, then cut at every position (a CRLF split between chunks, a
  // multi-byte character split between chunks).
  assert.deepEqual(await collect([stream]), expected);
  for (let i = 1; i < stream.length; i++) {
    assert.deepEqual(await collect([stream.slice(0, i), stream.slice(i)]), expected, `cut at ${i}`);
  }
  const accented = await collect(["data: caf", "é\n\n"]);
  assert.equal(accented[0]?.data, "café");
});

test("a multi-byte character split between chunks", async () => {
  const bytes = new TextEncoder().encode("data: é€\n\n");
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const b of bytes) controller.enqueue(new Uint8Array([b]));
      controller.close();
    },
  });
  const out: ServerSentEvent[] = [];
  for await (const e of readServerSentEvents(body)) out.push(e);
  assert.deepEqual(out, [{ event: "message", data: "é€" }]);
});
