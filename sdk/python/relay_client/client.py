"""The REST and event stream client (see the package's documentation)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, Optional

import requests

# The statuses after which an event stream is opened again; any other
# refusal (400, 401, 403, 404) is for good and raised.
_RETRYABLE = {408, 429}


class RelayError(Exception):
    """An answer other than 2xx: its HTTP status and the relay's message.

    ``type`` is the operation's ``<operation>-result`` type when the body
    had one, ``request_id`` the request's id (from the body or the
    X-Request-Id header), ``retry_after`` the seconds to wait before trying
    again (429, 503) when the relay said so.
    """

    def __init__(self, status: int, message: str, type: Optional[str] = None,
                 request_id: Optional[str] = None, retry_after: Optional[float] = None):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.type = type
        self.request_id = request_id
        self.retry_after = retry_after


@dataclass(frozen=True)
class Event:
    """One event of a stream.

    ``id`` is the world's sequence number (None on ``connected``, ``reset``
    and ``overflow``), ``event`` its name, ``data`` its JSON data, parsed.
    """

    id: Optional[str]
    event: str
    data: Any


@dataclass(frozen=True)
class SkillCheck:
    """The result of POST /dnd5e/skill-check."""

    actor_uuid: str
    skill: str
    total: int
    formula: str
    result: str


class RelayClient:
    """A client of one relay, with its default key, world and user.

    ``client_id`` is the world of every call that does not name one,
    ``user_id`` the tabletop user every call acts as (an id or a name).
    """

    def __init__(self, base_url: str, api_key: Optional[str] = None,
                 client_id: Optional[str] = None, user_id: Optional[str] = None,
                 timeout: float = 30.0, session: Optional[requests.Session] = None):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.client_id = client_id
        self.user_id = user_id
        self.timeout = timeout
        self._session = session or requests.Session()

    # Generic calls.

    def call(self, method: str, path: str, idempotency_key: Optional[str] = None,
             **params: Any) -> Dict[str, Any]:
        """Calls an operation and returns its envelope's ``data``.

        Parameters go in the query string for GET and DELETE (strings as they
        are, anything else as JSON text), in a JSON body otherwise.

        ``idempotency_key`` is a write's idempotency key (the
        ``Idempotency-Key`` header): sent again with the same key, after a
        time-out or a lost connection, the write is applied once and the
        retry gets the first answer. Use a new key for each new write (1 to
        255 printable ASCII characters); the relay answers 409 when a key
        comes back with another request.
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        response = self.request(method, path, params, headers=headers)
        body = response.json()
        return body.get("data", {}) if isinstance(body, dict) else body

    def get(self, path: str, **params: Any) -> Dict[str, Any]:
        return self.call("GET", path, **params)

    def post(self, path: str, idempotency_key: Optional[str] = None, **params: Any) -> Dict[str, Any]:
        return self.call("POST", path, idempotency_key=idempotency_key, **params)

    def put(self, path: str, idempotency_key: Optional[str] = None, **params: Any) -> Dict[str, Any]:
        return self.call("PUT", path, idempotency_key=idempotency_key, **params)

    def delete(self, path: str, idempotency_key: Optional[str] = None, **params: Any) -> Dict[str, Any]:
        return self.call("DELETE", path, idempotency_key=idempotency_key, **params)

    def request(self, method: str, path: str, params: Optional[Dict[str, Any]] = None,
                headers: Optional[Dict[str, str]] = None, stream: bool = False,
                timeout: Any = None) -> requests.Response:
        """Sends one request and returns the raw response, raising RelayError
        for any status other than 2xx (use it for /download's bytes)."""
        method = method.upper()
        merged = {k: v for k, v in (params or {}).items() if v is not None}
        if "clientId" not in merged and self.client_id:
            merged["clientId"] = self.client_id
        if "userId" not in merged and self.user_id:
            merged["userId"] = self.user_id
        all_headers = {"Accept": "application/json"}
        if self.api_key:
            all_headers["x-api-key"] = self.api_key
        all_headers.update(headers or {})
        url = self.base_url + path
        kwargs: Dict[str, Any] = {"headers": all_headers, "stream": stream,
                                  "timeout": self.timeout if timeout is None else timeout}
        if method in ("GET", "DELETE"):
            kwargs["params"] = {k: v if isinstance(v, str) else json.dumps(v) for k, v in merged.items()}
        else:
            kwargs["json"] = merged
        response = self._session.request(method, url, **kwargs)
        if not 200 <= response.status_code < 300:
            error = _error_of(response)
            response.close()
            raise error
        return response

    # Typed calls of the operations a bot uses most.

    def get_document(self, uuid: str, **params: Any) -> Dict[str, Any]:
        """GET /get: a document (an actor, an item, a scene...) by its uuid."""
        return self.get("/get", uuid=uuid, **params)

    def update(self, uuid: str, data: Dict[str, Any], idempotency_key: Optional[str] = None,
               **params: Any) -> Dict[str, Any]:
        """PUT /update: changes a document; ``data`` may use dotted keys."""
        return self.put("/update", idempotency_key=idempotency_key, uuid=uuid, data=data, **params)

    def skill_check(self, actor_uuid: str, skill: str, **params: Any) -> SkillCheck:
        """POST /dnd5e/skill-check: rolls an actor's skill check (``skill`` is
        its three-letter key, such as ``per`` or ``ath``)."""
        d = self.post("/dnd5e/skill-check", actorUuid=actor_uuid, skill=skill, **params)
        return SkillCheck(actor_uuid=d["actorUuid"], skill=d["skill"], total=int(d["total"]),
                          formula=d.get("formula", ""), result=d.get("result", ""))

    # Event streams.

    def subscribe(self, path: str, last_event_id: Optional[str] = None,
                  min_retry: float = 0.25, max_retry: float = 5.0,
                  read_timeout: float = 90.0, stop: Optional[threading.Event] = None,
                  on_reconnect=None, **params: Any) -> Iterator[Event]:
        """Follows an event stream (``/actor/subscribe``, ``/hooks/subscribe``,
        ``/encounters/subscribe``, ``/scene/subscribe``) as an iterator of its
        events, the stream's own ``connected``, ``reset`` and ``overflow``
        included.

        When the stream breaks (a network failure, a relay restart, an
        overflow that closed it, 408, 429 or 5xx), it reconnects after a wait
        that doubles from ``min_retry`` up to ``max_retry`` seconds and resumes
        after the last event id seen (the Last-Event-ID header). A refusal for
        good (400, 401, 403, 404) is raised as RelayError. ``stop`` ends the
        iteration once set (checked between events and reconnects); closing
        the generator closes the stream. ``on_reconnect(error, last_event_id)``
        is called before each reconnect; ``read_timeout`` is the longest
        silence (the relay sends keepalives) before the stream counts as
        broken.
        """
        delay = min_retry
        while stop is None or not stop.is_set():
            reason: Optional[BaseException] = None
            headers = {"Accept": "text/event-stream"}
            if last_event_id:
                headers["Last-Event-ID"] = last_event_id
            try:
                response = self.request("GET", path, params, headers=headers, stream=True,
                                        timeout=(self.timeout, read_timeout))
                try:
                    for event in read_events(_arriving(response)):
                        if event.id:
                            last_event_id = event.id
                        delay = min_retry
                        yield event
                        if stop is not None and stop.is_set():
                            return
                finally:
                    response.close()
            except RelayError as error:
                if error.status not in _RETRYABLE and error.status < 500:
                    raise
                if error.retry_after:
                    delay = max(delay, error.retry_after)
                reason = error
            except (requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError) as error:
                reason = error
            if on_reconnect is not None:
                on_reconnect(reason, last_event_id)
            if stop is not None:
                if stop.wait(delay):
                    return
            else:
                time.sleep(delay)
            delay = min(delay * 2, max_retry)


def read_events(chunks: Iterable[bytes]) -> Iterator[Event]:
    """Parses a Server-Sent Events stream from its byte chunks: one Event per
    dispatched event, comments (keepalives) skipped, ``data`` parsed as JSON
    when it is JSON."""
    buffer = b""
    event_id: Optional[str] = None
    name = ""
    data_lines: list = []
    for chunk in chunks:
        buffer += chunk
        while True:
            cut = buffer.find(b"\n")
            if cut < 0:
                break
            line = buffer[:cut].rstrip(b"\r").decode("utf-8")
            buffer = buffer[cut + 1:]
            if line == "":
                if data_lines or name:
                    text = "\n".join(data_lines)
                    try:
                        data: Any = json.loads(text)
                    except ValueError:
                        data = text
                    yield Event(id=event_id, event=name or "message", data=data)
                event_id, name, data_lines = None, "", []
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "data":
                data_lines.append(value)
            elif field == "event":
                name = value
            elif field == "id":
                event_id = value


def _arriving(response: requests.Response) -> Iterator[bytes]:
    """The body of a streamed response in pieces as they arrive.

    requests' iter_content waits for a whole piece of the size it asks for
    (or for the end, with no size) unless the body is chunked, and the
    relay's event streams over HTTP/1.1 are not: an event would wait for
    the next ones. read1 returns what has arrived; urllib3 2 offers it, and
    under urllib3 1 the http.client response it wraps does.
    """
    raw = response.raw
    read1 = getattr(raw, "read1", None)
    if read1 is None and not response.headers.get("Content-Encoding"):
        read1 = getattr(getattr(raw, "_fp", None), "read1", None)
    if read1 is None:
        yield from response.iter_content(chunk_size=1)
        return
    while True:
        chunk = read1(65536)
        if not chunk:
            return
        yield chunk


def _error_of(response: requests.Response) -> RelayError:
    """The RelayError of a refused call."""
    text = response.text
    body: Dict[str, Any] = {}
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict):
            body = parsed
    except ValueError:
        pass  # not the relay's JSON error body (a proxy's page, say): keep the text
    retry_after: Optional[float] = None
    try:
        retry_after = float(response.headers.get("Retry-After", ""))
    except ValueError:
        pass
    message = body.get("error") or text or response.reason or f"HTTP {response.status_code}"
    return RelayError(response.status_code, message, body.get("type"),
                      body.get("requestId") or response.headers.get("X-Request-Id"), retry_after)
