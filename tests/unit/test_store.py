"""The state store: ONE suite run against both implementations — the embedded store on a temp file and the Redis
store on a real redis-server — plus what only one of them has (the file's crash safety; Redis going away)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import secrets
import signal
import sys
import time
import typing
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from pydantic import BaseModel, TypeAdapter, ValidationError

from sandbox.errors import FailedPrecondition, InvalidArgument, Unavailable
from sandbox.store import (
    EmbeddedStore,
    EmbeddedStoreConfig,
    RedisStore,
    RedisStoreConfig,
    Store,
    StoreConfig,
    default_state_path,
    open_store,
)
from sandbox.store.redis import redact
from tests import redis_server as redis_fixtures
from tests.redis_server import RedisServer, free_port

redis_server = redis_fixtures.redis_server  # the session fixture, under its own name

LOGGER = logging.getLogger("sandbox.test.store")
ROOT = Path(__file__).resolve().parents[2]


async def drop_namespace(url: str, namespace: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{namespace}:*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest_asyncio.fixture(params=["embedded", "redis"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Store, Store]]:
    """Two handles on one state: two Redis connections (as two replicas have), or the one embedded store."""
    if request.param == "embedded":
        store = await EmbeddedStore.open(str(tmp_path / "state.json"), flush_interval=0.05, logger=LOGGER)
        yield store, store
        await store.close()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace = f"test-{secrets.token_hex(4)}"
    first = await RedisStore.open(server.url, namespace=namespace, logger=LOGGER)
    second = await RedisStore.open(server.url, namespace=namespace, logger=LOGGER)
    yield first, second
    await first.close()
    await second.close()
    await drop_namespace(server.url, namespace)


@pytest.fixture
def store(stores: tuple[Store, Store]) -> Store:
    return stores[0]


# --- the shared suite ---------------------------------------------------------------------------------------------


async def test_documents_crud(store: Store) -> None:
    assert await store.get("things", "a") is None
    assert await store.all("things") == {}
    doc = {"n": 1, "nested": {"list": [1, "two", None, True]}, "text": "é ☃"}
    await store.put("things", "a", doc)
    assert await store.get("things", "a") == doc
    await store.put("things", "a", {"n": 2})
    await store.put("things", "b", {"pair": (1, 2)}, durable=False)
    assert await store.all("things") == {"a": {"n": 2}, "b": {"pair": [1, 2]}}
    assert await store.all("other") == {}

    got = await store.get("things", "a")
    assert got is not None
    got["n"] = 99  # a copy: the store does not change with it
    assert await store.get("things", "a") == {"n": 2}

    assert await store.delete("things", "a") is True
    assert await store.delete("things", "a") is False
    assert await store.get("things", "a") is None
    assert list(await store.all("things")) == ["b"]


async def test_put_if_absent(store: Store) -> None:
    assert await store.put_if_absent("c", "k", {"v": 1}) is True
    assert await store.put_if_absent("c", "k", {"v": 2}) is False
    assert await store.get("c", "k") == {"v": 1}


async def test_put_if_absent_race(stores: tuple[Store, Store]) -> None:
    results = await asyncio.gather(*(stores[i % 2].put_if_absent("race", "key", {"writer": i}) for i in range(50)))
    assert results.count(True) == 1
    winner = results.index(True)
    assert await stores[1].get("race", "key") == {"writer": winner}


async def test_queue_fifo_and_remove(store: Store) -> None:
    assert await store.pop("pool") is None
    for item in ["a", "b", "c", "d"]:
        await store.push("pool", item)
    assert await store.items("pool") == ["a", "b", "c", "d"]
    assert await store.pop("pool") == "a"
    assert await store.remove("pool", "c") is True
    assert await store.remove("pool", "c") is False
    assert await store.remove("nothing-here", "c") is False
    assert await store.items("pool") == ["b", "d"]
    assert await store.pop("pool") == "b"
    assert await store.pop("pool") == "d"
    assert await store.pop("pool") is None
    assert await store.items("pool") == []


async def test_concurrent_pops_take_each_item_once(stores: tuple[Store, Store]) -> None:
    pushed = [f"warm-{i:03d}" for i in range(100)]
    for item in pushed:
        await stores[0].push("warm", item)
    popped = await asyncio.gather(*(stores[i % 2].pop("warm") for i in range(200)))
    taken = [item for item in popped if item is not None]
    assert popped.count(None) == 100
    assert len(taken) == len(set(taken)) == 100
    assert sorted(taken) == pushed
    assert await stores[1].items("warm") == []


async def test_locks(stores: tuple[Store, Store]) -> None:
    a, b = stores
    assert await a.try_lock("leader", "alice", 30) is True
    assert await b.try_lock("leader", "bob", 30) is False
    assert await a.try_lock("leader", "alice", 30) is True  # renewal
    assert await b.unlock("leader", "bob") is False
    assert await b.unlock("leader", "alice") is True
    assert await a.unlock("leader", "alice") is False
    assert await b.try_lock("leader", "bob", 30) is True
    assert await a.try_lock("other-lock", "alice", 30) is True  # locks are independent


async def test_lock_expires_unless_renewed(stores: tuple[Store, Store]) -> None:
    a, b = stores
    assert await a.try_lock("refill", "alice", 0.5)
    await asyncio.sleep(0.3)
    assert await a.try_lock("refill", "alice", 0.5)  # renewed: good for 0.5 s more
    await asyncio.sleep(0.3)
    assert await b.try_lock("refill", "bob", 0.5) is False  # 0.6 s after the first lock: held thanks to renewal
    await asyncio.sleep(0.35)
    assert await b.try_lock("refill", "bob", 30) is True  # alice's lease ran out
    assert await a.unlock("refill", "alice") is False
    assert await a.try_lock("refill", "alice", 30) is False


async def test_counters(stores: tuple[Store, Store]) -> None:
    a, b = stores
    assert await a.counter("created") == 0
    assert await a.incr("created") == 1
    assert await a.incr("created", 5) == 6
    assert await a.incr("created", -2) == 4
    await asyncio.gather(*(stores[i % 2].incr("created") for i in range(100)))
    assert await b.counter("created") == 104
    assert await b.counter("other") == 0


BAD_NAMES: list[Any] = ["", "x" * 201, "new\nline", "nul\x00", "tab\there", 7, None]


@pytest.mark.parametrize("bad", BAD_NAMES, ids=repr)
async def test_bad_names_are_refused(store: Store, bad: Any) -> None:
    calls = [
        store.get(bad, "k"),
        store.get("c", bad),
        store.put(bad, "k", {}),
        store.put_if_absent("c", bad, {}),
        store.delete(bad, "k"),
        store.all(bad),
        store.push(bad, "item"),
        store.push("q", bad),
        store.pop(bad),
        store.remove("q", bad),
        store.items(bad),
        store.try_lock(bad, "owner", 1),
        store.try_lock("lock", bad, 1),
        store.unlock("lock", bad),
        store.incr(bad),
        store.counter(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument):
            await call


async def test_bad_values_are_refused(store: Store) -> None:
    await store.put("x" * 200, "ok key with spaces", {})  # the longest name, and spaces, are fine
    for value in [[1, 2], "text", {"s": {1, 2}}, {"f": math.nan}, {"o": object()}]:
        with pytest.raises(InvalidArgument):
            await store.put("c", "k", value)  # type: ignore[arg-type]
    for ttl in [0, -1, math.nan, math.inf, True, "1"]:
        with pytest.raises(InvalidArgument):
            await store.try_lock("lock", "owner", ttl)  # type: ignore[arg-type]
    for by in [1.5, "1", True, 2**64]:
        with pytest.raises(InvalidArgument):
            await store.incr("n", by)  # type: ignore[arg-type]
    assert await store.get("c", "k") is None
    assert await store.counter("n") == 0


async def test_closed_store_refuses_calls(stores: tuple[Store, Store], tmp_path: Path) -> None:
    first = stores[0]
    if isinstance(first, RedisStore):
        other: Store = await RedisStore.open(first.url, namespace=first.namespace, logger=LOGGER)
    else:
        other = await EmbeddedStore.open(str(tmp_path / "other.json"), logger=LOGGER)
    await other.close()
    await other.close()  # idempotent
    with pytest.raises(FailedPrecondition, match="closed"):
        await other.get("c", "k")


# --- embedded: the file -------------------------------------------------------------------------------------------


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


async def test_embedded_locks_outlive_a_restart_until_they_expire(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    store = await EmbeddedStore.open(path, logger=LOGGER)
    assert await store.try_lock("leader", "alice", 30)
    assert await store.try_lock("short", "alice", 0.1)
    await store.close()
    await asyncio.sleep(0.15)
    store = await EmbeddedStore.open(path, logger=LOGGER)
    assert await store.try_lock("leader", "bob", 30) is False
    assert await store.try_lock("leader", "alice", 30) is True
    assert await store.try_lock("short", "bob", 30) is True
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
from sandbox.store import EmbeddedStore

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


# --- Redis: the server going away ---------------------------------------------------------------------------------


async def test_redis_unreachable_is_unavailable() -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(Unavailable, match=rf"Redis at redis://127\.0\.0\.1:{port}/0 does not answer"):
        await RedisStore.open(f"redis://127.0.0.1:{port}/0", logger=LOGGER)
    assert time.monotonic() - started < 3
    with pytest.raises(Unavailable):
        await open_store(RedisStoreConfig(url=f"redis://127.0.0.1:{port}/0"), logger=LOGGER)


async def test_redis_restart_fails_calls_then_recovers() -> None:
    with RedisServer() as server:
        store = await RedisStore.open(server.url, logger=LOGGER)
        await store.put("c", "k", {"v": 1})
        await asyncio.to_thread(server.stop)
        with pytest.raises(Unavailable, match=f"127.0.0.1:{server.port}"):
            await store.get("c", "k")
        with pytest.raises(Unavailable):
            await store.pop("q")
        await asyncio.to_thread(server.start)
        assert await store.get("c", "k") is None  # this test server keeps nothing across a restart
        await store.put("c", "k", {"v": 2})
        assert await store.get("c", "k") == {"v": 2}
        await store.close()


async def test_redis_key_layout(redis_server: RedisServer) -> None:
    namespace = f"test-{secrets.token_hex(4)}"
    store = await RedisStore.open(redis_server.url, namespace=namespace, logger=LOGGER)
    await store.put("sandboxes", "s1", {"a": 1})
    await store.push("pool", "w1")
    await store.try_lock("leader", "me", 30)
    await store.incr("created")
    raw = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        assert await raw.hget(f"{namespace}:doc:sandboxes", "s1") == '{"a":1}'
        assert await raw.lrange(f"{namespace}:queue:pool", 0, -1) == ["w1"]
        assert await raw.get(f"{namespace}:lock:leader") == "me"
        assert 29_000 < await raw.pttl(f"{namespace}:lock:leader") <= 30_000
        assert await raw.get(f"{namespace}:counter:created") == "1"
        await raw.hset(f"{namespace}:doc:sandboxes", "bad", "{not json")
        with pytest.raises(FailedPrecondition, match="corrupt document sandboxes/bad"):
            await store.get("sandboxes", "bad")
    finally:
        await raw.aclose()
        await store.close()
        await drop_namespace(redis_server.url, namespace)


def test_redis_password_never_shown() -> None:
    assert redact("redis://:s3cret@10.0.0.1:6379/0") == "redis://:***@10.0.0.1:6379/0"
    assert redact("redis://user:s3cret@host/1") == "redis://user:***@host/1"
    assert redact("redis://host:6379/0") == "redis://host:6379/0"


# --- config -------------------------------------------------------------------------------------------------------


def test_config_models_are_strict_and_documented() -> None:
    members = typing.get_args(typing.get_args(StoreConfig)[0])
    assert {m.__name__ for m in members} == {"EmbeddedStoreConfig", "RedisStoreConfig"}
    for member in members:
        assert issubclass(member, BaseModel)
        assert member.__doc__
        for name, info in member.model_fields.items():
            assert info.description, f"{member.__name__}.{name} has no description"
        kind = member.model_fields["type"].default
        assert isinstance(TypeAdapter(StoreConfig).validate_python({"type": kind}), member)
        with pytest.raises(ValidationError):
            member.model_validate({"type": kind, "no_such_field": 1})
    with pytest.raises(ValidationError):
        RedisStoreConfig(namespace="has:colon")


def test_default_state_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_state_path() == "/var/lib/sandbox/state.json"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_state_path() == str(tmp_path / "sandbox" / "state.json")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert EmbeddedStoreConfig().path == "/home/someone/.local/state/sandbox/state.json"


async def test_open_store_from_config(tmp_path: Path, redis_server: RedisServer) -> None:
    embedded = await open_store(EmbeddedStoreConfig(path=str(tmp_path / "s.json")), logger=LOGGER)
    assert isinstance(embedded, EmbeddedStore)
    await embedded.close()
    shared = await open_store(RedisStoreConfig(url=redis_server.url, namespace="cfg-test"), logger=LOGGER)
    assert isinstance(shared, RedisStore)
    assert await shared.counter("n") == 0
    await shared.close()


async def test_importing_the_store_does_not_import_redis() -> None:
    code = "import sys, sandbox.store; assert 'redis' not in sys.modules, 'redis imported'"
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=ROOT)
    assert await child.wait() == 0
