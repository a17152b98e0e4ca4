"""Episodes on real desktops: the first reset to a task runs its setup and snapshots the files it made; a second
sandbox reset to the same task swaps in the warm replica of that snapshot (faster; the steps the snapshot stands for
do not run again, those on live programs do); the reference solution (pyautogui code, a command, WAIT, DONE) scores
1 and doing nothing 0; the trajectory's frames are kept once per content on disk."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import pytest
import pytest_asyncio

from sandbox.backends.base import LABEL_OWNER
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.models import Exec, Pyautogui, SandboxSpec
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.task_config import TaskSettings, task_snapshot_name
from sandbox.store import EmbeddedStore
from sandbox.tasks.model import Task
from sandbox.trajectories import LocalTrajectoryStore
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.polling import eventually

pytestmark = pytest.mark.docker

LOGGER = logging.getLogger("sandbox.test.episodes")
EP_OWNER = f"{OWNER}-ep"
EP_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-ep"
ALICE = Principal("alice")
FAST = LifecycleSettings(tick_s=0.2, health_interval_s=1.0, reconcile_interval_s=5.0, orphan_grace_s=120)

NOTES = "/home/sandbox/Desktop/notes.txt"
RUNS = "/home/sandbox/.setup-runs"
TASK: dict[str, Any] = {
    "id": "desktop-notes",
    "instruction": "Replace the draft on the Desktop with the final text.",
    "sandbox": {"kind": "desktop"},
    "config": [
        {
            "type": "execute",
            "parameters": {
                "command": f"mkdir -p ~/Desktop && printf 'draft\\n' > {NOTES} && echo run >> {RUNS}",
                "shell": True,
            },
        },
        {"type": "launch", "parameters": {"command": ["xterm", "-T", "notes-app", "-e", "sh", "-c", "sleep 100000"]}},
    ],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": f"cat {NOTES}", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "final\n"}},
    },
    "limits": {"max_steps": 10},
}


@pytest_asyncio.fixture
async def service(docker_client: docker.DockerClient, tmp_path: Path) -> AsyncIterator[SandboxService]:
    require_image(docker_client, "desktop")
    with owned_by(docker_client, EP_OWNER, EP_SOCKET_ROOT):
        backend = DockerBackend(DockerConfig(owner=EP_OWNER, socket_root=EP_SOCKET_ROOT))
        store = await EmbeddedStore.open(None, logger=LOGGER)
        trajectories = LocalTrajectoryStore(tmp_path / "trajectories")
        service = SandboxService(
            backend, store, logger=LOGGER, tasks=TaskSettings(warm_per_task=1), trajectories=trajectories
        )
        lifecycle = Lifecycle(service, FAST, logger=LOGGER)
        runner = asyncio.create_task(lifecycle.run())  # keeps the warm replicas of the task's snapshot
        try:
            yield service
        finally:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
            await lifecycle.stop()
            for snap in await service.list_snapshots(ALICE):
                await service.delete_snapshot(ALICE, snap.name)
            await service.close()
            await store.close()
    for image in docker_client.images.list(filters={"label": f"{LABEL_OWNER}={EP_OWNER}"}):
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(image.id, force=True)


async def _sh(service: SandboxService, sandbox_id: str, cmd: str) -> tuple[int | None, str]:
    result = await service.exec(ALICE, sandbox_id, Exec(cmd=cmd))
    return result.exit_code, result.stdout


async def _window(service: SandboxService, sandbox_id: str, title: str) -> bool:
    code, _ = await _sh(service, sandbox_id, f"xdotool search --onlyvisible --name '^{title}$'")
    return code == 0


async def test_a_desktop_task_first_set_up_then_swapped_in_warm(service: SandboxService, tmp_path: Path) -> None:
    task = Task.from_dict(TASK)
    spec = SandboxSpec.model_validate({"kind": "desktop", "labels": TEST_LABEL})
    first = await service.create(ALICE, spec)
    second = await service.create(ALICE, spec)
    try:
        # 1. The first reset runs the setup and snapshots its result, with a warm replica.
        started = time.perf_counter()
        obs = await service.reset(ALICE, first.id, task=task)
        first_reset_s = time.perf_counter() - started
        assert obs.info["setup_steps"] == 2 and obs.screenshot is not None and obs.screenshot.width == 1280
        name = task_snapshot_name(task.model_copy(update={"config": task.config[:1]}).digest())
        snaps = {s.name: s for s in await service.list_snapshots(ALICE)}
        assert name in snaps and snaps[name].warm == 1
        assert await _sh(service, first.id, f"cat {NOTES}") == (0, "draft\n")

        # 2. The reference solution, OSWorld-style: pyautogui code, a command, WAIT, DONE.
        moved = await service.step(ALICE, first.id, Pyautogui(code="pyautogui.moveTo(300, 200)"), screenshot=True)
        assert moved.cursor == (300, 200) and moved.info["steps"] == 1
        solve = Exec(cmd=f"printf 'final\\n' > {NOTES}")
        await service.step(ALICE, first.id, solve, screenshot=True)
        waited = await service.step(ALICE, first.id, Pyautogui(code="WAIT"), screenshot=True)
        assert waited.timings_ms["action"] >= 900  # OSWorld's WAIT: a pause of a second
        done = await service.step(ALICE, first.id, Pyautogui(code="DONE"), screenshot=True)
        assert (done.done, done.info["reason"], done.info["steps"]) == (True, "done", 4)
        assert await service.evaluate(ALICE, first.id) == 1.0

        # 3. The trajectory: every step, frames on disk once per content.
        trajectory = await service.get_trajectory(ALICE, obs.info["trajectory_id"])
        assert [s.index for s in trajectory.steps] == [0, 1, 2, 3, 4] and trajectory.info.reward == 1.0
        hashes = [s.frame.sha256 for s in trajectory.steps if s.frame is not None]
        assert len(hashes) == 5
        frames = sorted(p.stem for p in tmp_path.glob(f"trajectories/alice/{trajectory.info.id}/frames/*.png"))
        assert frames == sorted(set(hashes)) and len(frames) < len(hashes), "an unchanged screen is kept once"
        assert trajectory.info.frames == len(frames)

        # 4. A second sandbox: the warm replica of the snapshot swaps in, and no setup runs.
        pool = next(iter(await service.pools.sizes()))  # the one pool here: the snapshot's
        await eventually(lambda: _ready(service, pool), 90, "the warm replica of the task's snapshot")
        warm = set(await service.store.items(pool))
        setups = service.setups_run
        started = time.perf_counter()
        again = await service.reset(ALICE, second.id, task=task)
        second_reset_s = time.perf_counter() - started
        assert again.info["snapshot"] == name and service.setups_run == setups
        assert again.info["setup_steps"] == 1  # the launch: a snapshot keeps no running program
        record = await service.store.get("sandboxes", second.id)
        assert record is not None and record["instance"] in warm, "the fast path swaps in the warm replica"
        assert second_reset_s < first_reset_s, (second_reset_s, first_reset_s)
        LOGGER.warning("reset to a task: %.3f s running setup, %.3f s warm", first_reset_s, second_reset_s)
        assert await _sh(service, second.id, f"cat {NOTES}") == (0, "draft\n")  # the post-setup state
        assert await _sh(service, second.id, f"cat {RUNS}") == (0, "run\n")  # the kept steps did not run again
        await eventually(lambda: _window(service, second.id, "notes-app"), 30, "the task's app on the screen")
        assert await service.evaluate(ALICE, second.id) == 0.0  # a policy that does nothing scores 0
    finally:
        await service.delete(ALICE, first.id)
        await service.delete(ALICE, second.id)


async def _ready(service: SandboxService, pool: str) -> bool:
    return len(await service.store.items(pool)) >= 1
