"""The embedded store's own behaviour: the file's durability and crash safety, one store per file, leases across
restarts (with a fake clock), and an idle store that writes nothing."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Any

import pytest

from sandbox.errors import FailedPrecondition, Unavailable
from sandbox.store import EmbeddedStore, embedded
from tests.unit.store.conftest import LOGGER, ROOT, FakeClock


def on_disk(path: Path) -> dict[str, Any]:
    return typing.cast(dict[str, Any], json.loads(path.read_bytes()))


async def test_embedded_durable_write_is_on_disk_before_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=3600, logger=LOGGER)
    await store.put("sandboxes", "s1", {"state": "running"})
    await store.push("pool", "w1")
    await store.incr("created")
    assert on_disk(path)["documents"] == {"sandboxes": {"s1": {"state": "running"}}}
    assert on_disk(path)["queues"] == {"pool": ["w1"]}
    assert on_disk(path)["counters"] == {"created": 1}

    await store.put("sandboxes", "s2", {"state": "idle"}, durable=False)
    assert "s2" not in on_disk(path)["documents"]["sandboxes"]  # batched, and the interval is an hour
    await store.close()
    assert "s2" in on_disk(path)["documents"]["sandboxes"]  # close flushes

    reopened = await EmbeddedStore.open(str(path), logger=LOGGER)
    assert await reopened.all("sandboxes") == {"s1": {"state": "running"}, "s2": {"state": "idle"}}
    assert await reopened.items("pool") == ["w1"]
    assert await reopened.counter("created") == 1
    await reopened.close()


async def test_embedded_durable_writes_at_once_share_one_file_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=3600, logger=LOGGER)
    writes: list[int] = []
    real = embedded.write_file

    def counted(target: str, snapshot: Any) -> None:
        writes.append(len(snapshot.documents.get("sandboxes", {})))
        real(target, snapshot)

    monkeypatch.setattr(embedded, "write_file", counted)
    await asyncio.gather(*(store.put("sandboxes", f"s{i}", {"n": i}) for i in range(64)))
    assert writes == [64], f"64 changes made at once took these writes: {writes}"
    assert len(on_disk(path)["documents"]["sandboxes"]) == 64
    await store.close()


async def test_embedded_a_failed_write_fails_the_changes_it_carried_not_later_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=3600, logger=LOGGER)
    real = embedded.write_file
    began, go_on = threading.Event(), threading.Event()

    def fails_once(target: str, snapshot: Any) -> None:
        if not began.is_set():
            began.set()
            go_on.wait(10)
            raise OSError("disk full (forced by the test)")
        real(target, snapshot)

    monkeypatch.setattr(embedded, "write_file", fails_once)
    first = asyncio.create_task(store.put("sandboxes", "carried", {"n": 1}))
    await asyncio.to_thread(began.wait, 10)  # that write has begun: a change made now waits for the next one
    later = asyncio.create_task(store.put("sandboxes", "later", {"n": 2}))
    await asyncio.sleep(0)
    go_on.set()
    with pytest.raises(Unavailable, match="disk full"):
        await first
    await later
    assert set(on_disk(path)["documents"]["sandboxes"]) == {"carried", "later"}  # the next write carried both
    await store.close()


async def test_embedded_non_durable_write_is_flushed_within_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=0.1, logger=LOGGER)
    await store.put("c", "k", {"v": 1}, durable=False)
    assert await store.try_lock("leader", "me", 30)
    started = time.monotonic()
    while not (path.exists() and on_disk(path)["documents"].get("c")):
        assert time.monotonic() - started < 1.0, "the non-durable write did not reach the file"
        await asyncio.sleep(0.01)
    assert time.monotonic() - started < 0.1 + 0.4
    assert on_disk(path)["locks"]["leader"]["owner"] == "me"
    await store.close()


async def test_embedded_cancelled_durable_writes_still_reach_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    store = await EmbeddedStore.open(path, flush_interval=3600, logger=LOGGER)
    writes = [asyncio.create_task(store.put("c", f"k{i}", {"i": i})) for i in range(20)]
    await asyncio.sleep(0)
    for write in writes[::2]:
        write.cancel()  # a caller that gives up must not cut the shared file write short
    await asyncio.gather(*writes, return_exceptions=True)
    await store.close()
    reopened = await EmbeddedStore.open(path, logger=LOGGER)
    assert await reopened.all("c") == {f"k{i}": {"i": i} for i in range(20)}
    await reopened.close()


async def test_embedded_durable_writes_do_not_queue_behind_the_default_executor(tmp_path: Path) -> None:
    """The file is written in a thread of the store's own: blocking calls holding every thread of the loop's
    default executor (slow engine calls) do not hold up a durable write, nor every caller waiting on it."""
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=3600, logger=LOGGER)
    release = threading.Event()
    loop = asyncio.get_running_loop()
    held = [loop.run_in_executor(None, release.wait) for _ in range(64)]  # more than the executor's threads
    try:
        await asyncio.wait_for(store.put("c", "k", {"v": 1}), 30)
        assert on_disk(path)["documents"] == {"c": {"k": {"v": 1}}}
    finally:
        release.set()
        await asyncio.gather(*held)
        await store.close()


async def test_embedded_pop_not_durable_rides_on_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=3600, logger=LOGGER)
    await store.push("pool", "w1")
    await store.push("pool", "w2")
    assert await store.pop("pool", durable=False) == "w1"
    assert on_disk(path)["queues"] == {"pool": ["w1", "w2"]}, "written on its own"
    await store.put("sandboxes", "s1", {"instance": "w1"})  # durable: carries every change made before it
    assert on_disk(path)["queues"] == {"pool": ["w2"]}
    await store.close()


async def test_embedded_locks_outlive_a_restart_until_they_expire(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    clock = FakeClock(1000.0)
    store = await EmbeddedStore.open(str(path), logger=LOGGER, clock=clock)
    assert await store.try_lock("leader", "alice", 30)
    assert await store.try_lock("down-too-long", "alice", 30)
    assert await store.try_lock("lapsed", "alice", 5)
    clock.advance(6)  # "lapsed" ran out before the restart: it is not written
    await store.close()
    assert sorted(on_disk(path)["locks"]) == ["down-too-long", "leader"]
    # The process stayed down past this lease: its wall-clock expiry is in the past when the store comes back.
    state = on_disk(path)
    state["locks"]["down-too-long"]["expires_at"] = time.time() - 1
    path.write_text(json.dumps(state))

    clock = FakeClock(0.0)  # a new process: the monotonic clock starts somewhere else; wall time carries over
    store = await EmbeddedStore.open(str(path), logger=LOGGER, clock=clock)
    assert await store.try_lock("leader", "bob", 30) is False
    assert await store.try_lock("down-too-long", "bob", 30) is True
    assert await store.try_lock("lapsed", "bob", 30) is True
    clock.advance(23)  # 29 s after alice took "leader": still hers
    assert await store.try_lock("leader", "bob", 30) is False
    clock.advance(2)
    assert await store.try_lock("leader", "bob", 30) is True
    await store.close()


async def test_embedded_lock_expiry_follows_the_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    store = await EmbeddedStore.open(str(tmp_path / "state.json"), logger=LOGGER, clock=clock)
    assert await store.try_lock("l", "alice", 10)
    clock.advance(9.9)
    assert await store.try_lock("l", "bob", 10) is False
    assert await store.unlock("l", "bob") is False
    clock.advance(0.2)
    assert await store.unlock("l", "alice") is False  # lapsed: nothing to release
    assert await store.try_lock("l", "bob", 10) is True
    await store.close()


async def test_embedded_renewed_but_unwritten_lease_lapses_at_its_written_expiry_after_restart(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "state.json")
    clock = FakeClock()
    store = await EmbeddedStore.open(path, flush_interval=3600, logger=LOGGER, clock=clock)
    assert await store.try_lock("leader", "alice", 10)
    await store.flush()  # on disk: expires 10 s from now
    clock.advance(5)
    assert await store.try_lock("leader", "alice", 100)  # renewed in memory only
    clock.advance(6)
    assert await store.try_lock("leader", "bob", 10) is False  # the renewal holds in this process
    await store.close()  # nothing changed since the flush: nothing written

    clock = FakeClock()
    store = await EmbeddedStore.open(path, logger=LOGGER, clock=clock)
    assert await store.try_lock("leader", "bob", 10) is False
    clock.advance(10.5)  # past the written expiry (10 s after it was written), long before the renewed one
    assert await store.try_lock("leader", "bob", 10) is True
    await store.close()


def file_id(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


async def wait_for_rewrite(path: Path, before: tuple[int, int]) -> None:
    deadline = time.monotonic() + 5
    while file_id(path) == before:
        assert time.monotonic() < deadline, "the change did not reach the file"
        await asyncio.sleep(0.01)


async def test_embedded_idle_store_with_a_renewed_lock_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=0.05, logger=LOGGER)
    assert await store.try_lock("leader", "me", 30)
    await store.flush()
    before = file_id(path)
    for _ in range(20):  # 0.4 s: eight flush intervals
        assert await store.try_lock("leader", "me", 30)
        await asyncio.sleep(0.02)
    assert file_id(path) == before, "renewing a held lock rewrote the state file"

    await store.put("c", "k", {"v": 1})  # a real change is written (durable: before put returns)
    assert file_id(path) != before
    assert on_disk(path)["documents"] == {"c": {"k": {"v": 1}}}
    after_put = file_id(path)
    for _ in range(10):
        assert await store.try_lock("leader", "me", 30)
        await asyncio.sleep(0.02)
    assert file_id(path) == after_put
    await store.close()
    assert file_id(path) == after_put  # nothing left to flush on close


async def test_embedded_lock_changes_are_still_written(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    clock = FakeClock()
    store = await EmbeddedStore.open(str(path), flush_interval=0.05, logger=LOGGER, clock=clock)
    assert await store.try_lock("leader", "alice", 10)
    await store.flush()
    before = file_id(path)
    assert await store.unlock("leader", "alice")
    await wait_for_rewrite(path, before)
    assert on_disk(path)["locks"] == {}

    before = file_id(path)
    assert await store.try_lock("leader", "alice", 10)
    await wait_for_rewrite(path, before)
    assert on_disk(path)["locks"]["leader"]["owner"] == "alice"
    clock.advance(11)
    before = file_id(path)
    assert await store.try_lock("leader", "bob", 10)  # changes hands after alice's lease ran out
    await wait_for_rewrite(path, before)
    assert on_disk(path)["locks"]["leader"]["owner"] == "bob"
    await store.close()


async def test_embedded_one_store_per_file(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    first = await EmbeddedStore.open(path, logger=LOGGER)
    with pytest.raises(FailedPrecondition, match=r"in use .*state\.json\.lock"):
        await EmbeddedStore.open(path, logger=LOGGER)
    await first.close()
    second = await EmbeddedStore.open(path, logger=LOGGER)
    await second.close()


async def test_embedded_memory_only(tmp_path: Path) -> None:
    store = await EmbeddedStore.open(None, logger=LOGGER)
    await store.put("c", "k", {"v": 1})
    assert await store.incr("n") == 1
    await store.close()
    assert store.path is None


CHILD = """
import asyncio, logging, os, signal, sys
from sandbox.store import EmbeddedStore, embedded

async def main(path, mode):
    store = await EmbeddedStore.open(path, flush_interval=3600, logger=logging.getLogger("child"))
    if mode == "self-kill":
        await store.put("docs", "durable", {"ok": True})
        await store.put("docs", "batched", {"ok": True}, durable=False)
        os.kill(os.getpid(), signal.SIGKILL)
    i = 0
    while True:
        i += 1
        await store.put("docs", f"k{i}", {"i": i})
        await store.push("queue", f"item{i}")
        print(await store.incr("n"), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def run_child(path: Path, mode: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(path), mode, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )


async def test_embedded_durable_writes_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    child = await run_child(path, "self-kill")
    assert await asyncio.wait_for(child.wait(), 30) == -signal.SIGKILL
    store = await EmbeddedStore.open(str(path), logger=LOGGER)  # the dead child's lock is gone with it
    assert await store.get("docs", "durable") == {"ok": True}
    assert await store.get("docs", "batched") is None  # not durable: lost, as documented
    await store.close()


async def test_embedded_kill_9_at_any_moment_loses_no_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    child = await run_child(path, "loop")
    assert child.stdout is not None
    acked = 0
    while acked < 40:
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        assert line, "the child died"
        acked = int(line)
    child.kill()  # SIGKILL, by the child's PID, in the middle of its writes
    await child.wait()
    store = await EmbeddedStore.open(str(path), logger=LOGGER)
    n = await store.counter("n")
    assert n >= acked
    docs = await store.all("docs")
    assert all(docs[f"k{i}"] == {"i": i} for i in range(1, n + 1))
    assert (await store.items("queue"))[:n] == [f"item{i}" for i in range(1, n + 1)]
    await store.close()


@pytest.mark.parametrize(
    "content", [b'{"version": 1, "documents": {', b"", b"[]", b'{"version": 1, "documents": {"c": {"k": 5}}}']
)
async def test_embedded_corrupt_file_is_refused_then_moved_aside_on_request(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with pytest.raises(FailedPrecondition, match=rf"state file {path} is corrupt.*reset_corrupt=True"):
        await EmbeddedStore.open(str(path), logger=LOGGER)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.lock"]

    store = await EmbeddedStore.open(str(path), reset_corrupt=True, logger=LOGGER)
    assert await store.all("c") == {}
    (aside,) = tmp_path.glob("state.json.corrupt-*")
    assert aside.read_bytes() == content
    await store.put("c", "k", {"v": 1})
    await store.close()
    assert on_disk(path)["documents"] == {"c": {"k": {"v": 1}}}
