"""The REST calls and event streams against a relay the tests start."""

import queue
import socket
import threading

import pytest

from relay_client import Event, RelayClient, RelayError, read_events

ARIA = "Actor.ariaVale00000001"
BROM = "Actor.bromIronfist0001"


@pytest.fixture(scope="module")
def alice(relay):
    """A client with a key that acts as the player Alice in the demo world."""
    admin = RelayClient(relay.base_url, api_key=relay.admin_key)
    created = admin.post("/keys", name="sdk-python-test",
                         scopes=["entity:read", "entity:write", "dnd5e", "events:subscribe"],
                         clientIds=["demo"], scopedUserId="Alice")
    return RelayClient(relay.base_url, api_key=created["key"])


def hp_of(event):
    try:
        return event.data["changes"]["system"]["attributes"]["hp"]["value"]
    except (KeyError, TypeError):
        return None


def test_call_returns_the_envelopes_data(alice):
    aria = alice.get_document(ARIA)
    assert aria["name"] == "Aria Vale"
    assert aria["uuid"] == ARIA
    updated = alice.update(ARIA, {"system.attributes.hp.value": 7})
    assert updated["document"]["system"]["attributes"]["hp"]["value"] == 7
    check = alice.skill_check(ARIA, "per")
    assert check.skill == "per" and check.actor_uuid == ARIA
    assert isinstance(check.total, int) and check.formula.startswith("1d20")


def test_errors_carry_status_and_text(relay, alice):
    with pytest.raises(RelayError) as refused:
        RelayClient(relay.base_url).get_document(ARIA)
    assert refused.value.status == 401
    assert refused.value.message == "API key is required"
    with pytest.raises(RelayError) as bad:
        alice.update(ARIA, {"system.attributes.hp.value": "lots"})
    assert bad.value.status == 400
    assert "system.attributes.hp.value" in bad.value.message
    assert bad.value.request_id
    with pytest.raises(RelayError) as missing:
        alice.get_document("Actor.doesNotExist0001")
    assert missing.value.status == 404


def test_read_events_parses_the_stream():
    chunks = [b": keepalive\n\nid: 4", b"1\nevent: actor-update\ndata: {\"a\"", b": 1}\n\r\n",
              b"event: connected\ndata: {}\n\n", b"data: line one\ndata: line two\n\n"]
    assert list(read_events(chunks)) == [
        Event(id="41", event="actor-update", data={"a": 1}),
        Event(id=None, event="connected", data={}),
        Event(id=None, event="message", data="line one\nline two"),
    ]


class DropProxy:
    """A TCP proxy to the relay that can cut every connection through it at
    once, as a network failure does, and keeps accepting new ones."""

    def __init__(self, target_addr):
        host, port = target_addr.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.base_url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.sockets = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def drop(self):
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.sockets = []

    def close(self):
        self.listener.close()
        self.drop()


def test_stream_reconnects_and_resumes_with_last_event_id(relay, alice):
    """A stream cut by the network reconnects through the proxy and resumes
    after its last event: a change made while it was down still arrives.
    Alice may read Brom Ironfist but not change him: the admin does."""
    admin = RelayClient(relay.base_url, api_key=relay.admin_key)
    proxy = DropProxy(relay.addr)
    through = RelayClient(proxy.base_url, api_key=alice.api_key)
    stop = threading.Event()
    events = queue.Queue()
    reconnects = []

    def follow():
        try:
            for event in through.subscribe("/actor/subscribe", actorUuid=BROM, stop=stop,
                                           min_retry=0.2, max_retry=0.5,
                                           on_reconnect=lambda err, last: reconnects.append(last)):
                events.put(event)
        except Exception as error:  # surfaced to the test below
            events.put(error)

    worker = threading.Thread(target=follow, daemon=True)
    worker.start()

    def next_event(match):
        while True:
            event = events.get(timeout=20)
            if isinstance(event, Exception):
                raise event
            if match(event):
                return event

    try:
        next_event(lambda e: e.event == "connected")
        admin.update(BROM, {"system.attributes.hp.value": 6})
        first = next_event(lambda e: hp_of(e) is not None)
        assert hp_of(first) == 6 and first.id
        proxy.drop()
        # Changed while the stream is down (or reconnecting): it still
        # arrives, after the event the stream had seen.
        admin.update(BROM, {"system.attributes.hp.value": 9})
        missed = next_event(lambda e: hp_of(e) is not None)
        assert hp_of(missed) == 9
        assert int(missed.id) > int(first.id)
        assert reconnects and reconnects[0] == first.id
    finally:
        stop.set()
        admin.update(BROM, {"system.attributes.hp.value": 10})  # wakes the stream so it sees stop
        worker.join(10)
        proxy.close()


def test_refused_stream_is_raised(relay):
    with pytest.raises(RelayError) as refused:
        next(iter(RelayClient(relay.base_url, api_key="rk_" + "x" * 43).subscribe("/hooks/subscribe")))
    assert refused.value.status == 401


def test_idempotency_key_applies_a_write_once(relay):
    admin = RelayClient(relay.base_url, api_key=relay.admin_key, client_id="demo")
    params = {"uuid": BROM, "attribute": "system.currency.sp", "amount": 2}
    first = admin.post("/increase", idempotency_key="py-once", **params)
    again = admin.post("/increase", idempotency_key="py-once", **params)
    assert again == first
    assert admin.get_document(BROM)["system"]["currency"]["sp"] == first["newValue"]
    with pytest.raises(RelayError) as reused:
        admin.post("/increase", idempotency_key="py-once", **dict(params, amount=3))
    assert reused.value.status == 409
    assert "py-once" in reused.value.message
    assert admin.get_document(BROM)["system"]["currency"]["sp"] == first["newValue"]
