// A reader of Server-Sent Events from a fetch body, as the HTML standard's
// event stream format defines them. Browsers have EventSource, but it
// cannot send the API key header and Node 20 has none; a fetch body works
// in both.

/** One dispatched event of a stream. */
export interface ServerSentEvent {
  /** The `id:` field of the event, when it had one. */
  id?: string;
  /** The `event:` field; `message` when absent. */
  event: string;
  /** The `data:` lines, joined by newlines. */
  data: string;
  /** The `retry:` field (milliseconds), when the event set one. */
  retry?: number;
}

/**
 * Yields the events of an event-stream body until it ends. Comments
 * (keepalives) are skipped, and a field-less blank line dispatches nothing.
 */
export async function* readServerSentEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerSentEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data: string[] = [];
  let event = "";
  let id: string | undefined;
  let retry: number | undefined;
  let first = true;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return; // an event not ended by a blank line is dropped, as the standard says
      buffer += decoder.decode(value, { stream: true });
      if (first && buffer.length > 0) {
        // A byte order mark at the very start is not part of the stream.
        if (buffer.charCodeAt(0) === 0xfeff) buffer = buffer.slice(1);
        first = false;
      }
      let start = 0;
      for (;;) {
        const end = lineEnd(buffer, start);
        if (end < 0) break;
        const line = buffer.slice(start, end);
        // A line ends with CRLF, LF or CR; a CR at the end of the buffer may
        // be the first half of a CRLF, so it waits for more (lineEnd).
        start = buffer[end] === "\r" && buffer[end + 1] === "\n" ? end + 2 : end + 1;
        if (line === "") {
          if (data.length > 0) {
            const out: ServerSentEvent = { event: event || "message", data: data.join("\n") };
            if (id !== undefined) out.id = id;
            if (retry !== undefined) out.retry = retry;
            yield out;
          }
          data = [];
          event = "";
          id = undefined;
          retry = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        switch (field) {
          case "data":
            data.push(text);
            break;
          case "event":
            event = text;
            break;
          case "id":
            if (!text.includes("\0")) id = text;
            break;
          case "retry":
            if (/^\d+$/.test(text)) retry = Number(text);
            break;
        }
      }
      buffer = buffer.slice(start);
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/**
 * The index of the end of the line starting at start, or -1 when the
 * buffer holds no whole line yet. A CR as the buffer's last character
 * counts as incomplete, since an LF may follow in the next chunk.
 */
function lineEnd(buffer: string, start: number): number {
  for (let i = start; i < buffer.length; i++) {
    const c = buffer[i];
    if (c === "\n") return i;
    if (c === "\r") return i + 1 < buffer.length ? i : -1;
  }
  return -1;
}
