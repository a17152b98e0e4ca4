"""The android sandbox against a real emulator: runs only when SANDBOX_ANDROID_IMAGE names a built android image
(``SANDBOX_ANDROID_SDK=... sandbox images build android``) and the host has /dev/kvm; skipped, saying why,
otherwise. It starts its own container (docker run --device /dev/kvm) and removes it afterwards, and talks to the
agent over the container's unix socket only."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.tasks import Fixtures

IMAGE = os.environ.get("SANDBOX_ANDROID_IMAGE", "")
TASK = Path(__file__).resolve().parents[2] / "tasks" / "android" / "android-wifi-off.json"
BOOT_TIMEOUT_S = float(os.environ.get("SANDBOX_ANDROID_BOOT_TIMEOUT", "600"))

pytestmark = [
    pytest.mark.skipif(not IMAGE, reason="no android image: set SANDBOX_ANDROID_IMAGE (see docs/android.md)"),
    pytest.mark.skipif(not os.path.exists("/dev/kvm"), reason="no /dev/kvm: the emulator needs KVM"),
    pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI"),
]


@pytest.fixture(scope="module")
def agent() -> Iterator[object]:
    from sandbox.backends.agent_client import AgentClient

    sockets = Path(tempfile.mkdtemp(prefix="android-live-"))
    sockets.chmod(0o777)
    name = f"sandbox-android-live-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--device", "/dev/kvm", "--network", "none",
         "-v", f"{sockets}:/run/sandbox", IMAGE],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (sockets / "agent.sock").exists():
            assert time.monotonic() < deadline, "the agent's socket did not appear"
            time.sleep(0.5)
        yield AgentClient(str(sockets / "agent.sock"))
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)  # only the container this test started


async def test_boot_screenshot_actions_tree_and_reset(agent: object) -> None:
    client = agent
    ready, _ = await client.request("android", {"op": "ready", "timeout": BOOT_TIMEOUT_S}, deadline=BOOT_TIMEOUT_S)  # type: ignore[attr-defined]
    assert ready["ready_s"] >= 0
    shot = await client.screenshot(format="png")  # type: ignore[attr-defined]
    assert shot.width > 0 and shot.data.startswith(b"\x89PNG")
    await client.act({"type": "key", "key": "home"})  # type: ignore[attr-defined]
    await client.act({"type": "open_app", "package": "com.android.settings"})  # type: ignore[attr-defined]
    await client.act({"type": "scroll", "x": 500, "y": 1200, "dy": 3})  # type: ignore[attr-defined]
    _, tree = await client.request("android", {"op": "ui_tree"})  # type: ignore[attr-defined]
    assert b"<hierarchy" in tree
    reset, _ = await client.request("android", {"op": "reset"}, deadline=BOOT_TIMEOUT_S)  # type: ignore[attr-defined]
    assert reset["snapshot"] == "default_boot"


async def test_android_actions_and_the_sample_task(agent: object) -> None:
    """The step API's android actions as the service sends them (model dumps), and the sample task's setup and
    evaluator through the agent, as the service runs them."""
    from sandbox.models import SandboxKind, SandboxSpec
    from sandbox.models.android import LongPress, OpenApp, Swipe, Tap
    from sandbox.service.task_runtime import AgentRuntime
    from sandbox.tasks import Task, evaluate, run_setup

    client: Any = agent
    await client.request("android", {"op": "ready", "timeout": BOOT_TIMEOUT_S}, deadline=BOOT_TIMEOUT_S)
    for action in (OpenApp(package="com.android.settings"), Tap(x=540, y=960), LongPress(x=540, y=960),
                   Swipe(x=540, y=1500, to_x=540, to_y=500)):  # fmt: skip
        await client.act(action.model_dump(exclude_none=True))
    task = Task.from_file(TASK)
    runtime = AgentRuntime(client, SandboxSpec(kind=SandboxKind.ANDROID))
    await run_setup(task, runtime, task.fixtures or Fixtures())
    assert (await evaluate(task, runtime, task.fixtures or Fixtures())).reward == 0.0  # Wi-Fi is on
    await runtime.exec("adb shell svc wifi disable", timeout=60)
    assert (await evaluate(task, runtime, task.fixtures or Fixtures())).reward == 1.0
