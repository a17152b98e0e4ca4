"""Direct lanes through real containers (docs/lanes.md): a real `sandbox server`, the SDK opening a lane over gRPC
and stepping the sandbox's agent on the host's lane socket. A terminal's commands and a desktop's actions and
screenshots (PNG and zstd) come back as through the control plane; the control plane's metrics, recent actions and
idle clock see the lane's steps; a reset moves the lane to the new container; an episode's steps go through the
control plane and are counted there; a wrong ticket opens nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sandbox.client import Client
from sandbox.errors import FailedPrecondition
from sandbox.protocol import HELLO_OP
from sandbox.testing.lane_wire import exchange
from sandbox.testing.server import ServerProcess
from tests.conftest import OWNER, RUN_ID, owned_by, require_image

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
LN_OWNER = f"{OWNER}-ln"
LN_SOCKETS = f"/run/sbx-test-{RUN_ID}-ln"
TASK = ROOT / "tasks" / "terminal-sort-names.json"


@pytest.fixture(scope="module")
def server(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    for kind in ("terminal", "desktop"):
        require_image(docker_client, kind)
    process = ServerProcess(tmp_path_factory.mktemp("lanes"), owner=LN_OWNER, socket_root=LN_SOCKETS)
    with owned_by(docker_client, LN_OWNER, LN_SOCKETS):
        try:
            yield process.start()
        finally:
            process.stop()
            print(process.log_tail())


@pytest.fixture
def sdk(server: ServerProcess) -> Iterator[Client]:
    with Client(server.grpc_target, timeout=120) as client:
        yield client


def lane_steps(http: httpx.Client, kind: str) -> float:
    text = http.get("/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sandbox_lane_steps_total" and s.labels == {"kind": kind, "outcome": "ok"}
    )


def eventually(check: Any, timeout: float = 10.0) -> Any:
    give_up = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > give_up:
            return found
        time.sleep(0.1)


def test_a_terminals_commands_over_the_lane_and_what_the_control_plane_sees(server: ServerProcess, sdk: Client) -> None:
    with httpx.Client(base_url=server.http_url, timeout=60) as http, sdk.create("terminal") as sb, sb.lane() as lane:
        before = lane_steps(http, "terminal")
        first = lane.step({"type": "exec", "cmd": "echo $((6*7)) > answer; cat answer; echo warn >&2; exit 2"})
        assert lane.info is not None and lane.info.address.startswith("unix:") and lane.info.actions == ["exec"]
        assert first.exec is not None and (first.exec.exit_code, first.exec.stdout, first.exec.stderr) == (
            2,
            "42\n",
            "warn\n",
        )
        kept = lane.step({"type": "exec", "cmd": "cd /tmp && export X=1", "session": "s"})
        assert kept.exec is not None and kept.exec.exit_code == 0
        again = lane.step({"type": "exec", "cmd": "echo $PWD $X", "session": "s"})
        assert again.exec is not None and again.exec.stdout == "/tmp 1\n"  # a session's state, as through Step
        assert sb.exec("cat /workspace/answer").stdout == "42\n"  # the same sandbox the control plane steps

        assert eventually(lambda: lane_steps(http, "terminal") >= before + 3), "the lane's steps were never counted"
        actions = http.get(f"/v1/sandboxes/{sb.id}/actions").json()["actions"]
        assert [a["action"]["cmd"] for a in actions[-3:]] == [
            "echo $((6*7)) > answer; cat answer; echo warn >&2; exit 2",
            "cd /tmp && export X=1",
            "echo $PWD $X",
        ]
        assert sb.refresh().last_active_at >= time.time() - 30


def test_a_desktops_actions_and_screenshots_over_the_lane(sdk: Client) -> None:
    with sdk.create("desktop") as sb, sb.lane() as lane:
        moved = lane.step({"type": "move", "x": 100, "y": 120}, screenshot=True)
        assert lane.info is not None and {"click", "key", "type_text", "exec"} <= set(lane.info.actions)
        assert moved.cursor == (100, 120)
        assert moved.screenshot is not None and moved.screenshot.format == "png"
        assert moved.screenshot.image().size == (sb.info.spec.screen.width, sb.info.spec.screen.height)
        raw = lane.observe(format="zstd")
        assert raw.screenshot is not None and raw.screenshot.format == "zstd"
        assert raw.screenshot.image().size == moved.screenshot.image().size
        through_cp = sb.observe(format="zstd")
        assert through_cp.screenshot is not None and through_cp.screenshot.width == raw.screenshot.width
        with pytest.raises(FailedPrecondition):  # a browser's action, refused as sb.step refuses it
            lane.step({"type": "navigate", "url": "about:blank"})


def test_a_reset_moves_the_lane_to_the_new_container(sdk: Client) -> None:
    with sdk.create("terminal") as sb, sb.lane() as lane:
        lane.step({"type": "exec", "cmd": "echo before > /workspace/mark"})
        first = lane.info
        sb.reset()
        after = lane.step({"type": "exec", "cmd": "cat /workspace/mark 2>/dev/null || echo clean"})
        assert after.exec is not None and after.exec.stdout == "clean\n"
        assert first is not None and lane.info is not None and lane.info.ticket != first.ticket
        refused = _hello(first.address.removeprefix("unix:"), first.ticket)
        assert refused is None or refused["ok"] is False  # the old container's lane is gone or refuses


def test_an_episodes_steps_go_through_the_control_plane(sdk: Client) -> None:
    with sdk.create("terminal") as sb, sb.lane() as lane:
        lane.step({"type": "exec", "cmd": "true"})
        sb.reset(task=TASK)  # a task file: its fixtures go with it
        obs = lane.step({"type": "exec", "cmd": "sort /workspace/names.txt > /workspace/sorted.txt"})
        assert lane.info is None and obs.info["steps"] == 1  # refused a lane; counted by the episode
        assert sb.evaluate() == 1.0


def test_a_wrong_ticket_opens_nothing(sdk: Client) -> None:
    with sdk.create("terminal") as sb, sb.lane() as lane:
        lane.step({"type": "exec", "cmd": "true"})
        assert lane.info is not None
        answer = _hello(lane.info.address.removeprefix("unix:"), "x" + lane.info.ticket[1:])
        assert answer is not None and answer["ok"] is False and answer["error"]["code"] == "unauthenticated"


def _hello(path: str, ticket: str) -> dict[str, Any] | None:
    """The answer to a lane hello on ``path``; None: nothing listens there any more."""
    try:
        answers = exchange(path, [{"op": HELLO_OP, "args": {"lane": ticket}}])
    except (FileNotFoundError, ConnectionError):
        return None
    return answers[0] if answers else None
