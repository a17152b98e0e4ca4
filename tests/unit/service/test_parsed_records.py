"""The lifecycle's records parsed once per stored version: changes seen at once, unchanged ones not parsed again."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from sandbox.models import SandboxSpec, SandboxState
from sandbox.service import parsed_records
from sandbox.service.parsed_records import ParsedRecords
from sandbox.service.records import SANDBOXES, SandboxRecord
from sandbox.store import EmbeddedStore

LOGGER = logging.getLogger("test")


def _doc(sandbox_id: str, **changes: Any) -> dict[str, Any]:
    now = time.time()
    record = SandboxRecord(
        id=sandbox_id,
        tenant="alpha",
        spec=SandboxSpec(kind="terminal"),
        state=SandboxState.RUNNING,
        instance=f"in-{sandbox_id}",
        created_at=now,
        last_active_at=now,
        expires_at=now + 600,
    )
    return record.model_copy(update=changes).model_dump(mode="json")


async def test_only_changed_records_are_parsed_again_and_every_change_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    validated: list[str] = []
    validate = SandboxRecord.model_validate

    class Counting:
        @staticmethod
        def model_validate(doc: dict[str, Any]) -> SandboxRecord:
            validated.append(doc["id"])
            return validate(doc)

    monkeypatch.setattr(parsed_records, "SandboxRecord", Counting)
    store = await EmbeddedStore.open(None, logger=LOGGER)
    try:
        for sandbox_id in ("sb-a", "sb-b", "sb-c"):
            await store.put(SANDBOXES, sandbox_id, _doc(sandbox_id))
        parsed = ParsedRecords()
        first = {r.id: r for r in parsed.parse(await store.all_versioned(SANDBOXES))}
        assert sorted(validated) == ["sb-a", "sb-b", "sb-c"]
        assert all(r.version > 0 for r in first.values())

        first["sb-a"].state = SandboxState.UNHEALTHY  # a caller's change stays in its copy
        await store.put(SANDBOXES, "sb-b", _doc("sb-b", state=SandboxState.EXPIRED))
        await store.delete(SANDBOXES, "sb-c")
        validated.clear()
        second = {r.id: r for r in parsed.parse(await store.all_versioned(SANDBOXES))}
        assert validated == ["sb-b"]
        assert set(second) == {"sb-a", "sb-b"}
        assert second["sb-a"].state is SandboxState.RUNNING
        assert second["sb-b"].state is SandboxState.EXPIRED

        await store.put(SANDBOXES, "sb-c", _doc("sb-c", tenant="beta"))  # gone and back: parsed afresh
        validated.clear()
        third = {r.id: r for r in parsed.parse(await store.all_versioned(SANDBOXES))}
        assert validated == ["sb-c"]
        assert third["sb-c"].tenant == "beta"
    finally:
        await store.close()
