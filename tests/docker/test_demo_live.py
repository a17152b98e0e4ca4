"""`sandbox demo live`, what `make run` runs after the demo, against a real server: it keeps a desktop, a browser
showing a game and a terminal running and says their ids; at SIGINT (Ctrl-C) or SIGTERM it deletes them, and none is
left in the control plane or in the engine."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import docker
import pytest

from sandbox.cli.demo import LIVE_GAME, LIVE_KINDS, LIVE_LEASE_S
from sandbox.client import Client
from sandbox.games import STATE_JS
from tests.conftest import OWNER, RUN_ID, owned_by, require_image
from tests.docker.servers import SANDBOX_BIN, ServerProcess, started

pytestmark = pytest.mark.docker

LV_OWNER = f"{OWNER}-live"
LV_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-live"
LIVE_LABEL = "sandbox.user.sandbox.demo=live"  # the spec's labels, on the containers
READY = "sandboxes stay live for the web view until Ctrl-C"


class Holder:
    """`sandbox demo live` as a process, its output read as it comes."""

    def __init__(self, server: ServerProcess) -> None:
        argv = [SANDBOX_BIN, "demo", "live", "--target", server.grpc_target, "--view", f"{server.http_url}/view"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if READY in self.output and set(self.ids()) == set(LIVE_KINDS):  # the line and the ids under it
                self.ready.set()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def ids(self) -> dict[str, str]:
        """kind -> id, from the lines under the READY one."""
        found = {}
        for line in self.lines:
            words = line.split()
            if len(words) >= 2 and words[0] in LIVE_KINDS and words[1].startswith("sb-"):
                found[words[0]] = words[1]
        return found

    def stop(self, signum: int, timeout: float = 120) -> int:
        self.process.send_signal(signum)
        rc = self.process.wait(timeout)
        self._reader.join(10)
        return rc

    def close(self) -> None:
        """Kill it if it still runs (by its own PID), and close its pipe."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def live_containers(docker_client: docker.DockerClient) -> list[str]:
    filters = {"label": [f"sandbox.owner={LV_OWNER}", LIVE_LABEL]}
    return [c["Id"] for c in docker_client.api.containers(all=True, filters=filters)]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_demo_live_keeps_three_sandboxes_until_the_signal_then_deletes_them(
    signum: int, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    for kind in LIVE_KINDS:
        require_image(docker_client, kind)
    server = ServerProcess(tmp_path, owner=LV_OWNER, socket_root=LV_SOCKET_ROOT)
    with owned_by(docker_client, LV_OWNER, LV_SOCKET_ROOT), started(server):
        holder = Holder(server)
        try:
            assert holder.ready.wait(240), f"`demo live` never said its sandboxes were up:\n{holder.output}"
            ids = holder.ids()
            assert f"{server.http_url}/view" in holder.output
            with Client(server.grpc_target) as client:
                listed = {info.id: info for info in client.list()}
                assert set(listed) == set(ids.values())
                for kind, sandbox_id in ids.items():
                    info = listed[sandbox_id]
                    assert info.kind.value == kind and info.state.value == "running", info
                    assert info.spec.labels == {"sandbox.demo": "live"} and info.spec.ttl_s == LIVE_LEASE_S
                state = client.get(ids["browser"]).step({"type": "evaluate", "expression": STATE_JS}).value
                assert isinstance(state, dict) and state["game"] == LIVE_GAME, state
                assert len(live_containers(docker_client)) == len(LIVE_KINDS)

                assert holder.stop(signum) == 0, holder.output
                assert "deleted the live sandboxes" in holder.output
                assert client.list() == [], "the live sandboxes are still listed"
            give_up = time.monotonic() + 60
            while live_containers(docker_client) and time.monotonic() < give_up:
                time.sleep(0.5)
            assert live_containers(docker_client) == [], "their containers are left in the engine"
        finally:
            holder.close()
