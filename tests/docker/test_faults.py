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

from sandbox.backends.base import LABEL_OWNER
from sandbox.backends.docker.backend import DockerBackend
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.errors import SandboxError
from sandbox.models import SandboxSpec
from tests import redis_server as redis_fixtures
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.docker.servers import ServerProcess, started
from tests.polling import eventually

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
    while time.monotonic() - stopped < 60:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    time.sleep(down_s)
    # As scripts/setup.sh starts it: detached, so it outlives this test.
    subprocess.run(
        ["sh", "-c", f"setsid dockerd --pidfile='{DOCKERD_PIDFILE}' >>'{DOCKERD_LOG}' 2>&1 </dev/null &"], check=True
    )
    deadline = time.monotonic() + 60
    while subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, "dockerd did not come back within 60 s"
        time.sleep(0.2)
    return time.monotonic() - stopped


async def _hold(client: AsyncClient, n: int) -> list[AsyncSandbox]:
    sandboxes = [await client.create(**TERMINAL) for _ in range(n)]
    for sandbox in sandboxes:
        await sandbox.files.write("/workspace/mark", sandbox.id)
    return sandboxes


async def _keep_stepping(sandbox: AsyncSandbox, stop: asyncio.Event, errors: list[str]) -> int:
    steps = 0
    while not stop.is_set():
        try:
            result = await sandbox.exec("echo step")
            assert result.stdout == "step\n"
            steps += 1
        except SandboxError as e:
            errors.append(f"{type(e).__name__}: {e.message}")
            await asyncio.sleep(0.2)
    return steps


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


async def test_an_engine_restart_under_load_keeps_every_sandbox_and_its_files(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    async with _serving(docker_client, tmp_path, "er") as (_, _, client):
        sandboxes = await _hold(client, 4)
        stop, errors = asyncio.Event(), []
        loops = [asyncio.create_task(_keep_stepping(sb, stop, errors)) for sb in sandboxes]
        await asyncio.sleep(1)
        down = await asyncio.to_thread(_restart_dockerd, 2.0)
        await asyncio.sleep(3)  # several health rounds and reconciliations with the engine back
        stop.set()
        steps = await asyncio.gather(*loops)
        assert all(n > 0 for n in steps), steps
        assert not errors, f"steps failed while the engine was down {down:.1f} s: {errors[:5]}"
        for sandbox in sandboxes:
            info = (await client.get(sandbox.id)).info
            assert info.replacements == 0 and info.state.value == "running", info
            assert await sandbox.files.read("/workspace/mark") == sandbox.id.encode()
        for sandbox in sandboxes:
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
            await asyncio.sleep(3)  # reconciliation passes with the orphan grace long over
            assert await asyncio.to_thread(_containers, docker_client, owner) == before, "containers were reaped"
            for sandbox in sandboxes:
                assert await sandbox.files.read("/workspace/mark") == sandbox.id.encode()
                assert (await sandbox.exec("echo ok")).stdout == "ok\n"
                await sandbox.close()
