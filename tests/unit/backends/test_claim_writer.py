"""The Docker backend's claim files, written in batches: nothing lost, the last change wins, failures reach callers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sandbox.backends.docker import claim_writer
from sandbox.backends.docker.claim_writer import ClaimWriter
from sandbox.backends.docker.claims import read_claims


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every batch the writer took to a worker thread, in order."""
    seen: list[dict[str, Any]] = []
    apply = claim_writer._apply

    def recording(root: str, batch: dict[str, Any]) -> None:
        seen.append(dict(batch))
        apply(root, batch)

    monkeypatch.setattr(claim_writer, "_apply", recording)
    return seen


async def test_a_burst_of_claims_lands_whole_in_few_thread_hops(tmp_path: Path, batches: list[dict[str, Any]]) -> None:
    writer = ClaimWriter(str(tmp_path))
    await asyncio.gather(*(writer.write(f"in-{i}", {"sandbox": f"sb-{i}"}) for i in range(64)))
    assert read_claims(str(tmp_path)) == {f"in-{i}": {"sandbox": f"sb-{i}"} for i in range(64)}
    assert sum(len(b) for b in batches) == 64
    assert len(batches) <= 2  # the first change goes alone; the 63 made meanwhile share the next hop


async def test_the_last_change_of_an_instance_is_the_one_on_disk(tmp_path: Path) -> None:
    writer = ClaimWriter(str(tmp_path))
    await writer.write("in-a", {"sandbox": "old"})
    await asyncio.gather(
        writer.write("in-a", {"sandbox": "new"}), writer.remove("in-a"), writer.write("in-b", {"sandbox": "b"})
    )
    assert read_claims(str(tmp_path)) == {"in-b": {"sandbox": "b"}}
    await asyncio.gather(writer.remove("in-b"), writer.write("in-b", {"sandbox": "again"}))
    assert read_claims(str(tmp_path)) == {"in-b": {"sandbox": "again"}}


async def test_a_failed_batch_fails_each_of_its_callers_and_the_next_batch_still_runs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.write_text("a file where the claims' folder should be")
    writer = ClaimWriter(str(root))
    results = await asyncio.gather(
        writer.write("in-a", {"sandbox": "a"}), writer.write("in-b", {"sandbox": "b"}), return_exceptions=True
    )
    assert all(isinstance(r, OSError) for r in results), results
    root.unlink()
    root.mkdir()
    await writer.write("in-c", {"sandbox": "c"})
    assert read_claims(str(root)) == {"in-c": {"sandbox": "c"}}


async def test_a_cancelled_caller_leaves_its_batch_to_finish(tmp_path: Path) -> None:
    writer = ClaimWriter(str(tmp_path))
    first = asyncio.create_task(writer.write("in-a", {"sandbox": "a"}))
    second = asyncio.create_task(writer.write("in-b", {"sandbox": "b"}))
    await asyncio.sleep(0)
    first.cancel()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    await writer.write("in-c", {"sandbox": "c"})  # runs after the batch holding in-a
    assert set(read_claims(str(tmp_path))) == {"in-a", "in-b", "in-c"}
