"""``Resources.disk_mb`` against the real engine: refused, naming why, on an engine that cannot enforce it (this
one: overlay2 on ext4), before any container is made; and, only where the engine can (overlay2 on XFS with pquota),
a sandbox that writes past its limit gets ENOSPC. Skipped, saying why, where it does not apply."""

from __future__ import annotations

import os
import secrets

import pytest

from sandbox.backends.base import RuntimeState
from sandbox.backends.docker import disk
from sandbox.backends.docker.backend import DockerBackend
from sandbox.errors import FailedPrecondition
from sandbox.models import SandboxSpec
from tests.conftest import TEST_LABEL

pytestmark = pytest.mark.docker


async def _why_not(backend: DockerBackend) -> str | None:
    return disk.unenforceable(await backend._call_info())


def _spec(disk_mb: int) -> SandboxSpec:
    return SandboxSpec.model_validate({"kind": "terminal", "resources": {"disk_mb": disk_mb}, "labels": TEST_LABEL})


async def test_an_engine_that_cannot_enforce_the_limit_refuses_it(backend: DockerBackend) -> None:
    why = await _why_not(backend)
    if why is None:
        pytest.skip("this engine can enforce a disk limit (overlay2 on XFS): see the live test")
    sandbox_id = f"disk-{secrets.token_hex(4)}"
    before = {i.id for i in await backend.list_instances()}
    with pytest.raises(FailedPrecondition, match=r"resources\.disk_mb cannot be enforced on this Docker engine") as e:
        await backend.create(sandbox_id, _spec(1024))
    assert why in e.value.message
    assert {i.id for i in await backend.list_instances()} == before
    assert (await backend.inspect(sandbox_id)).state is RuntimeState.MISSING
    assert not os.path.exists(backend.socket_dir(sandbox_id))


async def test_a_sandbox_cannot_write_past_its_disk_limit(backend: DockerBackend) -> None:
    why = await _why_not(backend)
    if why is not None:
        pytest.skip(f"the engine cannot enforce a disk limit here: {why}")
    sandbox_id = f"disk-{secrets.token_hex(4)}"
    try:
        try:
            await backend.create(sandbox_id, _spec(128))
        except FailedPrecondition as e:  # XFS without pquota: only the engine's refusal tells
            pytest.skip(str(e))
        agent = backend.agent(sandbox_id)
        result = await agent.exec(["sh", "-c", "dd if=/dev/zero of=/workspace/fill bs=1M count=256 2>&1"], timeout=60)
        assert result.exit_code != 0 and "No space left" in result.stdout, result
        assert (await agent.exec(["echo", "alive"])).stdout.strip() == "alive"
    finally:
        await backend.destroy(sandbox_id)
