"""The relay's Python client: REST calls and event streams.

    from relay_client import RelayClient

    relay = RelayClient("http://127.0.0.1:8080", api_key="rk_...")
    aria = relay.get_document("Actor.ariaVale00000001")
    for event in relay.subscribe("/actor/subscribe", actorUuid=aria["uuid"]):
        print(event.event, event.data)

Calls return the envelope's ``data``; a refusal raises RelayError with the
HTTP status and the relay's message. Event streams reconnect and resume
with Last-Event-ID. The gRPC stubs are generated from the protos by
``make sdk-python-generate`` into sdk/python/gen (see README.md there).
"""

from .client import Event, RelayClient, RelayError, SkillCheck, read_events

__all__ = ["Event", "RelayClient", "RelayError", "SkillCheck", "read_events"]
__version__ = "0.1.0"
