"""Records parsed once: the lifecycle's per stored version, a read's per stored text; changes seen at once, unchanged
ones not parsed again."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from sandbox.models import SandboxSpec, SandboxState
from sandbox.service import parsed_records
from sandbox.service.parsed_records import ParsedRecords, ParsedTexts
from sandbox.service.records import SANDBOXES, EpisodeRecord, SandboxRecord
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


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    validated: list[str] = []
    validate = SandboxRecord.model_validate

    class Counting:
        @staticmethod
        def model_validate(doc: dict[str, Any]) -> SandboxRecord:
            validated.append(doc["id"])
            return validate(doc)

    monkeypatch.setattr(parsed_records, "SandboxRecord", Counting)
    return validated


async def test_only_changed_records_are_decoded_and_parsed_again_and_every_change_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validated = _counting(monkeypatch)
    decoded: list[str] = []
    decode = embedded.decode_document

    def counting_decode(text: str | bytes, where: str) -> dict[str, Any]:
        decoded.append(where)
        return decode(text, where)

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


async def test_a_record_read_is_parsed_again_only_when_its_text_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    validated = _counting(monkeypatch)
    store = await EmbeddedStore.open(None, logger=LOGGER)
    try:
        parsed = ParsedTexts()
        episode = EpisodeRecord(task_id="t", digest="d", task_hash="h", trajectory_id="tr", started_at=1.0)
        v1 = await store.put(SANDBOXES, "sb-a", _doc("sb-a", episode=episode))
        first = parsed.parse("sb-a", await store.get_stored(SANDBOXES, "sb-a"))
        assert first is not None and first.version == v1 and validated == ["sb-a"]

        first.state = SandboxState.UNHEALTHY  # a caller's changes stay in its copy, the episode's too
        assert first.episode is not None
        first.episode.steps = 7
        second = parsed.parse("sb-a", await store.get_stored(SANDBOXES, "sb-a"))
        assert validated == ["sb-a"]  # not parsed again
        assert second is not None and second is not first and second.version == v1
        assert second.state is SandboxState.RUNNING and second.episode is not None and second.episode.steps == 0

        v2 = await store.put(SANDBOXES, "sb-a", second.model_dump(mode="json"))  # the same text, a new version
        third = parsed.parse("sb-a", await store.get_stored(SANDBOXES, "sb-a"))
        assert validated == ["sb-a"] and third is not None and third.version == v2

        await store.put(SANDBOXES, "sb-a", _doc("sb-a", state=SandboxState.EXPIRED))
        fourth = parsed.parse("sb-a", await store.get_stored(SANDBOXES, "sb-a"))
        assert validated == ["sb-a", "sb-a"] and fourth is not None and fourth.state is SandboxState.EXPIRED

        await store.delete(SANDBOXES, "sb-a")
        assert parsed.parse("sb-a", await store.get_stored(SANDBOXES, "sb-a")) is None
    finally:
        await store.close()


async def test_a_wiped_store_that_hands_out_the_same_version_again_is_read_right() -> None:
    """Versions start again in a wiped store: the text, not the version, says whether the record changed."""
    parsed = ParsedTexts()
    before = await EmbeddedStore.open(None, logger=LOGGER)
    after = await EmbeddedStore.open(None, logger=LOGGER)
    try:
        v_before = await before.put(SANDBOXES, "sb-a", _doc("sb-a", tenant="alpha"))
        v_after = await after.put(SANDBOXES, "sb-a", _doc("sb-a", tenant="beta"))
        assert v_before == v_after
        first = parsed.parse("sb-a", await before.get_stored(SANDBOXES, "sb-a"))
        second = parsed.parse("sb-a", await after.get_stored(SANDBOXES, "sb-a"))
        assert first is not None and first.tenant == "alpha"
        assert second is not None and second.tenant == "beta"
    finally:
        await before.close()
        await after.close()


async def test_parsed_texts_keep_at_most_their_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    validated = _counting(monkeypatch)
    store = await EmbeddedStore.open(None, logger=LOGGER)
    try:
        parsed = ParsedTexts(keep=2)
        for sandbox_id in ("sb-a", "sb-b", "sb-c"):
            await store.put(SANDBOXES, sandbox_id, _doc(sandbox_id))
            parsed.parse(sandbox_id, await store.get_stored(SANDBOXES, sandbox_id))
        for sandbox_id in ("sb-c", "sb-b", "sb-a"):  # sb-a, the first kept, was dropped for sb-c
            assert parsed.parse(sandbox_id, await store.get_stored(SANDBOXES, sandbox_id)) is not None
        assert validated == ["sb-a", "sb-b", "sb-c", "sb-a"]
    finally:
        await store.close()
