"""The example bot of the documentation, run as a user would run it."""

import os
import pathlib
import queue
import subprocess
import sys
import threading

from relay_client import RelayClient

SDK = pathlib.Path(__file__).resolve().parents[1]
ARIA = "Actor.ariaVale00000001"


def test_hp_bot_rolls_a_skill_check_when_hit_points_drop(relay):
    admin = RelayClient(relay.base_url, api_key=relay.admin_key)
    bot_key = admin.post("/keys", name="hp-bot", scopes=["entity:read", "events:subscribe", "dnd5e"],
                         clientIds=["demo"], scopedUserId="Alice")["key"]
    start_hp = admin.get_document(ARIA)["system"]["attributes"]["hp"]["value"]
    env = dict(os.environ, RELAY_URL=relay.base_url, RELAY_API_KEY=bot_key,
               PYTHONPATH=str(SDK) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    bot = subprocess.Popen([sys.executable, str(SDK / "examples" / "hp_bot.py"), ARIA, "ath"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l.rstrip("\n")) for l in bot.stdout], daemon=True).start()
    try:
        assert lines.get(timeout=20) == f"following Aria Vale hp={start_hp}"
        admin.update(ARIA, {"system.attributes.hp.value": start_hp - 3})
        line = lines.get(timeout=20)
        assert line.startswith(f"hp {start_hp} -> {start_hp - 3}: ath check "), line
        admin.update(ARIA, {"system.attributes.hp.value": start_hp})
        assert lines.get(timeout=20) == f"hp {start_hp - 3} -> {start_hp}"
    finally:
        bot.terminate()
        bot.wait(10)


def test_the_manual_shows_the_bot_that_runs():
    """docs/guide/clients.md shows examples/hp_bot.py as it is."""
    page = (SDK.parents[1] / "docs" / "guide" / "clients.md").read_text()
    bot = (SDK / "examples" / "hp_bot.py").read_text()
    assert "```python\n" + bot + "```\n" in page
