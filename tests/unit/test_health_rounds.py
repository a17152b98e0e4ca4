"""The health round over the fake backend: races between a round and the calls around it."""

from __future__ import annotations

import pytest

from sandbox.backends.base import BackendSandbox
from sandbox.models import SandboxSpec, SandboxState
from sandbox.service import SandboxService
from sandbox.service.auth import Principal
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from tests.unit.conftest import LOGGER

ALICE = Principal("alpha")


async def test_a_sandbox_created_during_a_round_is_not_taken_for_dead(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[str] = []
    listing = service.backend.list_sandboxes

    async def create_while_listing() -> list[BackendSandbox]:
        snapshot = await listing()  # the engine's view, taken before the create below finishes
        created.append((await service.create(ALICE, SandboxSpec(kind="terminal", labels={"t": "race"}))).id)
        return snapshot

    monkeypatch.setattr(service.backend, "list_sandboxes", create_while_listing)
    await Lifecycle(service, LifecycleSettings(), logger=LOGGER).check_health()
    monkeypatch.undo()
    try:
        info = await service.get(ALICE, created[0])
        assert info.state is SandboxState.RUNNING, f"a new sandbox was marked {info.state}: {info.error}"
    finally:
        await service.delete(ALICE, created[0])
