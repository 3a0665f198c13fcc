"""A bot that follows an actor's events and rolls a skill check whenever its
hit points drop.

    RELAY_URL=http://127.0.0.1:8080 RELAY_API_KEY=rk_... \\
        python3 examples/hp_bot.py Actor.ariaVale00000001 per

It prints one line per event it acts on, and runs until it is stopped
(Ctrl-C). The key needs the entity:read, events:subscribe and dnd5e scopes.
"""

import os
import sys

from relay_client import RelayClient


def hp_of(changes):
    """The new hit points in an actor-update event's changes, or None."""
    try:
        return changes["system"]["attributes"]["hp"]["value"]
    except (KeyError, TypeError):
        return None


def main(actor_uuid, skill):
    relay = RelayClient(os.environ.get("RELAY_URL", "http://127.0.0.1:8080"),
                        api_key=os.environ["RELAY_API_KEY"])
    actor = relay.get_document(actor_uuid)
    hp = actor["system"]["attributes"]["hp"]["value"]
    for event in relay.subscribe("/actor/subscribe", actorUuid=actor_uuid):
        if event.event == "connected":
            print(f"following {actor['name']} hp={hp}", flush=True)
        elif event.event == "actor-update":
            new_hp = hp_of(event.data.get("changes"))
            if new_hp is None:
                continue
            if new_hp < hp:
                check = relay.skill_check(actor_uuid, skill)
                print(f"hp {hp} -> {new_hp}: {skill} check {check.total} ({check.formula})", flush=True)
            else:
                print(f"hp {hp} -> {new_hp}", flush=True)
            hp = new_hp


if __name__ == "__main__":
    try:
        main(sys.argv[1] if len(sys.argv) > 1 else "Actor.ariaVale00000001",
             sys.argv[2] if len(sys.argv) > 2 else "per")
    except KeyboardInterrupt:
        pass
