"""Auto-recovery, measured: the agent, the X server or the browser of an ``auto_recover`` sandbox is killed while
it is held, and the control plane's background work (at its default settings) brings the sandbox back, under the
same id, within :data:`RECOVERY_BUDGET_S`; a client calling in the meantime sees success or a clear error, never
a hang; and nothing is left behind once the sandbox is deleted. The service runs in-process under an owner label of
its own, as in ``test_lifecycle``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import docker
import pytest
import pytest_asyncio

from sandbox.backends.base import LABEL_OWNER
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.errors import FailedPrecondition, SandboxError, Unavailable
from sandbox.models import Exec, SandboxSpec, SandboxState
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.store import EmbeddedStore
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.polling import eventually

pytestmark = pytest.mark.docker

LOGGER = logging.getLogger("sandbox.test.recovery")
RC_OWNER = f"{OWNER}-rc"
RC_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-rc"
ALICE = Principal("alice")
RECOVERY_BUDGET_S = 5.0
"""From the kill to the sandbox answering again under its id: the promise for ``auto_recover``."""
DEFAULTS = LifecycleSettings()
"""The control plane's own settings (a health round every 2 s): the promise is measured as shipped."""

# What is killed, in which kind of sandbox, found how (a ``ps`` pattern for the process's pid).
VICTIMS = {
    "agent": ("terminal", "ps -eo pid=,args= | awk '/python3 -m sandbox.agent/ && !/awk/ {print $1}'"),
    "xvfb": ("desktop", "ps -C Xvfb -o pid="),
    "chromium": ("browser", "ps -eo pid=,args= | awk '$2 ~ /chromium$/ && !/--type=/ {print $1}'"),
    "container": ("terminal", ""),  # the whole container, SIGKILLed by the engine from outside
}


def _containers(client: docker.DockerClient) -> list[str]:
    return [c["Id"] for c in client.api.containers(all=True, filters={"label": f"{LABEL_OWNER}={RC_OWNER}"})]


@pytest_asyncio.fixture
async def service(docker_client: docker.DockerClient) -> AsyncIterator[SandboxService]:
    with owned_by(docker_client, RC_OWNER, RC_SOCKET_ROOT):
        backend = DockerBackend(DockerConfig(owner=RC_OWNER, socket_root=RC_SOCKET_ROOT))
        store = await EmbeddedStore.open(None, logger=LOGGER)
        service = SandboxService(backend, store, logger=LOGGER)
        yield service
        await service.close()
        await store.close()


@contextlib.asynccontextmanager
async def running(lifecycle: Lifecycle) -> AsyncIterator[None]:
    task = asyncio.create_task(lifecycle.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await lifecycle.stop()


def _kill_inside(container: docker.models.containers.Container, find: str) -> int:
    """Kill -9 the process ``find`` names, from outside the agent (``docker exec``): the agent may be the victim."""
    found = container.exec_run(["sh", "-c", find]).output.decode().split()
    assert found, f"nothing matches {find!r} in the sandbox"
    pid = int(found[0])
    killed = container.exec_run(["kill", "-9", str(pid)])
    assert killed.exit_code == 0, killed.output
    return pid


@pytest.mark.parametrize("victim", sorted(VICTIMS))
async def test_auto_recover_brings_the_sandbox_back_within_the_budget(
    service: SandboxService, docker_client: docker.DockerClient, victim: str
) -> None:
    kind, find = VICTIMS[victim]
    require_image(docker_client, kind)
    info = await service.create(
        ALICE, SandboxSpec.model_validate({"kind": kind, "labels": TEST_LABEL, "auto_recover": True})
    )
    await service.exec(ALICE, info.id, Exec(cmd="echo kept > /workspace/mark"))
    record = await service.store.get("sandboxes", info.id)
    assert record is not None
    container = docker_client.containers.get(service.backend.container_name(record["instance"]))  # type: ignore[attr-defined]
    errors: list[str] = []

    async def back() -> bool:
        """One client call, as a rollout would make it: success, or a clear error (recorded), never a hang."""
        try:
            now = await service.get(ALICE, info.id)
            if now.replacements < 1 or now.state is not SandboxState.RUNNING:
                return False
            result = await asyncio.wait_for(service.exec(ALICE, info.id, Exec(cmd="echo back", timeout=5)), 10)
        except (Unavailable, FailedPrecondition) as e:
            errors.append(f"{type(e).__name__}: {e.message}")
            return False
        return result.stdout == "back\n"

    lifecycle = Lifecycle(service, DEFAULTS, logger=LOGGER)
    async with running(lifecycle):
        await asyncio.sleep(DEFAULTS.tick_s * 2)  # the loop leads and has had its first health round
        killed_at = time.monotonic()
        if find:
            await asyncio.to_thread(_kill_inside, container, find)
        else:
            await asyncio.to_thread(container.kill)
        took = await eventually(back, 30, f"the sandbox answering again after its {victim} was killed")
        took = time.monotonic() - killed_at
    LOGGER.warning("%s killed: the sandbox answered again after %.2f s", victim, took)
    print(f"\n{victim} killed in a {kind} sandbox: answering again after {took:.2f} s")
    now = await service.get(ALICE, info.id)
    assert now.id == info.id and now.replacements == 1 and now.error is None, now
    # Started again in place (the container is still there, only a process or its init died): the files are kept.
    kept = await service.exec(ALICE, info.id, Exec(cmd="cat /workspace/mark"))
    assert kept.stdout == "kept\n", kept
    assert all("sandbox" in e for e in errors), errors  # every error a caller saw named the sandbox
    assert took < RECOVERY_BUDGET_S, f"{victim}: back after {took:.2f} s, over the {RECOVERY_BUDGET_S} s budget"
    await service.delete(ALICE, info.id)
    await eventually(lambda: asyncio.to_thread(lambda: not _containers(docker_client)), 30, "no container left")


async def test_a_call_during_the_outage_gets_a_clear_error_and_nothing_leaks(
    service: SandboxService, docker_client: docker.DockerClient
) -> None:
    """Without the background loop: the client's own call finds the dead agent, the sandbox is recovered on the
    spot and the caller is told to retry (``Unavailable``), and the retry succeeds."""
    require_image(docker_client, "terminal")
    info = await service.create(ALICE, SandboxSpec(kind="terminal", labels=TEST_LABEL, auto_recover=True))
    record = await service.store.get("sandboxes", info.id)
    assert record is not None
    container = docker_client.containers.get(service.backend.container_name(record["instance"]))  # type: ignore[attr-defined]
    await asyncio.to_thread(_kill_inside, container, VICTIMS["agent"][1])
    outcome: SandboxError | str
    try:
        outcome = (await service.exec(ALICE, info.id, Exec(cmd="echo first", timeout=5))).stdout
    except SandboxError as e:
        outcome = e
    assert isinstance(outcome, Unavailable) and "retry" in outcome.message, outcome
    assert (await service.exec(ALICE, info.id, Exec(cmd="echo second"))).stdout == "second\n"
    assert (await service.get(ALICE, info.id)).replacements == 1
    await service.delete(ALICE, info.id)
    await eventually(lambda: asyncio.to_thread(lambda: not _containers(docker_client)), 30, "no container left")
