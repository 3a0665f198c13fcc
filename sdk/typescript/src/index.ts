// The relay's TypeScript client: a thin layer over fetch, typed by the
// types openapi-typescript generates from the relay's OpenAPI document
// (src/schema.ts, written by `npm run generate`). It uses only what both
// Node 20+ and browsers offer (fetch, AbortController, TextDecoder, ReadableStream),
// so the same code runs in both; event streams are read from a fetch body,
// which can carry the API key header that a browser's EventSource cannot.

import type { paths } from "./schema.js";
import { readServerSentEvents } from "./sse.js";

export type { components, operations, paths } from "./schema.js";
export { readServerSentEvents, type ServerSentEvent } from "./sse.js";

/** The HTTP methods of the API. */
export type HttpMethod = "get" | "put" | "post" | "delete";

/** The paths that answer method M. */
export type PathsFor<M extends HttpMethod> = {
  [P in keyof paths]: paths[P][M] extends { responses: unknown } ? P : never;
}[keyof paths];

type Operation<P extends keyof paths, M extends HttpMethod> = NonNullable<paths[P][M]>;

type QueryOf<O> = O extends { parameters: { query?: infer Q } }
  ? [Q] extends [never] ? {} : [Q] extends [undefined] ? {} : NonNullable<Q>
  : {};

type BodyOf<O> = O extends { requestBody?: { content: { "application/json": infer B } } } ? B : {};

/**
 * The parameters of an operation: those of its query string and of its JSON
 * body together, since the relay takes any parameter in either.
 */
export type Params<P extends keyof paths, M extends HttpMethod> = QueryOf<Operation<P, M>> & BodyOf<Operation<P, M>>;

/** The success body (the envelope `{type, requestId, data}`) of an operation. */
export type Result<P extends keyof paths, M extends HttpMethod> =
  Operation<P, M> extends { responses: { 200: { content: { "application/json": infer R } } } } ? R : unknown;

/** The paths that are event streams. */
export type StreamPath = {
  [P in keyof paths]: paths[P]["get"] extends { responses: { 200: { content: { "text/event-stream": unknown } } } } ? P : never;
}[keyof paths];

/**
 * One event of a stream: its `id` (the world's sequence number; absent on
 * `connected`, `reset` and `overflow`), its `event` name and its `data`,
 * parsed from JSON. The union of the stream's frames, so a check of `event`
 * narrows `data`.
 */
export type StreamEvent<P extends StreamPath> =
  Operation<P, "get"> extends { responses: { 200: { content: { "text/event-stream": infer F } } } } ? F : never;

/** What a client is created with. */
export interface RelayClientOptions {
  /** The relay's address, such as `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** The API key sent with every call (the `x-api-key` header). */
  apiKey?: string;
  /** The default world (`clientId`) of every call that does not name one. */
  clientId?: string;
  /** The default tabletop user (`userId`, an id or a name) every call acts as. */
  userId?: string;
  /** The fetch to use; the global one by default. */
  fetch?: typeof fetch;
}

/** Per-call overrides of the client's defaults. */
export interface CallOptions {
  /** The API key of this call. */
  apiKey?: string;
  /** The world of this call, unless its parameters name one. */
  clientId?: string;
  /**
   * The user of this call, unless its parameters name one; an empty string
   * acts with GM-level access (as far as the key allows).
   */
  userId?: string;
  /** Aborts the call (or ends a stream). */
  signal?: AbortSignal;
  /** More request headers. */
  headers?: Record<string, string>;
  /**
   * The write's idempotency key (the `Idempotency-Key` header): sent again
   * with the same key, after a time-out or a lost connection, the write is
   * applied once and the retry gets the first answer. Use a new key for
   * each new write (1 to 255 printable ASCII characters); the relay answers
   * 409 when a key comes back with another request.
   */
  idempotencyKey?: string;
}

/** How a stream reconnects. */
export interface SubscribeOptions extends CallOptions {
  /** Resume after this event id from the start. */
  lastEventId?: string;
  /** The wait before the first reconnect, in milliseconds (default 250). */
  minRetryMs?: number;
  /** The most the wait grows to, doubling on each failure in a row (default 5000). */
  maxRetryMs?: number;
  /**
   * Called before each reconnect with why the stream ended (undefined when
   * the relay closed it) and the id it will resume after.
   */
  onReconnect?: (error: unknown, lastEventId: string | undefined) => void;
}

/** An answer other than 2xx: the status and the relay's error body. */
export class RelayError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The operation's `<operation>-result` type, when the body had one. */
  readonly type: string | undefined;
  /** The request id, from the body or the X-Request-Id header. */
  readonly requestId: string | undefined;
  /** Seconds to wait before trying again (429, 503), from Retry-After. */
  readonly retryAfter: number | undefined;

  constructor(status: number, message: string, type?: string, requestId?: string, retryAfter?: number) {
    super(message);
    this.name = "RelayError";
    this.status = status;
    this.type = type;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
  }
}

// The rest arguments of a call: parameters may be left out when none is
// required.
type CallArgs<P extends keyof paths, M extends HttpMethod> =
  {} extends Params<P, M> ? [params?: Params<P, M>, options?: CallOptions] : [params: Params<P, M>, options?: CallOptions];

type StreamArgs<P extends StreamPath> = [params?: Params<P, "get">, options?: SubscribeOptions];

/** A client of one relay, with its default key, world and user. */
export class RelayClient {
  readonly #options: RelayClientOptions;
  readonly #fetch: typeof fetch;

  constructor(options: RelayClientOptions) {
    this.#options = { ...options, baseUrl: options.baseUrl.replace(/\/+$/, "") };
    // Bound to the global object: a browser's fetch refuses another `this`.
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  /** Calls a GET operation, such as `/get` or `/dnd5e/get-actor-details`. */
  get<P extends PathsFor<"get">>(path: P, ...args: CallArgs<P, "get">): Promise<Result<P, "get">> {
    return this.#call("get", path, args[0], args[1]) as Promise<Result<P, "get">>;
  }

  /** Calls a POST operation, such as `/create` or `/dnd5e/long-rest`. */
  post<P extends PathsFor<"post">>(path: P, ...args: CallArgs<P, "post">): Promise<Result<P, "post">> {
    return this.#call("post", path, args[0], args[1]) as Promise<Result<P, "post">>;
  }

  /** Calls a PUT operation, such as `/update`. */
  put<P extends PathsFor<"put">>(path: P, ...args: CallArgs<P, "put">): Promise<Result<P, "put">> {
    return this.#call("put", path, args[0], args[1]) as Promise<Result<P, "put">>;
  }

  /** Calls a DELETE operation, such as `/delete`. */
  delete<P extends PathsFor<"delete">>(path: P, ...args: CallArgs<P, "delete">): Promise<Result<P, "delete">> {
    return this.#call("delete", path, args[0], args[1]) as Promise<Result<P, "delete">>;
  }

  async #call(method: HttpMethod, path: string, params: object | undefined, options: CallOptions | undefined): Promise<unknown> {
    const response = await this.request(method, path, params, options);
    return response.json();
  }

  /**
   * Sends one request and returns the raw Response, throwing a RelayError
   * for any status other than 2xx. The typed methods use it; call it
   * directly for `/download`, whose answer is the file's bytes
   * (`await response.arrayBuffer()`). Parameters go in the query
   * string for GET and DELETE, in a JSON body otherwise; the key, world and
   * user come from the options, else the client's defaults.
   */
  async request(method: HttpMethod, path: string, params?: object, options: CallOptions = {}): Promise<Response> {
    const merged: Record<string, unknown> = { ...params };
    const clientId = options.clientId ?? this.#options.clientId;
    const userId = options.userId ?? this.#options.userId;
    if (merged.clientId === undefined && clientId) merged.clientId = clientId;
    if (merged.userId === undefined && userId) merged.userId = userId;

    const headers: Record<string, string> = { Accept: "application/json", ...options.headers };
    const apiKey = options.apiKey ?? this.#options.apiKey;
    if (apiKey) headers["x-api-key"] = apiKey;
    if (options.idempotencyKey !== undefined) headers["Idempotency-Key"] = options.idempotencyKey;
    let url = this.#options.baseUrl + path;
    let body: string | undefined;
    if (method === "get" || method === "delete") {
      const query = new URLSearchParams();
      for (const [name, value] of Object.entries(merged)) {
        if (value === undefined) continue;
        // Strings go as they are; numbers, booleans, arrays and objects as
        // JSON text, which the relay reads for every non-string parameter.
        query.set(name, typeof value === "string" ? value : JSON.stringify(value));
      }
      const text = query.toString();
      if (text) url += "?" + text;
    } else {
      body = JSON.stringify(merged);
      headers["Content-Type"] = "application/json";
    }
    const response = await this.#fetch(url, { method: method.toUpperCase(), headers, body, signal: options.signal });
    if (!response.ok) throw await errorOf(response);
    return response;
  }

  /**
   * Follows an event stream (`/actor/subscribe`, `/hooks/subscribe`,
   * `/encounters/subscribe`, `/scene/subscribe`) as an async iterable of its
   * events, the stream's own `connected`, `reset` and `overflow` included.
   * When the stream breaks (network failure, relay restart, an overflow
   * that closed it, 429 or 5xx), it reconnects after a growing wait and
   * resumes after the last event id seen (the Last-Event-ID header), so
   * events in between arrive unless they fell out of the relay's retained
   * window (a `reset` event then says so). A refusal for good (401, 403,
   * 404, 400) is thrown. Breaking out of the loop or aborting the signal
   * closes the stream.
   */
  subscribe<P extends StreamPath>(path: P, ...args: StreamArgs<P>): AsyncIterable<StreamEvent<P>> {
    const [params, options = {}] = args;
    const minRetry = options.minRetryMs ?? 250;
    const maxRetry = Math.max(options.maxRetryMs ?? 5000, minRetry);
    const client = this;
    return {
      async *[Symbol.asyncIterator]() {
        const controller = new AbortController();
        const outer = options.signal;
        const abort = () => controller.abort();
        if (outer?.aborted) return;
        outer?.addEventListener("abort", abort, { once: true });
        let lastEventId = options.lastEventId;
        let delay = minRetry;
        try {
          while (!controller.signal.aborted) {
            let reason: unknown;
            try {
              const headers: Record<string, string> = { ...options.headers, Accept: "text/event-stream" };
              if (lastEventId) headers["Last-Event-ID"] = lastEventId;
              const response = await client.request("get", path, params, { ...options, headers, signal: controller.signal });
              if (!response.body) throw new Error("the event stream has no body");
              for await (const event of readServerSentEvents(response.body)) {
                if (event.id) lastEventId = event.id;
                delay = minRetry;
                yield frameOf(event) as StreamEvent<P>;
              }
            } catch (error) {
              if (controller.signal.aborted) return;
              if (error instanceof RelayError) {
                if (!retryableStatus(error.status)) throw error;
                if (error.retryAfter) delay = Math.max(delay, error.retryAfter * 1000);
              }
              reason = error;
            }
            options.onReconnect?.(reason, lastEventId);
            await sleep(delay, controller.signal);
            delay = Math.min(delay * 2, maxRetry);
          }
        } finally {
          outer?.removeEventListener("abort", abort);
          controller.abort();
        }
      },
    };
  }
}

/** Whether a refused stream is worth opening again later. */
function retryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/** A stream event as the typed frame: `data` parsed from JSON. */
function frameOf(event: { id?: string; event: string; data: string }): object {
  let data: unknown = event.data;
  try {
    data = JSON.parse(event.data);
  } catch {
    // Every event of the relay carries JSON; anything else stays text.
  }
  return event.id === undefined ? { event: event.event, data } : { id: event.id, event: event.event, data };
}

/** The RelayError of a refused call. */
async function errorOf(response: Response): Promise<RelayError> {
  const text = await response.text().catch(() => "");
  let body: { type?: string; requestId?: string; error?: string } = {};
  try {
    body = JSON.parse(text);
  } catch {
    // Not the relay's JSON error body (a proxy's page, say): keep the text.
  }
  const retryAfter = Number(response.headers.get("Retry-After")) || undefined;
  const message = body.error ?? (text || response.statusText || `HTTP ${response.status}`);
  return new RelayError(response.status, message, body.type, body.requestId ?? response.headers.get("X-Request-Id") ?? undefined, retryAfter);
}

/** Waits ms milliseconds, or less when signal aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
