"""Faults that used to lose data or leak, through real containers: a start cancelled mid-engine-call, a stopped
container of an auto_recover sandbox, the Docker engine restarting under load, Redis restarting empty."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import ContainerCollection

from sandbox.backends.base import LABEL_INSTANCE, LABEL_KIND, LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from sandbox.backends.docker.backend import DockerBackend
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.errors import SandboxError
from sandbox.models import SandboxSpec
from tests import redis_server as redis_fixtures
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.docker.servers import ServerProcess, started
from tests.polling import eventually, wait_until

pytestmark = pytest.mark.docker

DOCKERD_PIDFILE = "/var/run/sandbox-dockerd.pid"
DOCKERD_LOG = "/var/log/sandbox-dockerd.log"
FAST_LIFECYCLE = {"tick_s": 0.2, "health_interval_s": 0.5, "reconcile_interval_s": 0.5, "orphan_grace_s": 2}
TERMINAL = {"kind": "terminal", "labels": TEST_LABEL, "auto_recover": True}


def _containers(docker_client: docker.DockerClient, owner: str) -> set[str]:
    filters = {"label": f"{LABEL_OWNER}={owner}"}
    return {c["Id"] for c in docker_client.api.containers(all=True, filters=filters)}


async def test_a_cancelled_start_leaves_no_container(
    backend: DockerBackend, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_image(docker_client, "terminal")
    entered, release = threading.Event(), threading.Event()
    create = ContainerCollection.create

    def held_create(self: ContainerCollection, *args: Any, **params: Any) -> Any:
        entered.set()
        release.wait(30)  # the caller is cancelled while the engine call is under way
        return create(self, *args, **params)

    monkeypatch.setattr(ContainerCollection, "create", held_create)
    spec = SandboxSpec(kind="terminal", labels=TEST_LABEL)
    start = asyncio.ensure_future(backend.create("in-term-cancel1", spec))
    try:
        assert await asyncio.to_thread(entered.wait, 30), "the engine call never started"
        start.cancel()
    finally:
        release.set()
    with pytest.raises(asyncio.CancelledError):
        await start
    monkeypatch.undo()
    assert (await backend.inspect("in-term-cancel1")).state.value == "missing", "the cancelled start left a container"


def _dockerd_pid() -> int:
    try:
        with open(DOCKERD_PIDFILE) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        pytest.fail(
            f"this test restarts the Docker engine started by scripts/setup.sh (pid in {DOCKERD_PIDFILE}); "
            "none is running: run `make setup`",
            pytrace=False,
        )
    return pid


def _restart_dockerd(down_s: float) -> float:
    """Stop the engine that setup started (by its pid), keep it down ``down_s``, start it again; returns the
    seconds it was down. Blocking."""
    pid = _dockerd_pid()
    stopped = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not _alive(pid), 60, "dockerd's exit")
    time.sleep(down_s)  # a duration, not a wait for a state: the outage the sandboxes must ride out
    # As scripts/setup.sh starts it: detached, so it outlives this test.
    subprocess.run(
        ["sh", "-c", f"setsid dockerd --pidfile='{DOCKERD_PIDFILE}' >>'{DOCKERD_LOG}' 2>&1 </dev/null &"], check=True
    )
    wait_until(lambda: subprocess.run(["docker", "info"], capture_output=True).returncode == 0, 60, "dockerd's return")
    return time.monotonic() - stopped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _hold(client: AsyncClient, n: int) -> list[AsyncSandbox]:
    sandboxes = [await client.create(**TERMINAL) for _ in range(n)]
    for sandbox in sandboxes:
        await sandbox.files.write("/workspace/mark", sandbox.id)
    return sandboxes


async def _keep_stepping(
    sandbox: AsyncSandbox, stop: asyncio.Event, errors: list[str], steps: list[int], i: int
) -> None:
    """Step ``sandbox`` until ``stop``, counting its steps in ``steps[i]`` and its failures in ``errors``."""
    while not stop.is_set():
        try:
            result = await sandbox.exec("echo step")
            assert result.stdout == "step\n"
            steps[i] += 1
        except SandboxError as e:
            errors.append(f"{type(e).__name__}: {e.message}")
            await asyncio.sleep(0.2)  # pacing: a failing step is not retried in a tight loop


@contextlib.asynccontextmanager
async def _serving(
    docker_client: docker.DockerClient, tmp_path: Path, tag: str, **options: Any
) -> AsyncIterator[tuple[str, ServerProcess, AsyncClient]]:
    """A server of an owner of its own (this run's, suffixed ``-<tag>``) with the fast lifecycle, started, and a
    client of it: (owner, server, client). At the end the server is stopped and that owner's containers are gone."""
    require_image(docker_client, "terminal")
    owner, sockets = f"{OWNER}-{tag}", f"/run/sbx-test-{RUN_ID}-{tag}"
    settings = {"lifecycle": FAST_LIFECYCLE}
    server = ServerProcess(tmp_path, owner=owner, socket_root=sockets, settings=settings, **options)
    with owned_by(docker_client, owner, sockets), started(server):
        async with AsyncClient(server.grpc_target, timeout=60) as client:
            yield owner, server, client


async def _health_rounds(
    client: AsyncClient, docker_client: docker.DockerClient, owner: str, sentinel: AsyncSandbox, rounds: int
) -> None:
    """Return once ``rounds`` whole health rounds have begun and ended since the call.

    The server counts its rounds nowhere, so a sentinel (an auto_recover sandbox kept for this) has its container
    killed and is waited on until a round has started it again in place, ``rounds + 2`` times. A round restarts the
    sentinel at most once, and begins only when the one before it has ended; the round of the first restart is under
    way after the call, so the rounds of the second to the second-to-last restarts began after the call and have
    ended by the last one."""
    first = (await client.get(sentinel.id)).info.replacements
    for n in range(1, rounds + 3):
        instance = await _instance_of(sentinel)
        container = await asyncio.to_thread(docker_client.containers.get, f"sbx-{owner}-{instance}")
        await asyncio.to_thread(container.kill)

        async def restarted(n: int = n) -> bool:
            return (await client.get(sentinel.id)).info.replacements == first + n

        await eventually(restarted, 30, f"health round {n}'s restart of the sentinel")


async def _instance_of(sandbox: AsyncSandbox) -> str:
    """The instance ``sandbox`` runs on, once its agent answers."""
    found: list[str] = []

    async def answers() -> bool:
        try:
            found[:] = [(await sandbox.exec("printf %s $SANDBOX_INSTANCE_ID")).stdout]
        except SandboxError:
            return False
        return True

    await eventually(answers, 30, f"an answer from {sandbox.id}")
    return found[0]


def _orphan(docker_client: docker.DockerClient, owner: str, instance: str) -> str:
    """A container with the labels of ``owner``'s control plane that none of its records knows of (created, never
    started): reconciliation removes it after two passes once it is older than the orphan grace. Its id."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: owner, LABEL_INSTANCE: instance, LABEL_KIND: "terminal"}
    name = f"sbx-{owner}-{instance}"
    return str(
        docker_client.containers.create("sandbox/terminal", ["true"], name=name, labels={**labels, **TEST_LABEL}).id
    )


async def _reconciled(docker_client: docker.DockerClient, owner: str, instance: str) -> None:
    """Return once reconciliation has run (two passes, each over every container of ``owner``) with the orphan grace
    over for every container made before the call: the server counts its passes nowhere, so an orphan made now is
    waited on until they remove it."""
    orphan = await asyncio.to_thread(_orphan, docker_client, owner, instance)
    grace = FAST_LIFECYCLE["orphan_grace_s"]
    await eventually(
        lambda: asyncio.to_thread(lambda: orphan not in _containers(docker_client, owner)),
        grace + 30,
        "the reconciliation passes that remove an orphan",
    )


async def test_an_engine_restart_under_load_keeps_every_sandbox_and_its_files(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    async with _serving(docker_client, tmp_path, "er") as (owner, _, client):
        *sandboxes, sentinel = await _hold(client, 5)
        stop, steps = asyncio.Event(), [0] * len(sandboxes)
        errors: list[str] = []
        loops = [asyncio.create_task(_keep_stepping(sb, stop, errors, steps, i)) for i, sb in enumerate(sandboxes)]
        await eventually(lambda: all(steps), 30, "a step in every sandbox before the restart")
        down = await asyncio.to_thread(_restart_dockerd, 2.0)
        back = list(steps)
        # With the engine back: steps in every sandbox, two whole health rounds and reconciliation passes.
        await eventually(lambda: all(n > b for n, b in zip(steps, back, strict=True)), 30, "steps after the restart")
        await _health_rounds(client, docker_client, owner, sentinel, 2)
        await _reconciled(docker_client, owner, "orphan-er")
        stop.set()
        await asyncio.gather(*loops)
        assert not errors, f"steps failed while the engine was down {down:.1f} s: {errors[:5]}"
        for sandbox in sandboxes:
            info = (await client.get(sandbox.id)).info
            assert info.replacements == 0 and info.state.value == "running", info
            assert await sandbox.files.read("/workspace/mark") == sandbox.id.encode()
        for sandbox in (*sandboxes, sentinel):
            await sandbox.close()


async def test_a_stopped_container_starts_again_in_place_with_its_files(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    async with _serving(docker_client, tmp_path, "sp") as (owner, server, client):
        (sandbox,) = await _hold(client, 1)
        instance = (await sandbox.exec("printf %s $SANDBOX_INSTANCE_ID")).stdout
        container = docker_client.containers.get(f"sbx-{owner}-{instance}")
        await asyncio.to_thread(container.stop, timeout=1)

        async def recovered() -> bool:
            return (await client.get(sandbox.id)).info.replacements == 1

        await eventually(recovered, 30, "the stopped container's recovery")
        assert (await sandbox.exec("printf %s $SANDBOX_INSTANCE_ID")).stdout == instance, "it was replaced"
        assert await sandbox.files.read("/workspace/mark") == sandbox.id.encode(), "its files were lost"
        assert "sandbox_restarted" in server.log_tail(20000)
        await sandbox.close()


async def test_redis_restarting_empty_reaps_nothing_and_sandboxes_are_adopted(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    with redis_fixtures.RedisServer() as redis:
        async with _serving(docker_client, tmp_path, "rw", redis_url=redis.url) as (owner, _, client):
            sandboxes = await _hold(client, 3)
            before = await asyncio.to_thread(_containers, docker_client, owner)
            redis.stop()
            redis.start()  # the same port, no data: a Redis without persistence after a restart

            async def adopted() -> bool:
                try:
                    states = [(await client.get(sb.id)).info.state.value for sb in sandboxes]
                except SandboxError:
                    return False
                return states == ["running"] * len(sandboxes)

            await eventually(adopted, 30, "the adoption of the held sandboxes")
            await _reconciled(docker_client, owner, "orphan-rw")  # passes with the held ones past the orphan grace
            assert await asyncio.to_thread(_containers, docker_client, owner) == before, "containers were reaped"
            for sandbox in sandboxes:
                assert await sandbox.files.read("/workspace/mark") == sandbox.id.encode()
                assert (await sandbox.exec("echo ok")).stdout == "ok\n"
                await sandbox.close()
