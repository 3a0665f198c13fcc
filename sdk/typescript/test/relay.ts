// Starts a real relay for the tests: `relay serve` as a child process on a
// free loopback port with a fresh data directory holding the demo world.
// The binary is RELAY_BIN when set (make sdk-test builds it once), else it
// is built here with `go build`.

import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** A running relay. */
export interface TestRelay {
  baseUrl: string;
  adminKey: string;
  stop(): Promise<void>;
}

// The repository's root, from dist/test/relay.js.
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));

/** Starts a relay; extra are more `relay serve` flags. */
export async function startRelay(...extra: string[]): Promise<TestRelay> {
  const dir = mkdtempSync(join(tmpdir(), "relay-ts-test-"));
  let bin = process.env.RELAY_BIN;
  if (!bin) {
    bin = join(dir, "relay");
    execFileSync("go", ["build", "-o", bin, "./cmd/relay"], { cwd: repoRoot, stdio: "inherit" });
  }
  // RELAY_* settings of the developer's shell must not change the relay
  // under test.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("RELAY_")));
  const child = spawn(
    bin,
    ["serve", "--listen", "127.0.0.1:0", "--data", join(dir, "data"), "--log-format", "json", "--dice-seed", "20261125", "--node-id", "8", ...extra],
    { env, stdio: ["ignore", "ignore", "pipe"] },
  );
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const addr = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the relay did not get ready within 60s")), 60_000);
    child.once("exit", (code) => reject(new Error(`the relay exited with ${code} before it was ready`)));
    createInterface({ input: child.stderr! }).on("line", (line) => {
      let entry: { msg?: string; addr?: string; level?: string } = {};
      try {
        entry = JSON.parse(line);
      } catch {
        // Not a log line.
      }
      if (entry.msg === "relay ready" && entry.addr) {
        clearTimeout(timer);
        resolve(entry.addr);
      } else if (entry.level === "WARN" || entry.level === "ERROR") {
        process.stderr.write(`relay: ${line}\n`);
      }
    });
  });
  const adminKey = readFileSync(join(dir, "data", "admin.key"), "utf8").trim();
  return {
    baseUrl: `http://${addr}`,
    adminKey,
    async stop() {
      child.kill("SIGINT");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A TCP proxy to the relay that can cut every connection through it at
 * once, as a network failure does, and keeps accepting new ones.
 */
export async function dropProxy(target: string): Promise<{ baseUrl: string; drop(): void; close(): Promise<void> }> {
  const { hostname, port } = new URL(target);
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port: local } = server.address() as net.AddressInfo;
  const drop = () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
  };
  return {
    baseUrl: `http://127.0.0.1:${local}`,
    drop,
    close: () => {
      drop();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
