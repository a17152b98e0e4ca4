"""The Docker backend's lifecycle: labels, listing, logs, destroy, and failures that leave nothing."""

from __future__ import annotations

import asyncio
import os
import secrets

import pytest

from sandbox.backends.base import LABEL_INSTANCE, RuntimeState
from sandbox.backends.docker.backend import DockerBackend
from sandbox.errors import FailedPrecondition, NotFound
from sandbox.models import SandboxSpec
from tests.conftest import TEST_LABEL

pytestmark = pytest.mark.docker


async def test_create_list_logs_destroy_leaves_nothing(backend: DockerBackend) -> None:
    sandbox_id = f"life-{secrets.token_hex(4)}"
    spec = SandboxSpec.model_validate({"kind": "terminal", "labels": {**TEST_LABEL, "task": "t1"}})
    created = await backend.create(sandbox_id, spec)
    try:
        assert created.state is RuntimeState.RUNNING and created.id == sandbox_id
        listed = {s.id: s for s in await backend.list_instances()}
        assert sandbox_id in listed and listed[sandbox_id].labels["sandbox.user.task"] == "t1"
        assert "agent" in await backend.logs(sandbox_id)
        assert os.path.exists(os.path.join(backend.socket_dir(sandbox_id), "agent.sock"))
    finally:
        await backend.destroy(sandbox_id)
    assert (await backend.inspect(sandbox_id)).state is RuntimeState.MISSING
    assert sandbox_id not in {s.id for s in await backend.list_instances()}
    assert not os.path.exists(backend.socket_dir(sandbox_id))
    await backend.destroy(sandbox_id)  # idempotent


async def test_missing_image_fails_clearly_and_leaves_nothing(backend: DockerBackend) -> None:
    sandbox_id = f"noimg-{secrets.token_hex(4)}"
    spec = SandboxSpec.model_validate({"kind": "terminal", "image": "sandbox/does-not-exist:latest"})
    with pytest.raises(NotFound, match="sandbox images build"):
        await backend.create(sandbox_id, spec)
    assert (await backend.inspect(sandbox_id)).state is RuntimeState.MISSING
    assert not os.path.exists(backend.socket_dir(sandbox_id))


async def test_android_is_refused_with_the_reason(backend: DockerBackend) -> None:
    with pytest.raises(FailedPrecondition, match="Android emulator"):
        await backend.create("andr-1", SandboxSpec.model_validate({"kind": "android"}))


async def test_parallel_creates_do_not_block_each_other(backend: DockerBackend) -> None:
    ids = [f"par-{secrets.token_hex(3)}" for _ in range(4)]
    spec = SandboxSpec.model_validate({"kind": "terminal", "labels": TEST_LABEL})
    try:
        created = await asyncio.gather(*(backend.create(i, spec) for i in ids))
        assert {c.id for c in created} == set(ids)
        answers = await asyncio.gather(*(backend.agent(i).exec(["echo", i]) for i in ids))
        assert [a.stdout.strip() for a in answers] == ids
    finally:
        await asyncio.gather(*(backend.destroy(i) for i in ids))
    assert not ({s.labels.get(LABEL_INSTANCE) for s in await backend.list_instances()} & set(ids))
