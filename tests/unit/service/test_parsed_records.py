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
from sandbox.store import EmbeddedStore, embedded

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


async def test_only_changed_records_are_decoded_and_parsed_again_and_every_change_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validated: list[str] = []
    validate = SandboxRecord.model_validate

    class Counting:
        @staticmethod
        def model_validate(doc: dict[str, Any]) -> SandboxRecord:
            validated.append(doc["id"])
            return validate(doc)

    decoded: list[str] = []
    decode = embedded.decode_document

    def counting_decode(text: str | bytes, where: str) -> dict[str, Any]:
        decoded.append(where)
        return decode(text, where)

    monkeypatch.setattr(parsed_records, "SandboxRecord", Counting)
    monkeypatch.setattr(embedded, "decode_document", counting_decode)
    store = await EmbeddedStore.open(None, logger=LOGGER)
    try:
        for sandbox_id in ("sb-a", "sb-b", "sb-c"):
            await store.put(SANDBOXES, sandbox_id, _doc(sandbox_id))
        parsed = ParsedRecords()
        first = {r.id: r for r in await parsed.read(store)}
        assert sorted(validated) == ["sb-a", "sb-b", "sb-c"] and len(decoded) == 3
        assert all(r.version > 0 for r in first.values())

        await store.put(SANDBOXES, "sb-b", _doc("sb-b", state=SandboxState.EXPIRED))
        await store.delete(SANDBOXES, "sb-c")
        validated.clear()
        decoded.clear()
        second = {r.id: r for r in await parsed.read(store)}
        assert validated == ["sb-b"] and decoded == [f"{SANDBOXES}/sb-b"]
        assert set(second) == {"sb-a", "sb-b"}
        assert second["sb-a"] is first["sb-a"] and second["sb-a"].state is SandboxState.RUNNING
        assert second["sb-b"].state is SandboxState.EXPIRED

        await store.put(SANDBOXES, "sb-c", _doc("sb-c", tenant="beta"))  # gone and back: parsed afresh
        validated.clear()
        third = {r.id: r for r in await parsed.read(store)}
        assert validated == ["sb-c"]
        assert third["sb-c"].tenant == "beta"
    finally:
        await store.close()


def test_a_bare_version_of_a_record_never_parsed_is_refused() -> None:
    with pytest.raises(KeyError, match="sb-x"):
        ParsedRecords().parse({"sb-x": 7})
