"""Starts a real relay for the tests: `relay serve` as a child process on a
free loopback port with a fresh data directory holding the demo world. The
binary is RELAY_BIN when set (make sdk-python-test builds it once), else it
is built here with `go build`."""

import json
import os
import pathlib
import subprocess
import tempfile
import threading
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


class Relay:
    """A running relay: its base URL, admin key and data directory."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="relay-py-test-")
        bin_path = os.environ.get("RELAY_BIN")
        if not bin_path:
            bin_path = os.path.join(self.dir, "relay")
            subprocess.run(["go", "build", "-o", bin_path, "./cmd/relay"], cwd=REPO, check=True)
        # RELAY_* settings of the developer's shell must not change the
        # relay under test.
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        self.process = subprocess.Popen(
            [bin_path, "serve", "--listen", "127.0.0.1:0", "--data", os.path.join(self.dir, "data"),
             "--log-format", "json", "--dice-seed", "20261125", "--node-id", "9", *extra],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready = threading.Event()
        self.addr = None

        def read_log():
            for line in self.process.stderr:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("msg") == "relay ready" and not ready.is_set():
                    self.addr = entry["addr"]
                    ready.set()

        threading.Thread(target=read_log, daemon=True).start()
        deadline = time.monotonic() + 60
        while not ready.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the relay did not get ready")
        self.base_url = f"http://{self.addr}"
        with open(os.path.join(self.dir, "data", "admin.key")) as f:
            self.admin_key = f.read().strip()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        subprocess.run(["rm", "-rf", self.dir], check=False)


@pytest.fixture(scope="session")
def relay():
    r = Relay()
    yield r
    r.stop()
