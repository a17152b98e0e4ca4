"""The engine gate in front of the real engine: with one create slot, instances started at once all come up, their
creates one at a time."""

from __future__ import annotations

import asyncio
import secrets

import docker
import pytest

from sandbox.backends.base import RuntimeState
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.models import SandboxSpec
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image

pytestmark = pytest.mark.docker

GATE_OWNER = f"{OWNER}-gate"
GATE_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-gate"


async def test_three_instances_started_at_once_through_one_create_slot(docker_client: docker.DockerClient) -> None:
    require_image(docker_client, "terminal")
    with owned_by(docker_client, GATE_OWNER, GATE_SOCKET_ROOT):
        config = DockerConfig.model_validate(
            {"owner": GATE_OWNER, "socket_root": GATE_SOCKET_ROOT, "engine_calls": {"max": {"create": 1}}}
        )
        backend = DockerBackend(config)
        gate = backend.engine_gate
        spec = SandboxSpec.model_validate({"kind": "terminal", "labels": TEST_LABEL})  # network none
        ids = [f"gate-{secrets.token_hex(4)}" for _ in range(3)]
        most_queued = 0
        done = asyncio.Event()

        async def watch() -> None:
            nonlocal most_queued
            while not done.is_set():
                most_queued = max(most_queued, gate.stats().queued["create"])
                await asyncio.sleep(0.002)

        watcher = asyncio.create_task(watch())
        try:
            made = await asyncio.gather(*(backend.create(i, spec) for i in ids))
            done.set()
            await watcher
            assert [m.state for m in made] == [RuntimeState.RUNNING] * 3
            stats = gate.stats()
            assert stats.peak_in_flight["create"] == 1, stats
            assert most_queued >= 1, "the creates never met at the gate"
            assert stats.in_flight == dict.fromkeys(stats.in_flight, 0) and not any(stats.queued.values())
            assert backend.pressure() is None
            labels = docker_client.containers.get(backend.container_name(ids[0])).labels
            assert labels["sandbox.owner"] == GATE_OWNER and labels["sandbox.user.sandbox.test-run"] == RUN_ID
        finally:
            done.set()
            await watcher
            await asyncio.gather(*(backend.destroy(i) for i in ids))
            await backend.close()
        assert gate.stats().peak_in_flight["remove"] >= 1
        assert not docker_client.containers.list(all=True, filters={"label": f"sandbox.owner={GATE_OWNER}"})
