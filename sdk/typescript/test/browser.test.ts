// The client in a real browser: headless Chromium (Debian's chromium
// package) loads a page from another origin that imports the compiled
// client as an ES module and makes the SDK's tour against a relay that
// allows that origin (--cors-origins): a read, an update with its event
// arriving on a stream read from fetch, and a /dnd5e operation. The page
// posts what it saw back to the test's server. In CI (CI=true) a missing
// Chromium fails the test; elsewhere it is skipped.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join, normalize } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { startRelay } from "./relay.js";

const chromium = "/usr/bin/chromium";
// dist/, whose src/ the page imports.
const distRoot = fileURLToPath(new URL("../", import.meta.url));

// The page: its query string carries the relay's address and key.
const page = `<!doctype html><meta charset="utf-8"><title>relay client</title>
<script type="module">
import { RelayClient } from "/src/index.js";
const q = new URLSearchParams(location.search);
const report = (body) => fetch("/report", { method: "POST", body: JSON.stringify(body) });
try {
  const client = new RelayClient({ baseUrl: q.get("relay"), apiKey: q.get("key"), clientId: "demo" });
  const aria = "Actor.ariaVale00000001";
  const read = await client.get("/get", { uuid: aria });
  const abort = new AbortController();
  const events = client.subscribe("/actor/subscribe", { actorUuid: aria }, { signal: abort.signal })[Symbol.asyncIterator]();
  const connected = (await events.next()).value;
  await client.put("/update", { uuid: aria, data: { "system.attributes.hp.value": 2 } });
  let update;
  for (let r = await events.next(); !r.done; r = await events.next()) {
    if (r.value.event === "actor-update") { update = r.value; break; }
  }
  abort.abort();
  const rest = await client.post("/dnd5e/long-rest", { actorUuid: aria });
  await report({ name: read.data.name, connected: connected.event, hp: update.data.changes.system.attributes.hp.value, id: update.id, rest: rest.data.result.type });
} catch (e) {
  await report({ error: String(e && e.stack || e) });
}
</script>`;

test("the client works in a browser, cross-origin", async (t) => {
  if (!existsSync(chromium)) {
    if (process.env.CI === "true") assert.fail(`${chromium} is missing: CI runs the browser tests (.ci/run installs it)`);
    t.skip(`${chromium} is missing`);
    return;
  }
  let resolveReport!: (v: Record<string, unknown>) => void;
  const reported = new Promise<Record<string, unknown>>((resolve) => (resolveReport = resolve));
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    if (url.pathname === "/report") {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        res.end();
        resolveReport(JSON.parse(body));
      });
      return;
    }
    if (url.pathname === "/") {
      res.setHeader("Content-Type", "text/html");
      res.end(page);
      return;
    }
    const file = normalize(join(distRoot, url.pathname));
    if (!file.startsWith(join(distRoot, "src")) || !existsSync(file)) {
      res.statusCode = 404;
      res.end();
      return;
    }
    res.setHeader("Content-Type", file.endsWith(".js") ? "text/javascript" : "application/octet-stream");
    res.end(readFileSync(file));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const relay = await startRelay("--cors-origins", origin);
  const profile = mkdtempSync(join(tmpdir(), "relay-ts-chromium-"));
  const browser = spawn(chromium, [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps", `--user-data-dir=${profile}`,
    `${origin}/?relay=${encodeURIComponent(relay.baseUrl)}&key=${encodeURIComponent(relay.adminKey)}`,
  ], { stdio: "ignore" });
  const exited = new Promise<void>((resolve) => browser.once("exit", () => resolve()));
  let timer: NodeJS.Timeout | undefined;
  try {
    const result = await Promise.race([
      reported,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("the page reported nothing within 60s")), 60_000))),
      exited.then(() => Promise.reject(new Error("chromium exited before the page reported"))),
    ]);
    assert.equal(result.error, undefined, String(result.error));
    assert.deepEqual({ ...result, id: undefined }, { name: "Aria Vale", connected: "connected", hp: 2, id: undefined, rest: "long" });
    assert.ok(Number(result.id) > 0, "the event carries its id");
  } finally {
    clearTimeout(timer);
    browser.kill("SIGKILL");
    await exited;
    await relay.stop();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(profile, { recursive: true, force: true });
  }
});
