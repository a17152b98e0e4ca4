"""The state store's shared suite: every test runs against the embedded store (temp file, fake clock) and the
Redis store (two clients of a real redis-server, as two replicas have)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from sandbox.errors import FailedPrecondition, InvalidArgument
from sandbox.store import EmbeddedStore, RedisStore, Store
from tests.unit.store.conftest import LOGGER, Advance


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


async def test_lock_expires_unless_renewed(stores: tuple[Store, Store], advance: Advance) -> None:
    a, b = stores
    assert await a.try_lock("refill", "alice", 10)
    await advance(6)
    assert await a.try_lock("refill", "alice", 10)  # renewed: good for 10 s more
    await advance(6)
    assert await b.try_lock("refill", "bob", 10) is False  # 12 s after the first lock: held thanks to renewal
    await advance(5)
    assert await b.try_lock("refill", "bob", 30) is True  # alice's lease ran out
    assert await a.unlock("refill", "alice") is False
    assert await a.try_lock("refill", "alice", 30) is False


async def test_holder_names_who_holds_a_lock_until_it_lapses(stores: tuple[Store, Store], advance: Advance) -> None:
    a, b = stores
    assert await b.holder("replica:x") is None
    assert await a.try_lock("replica:x", "x", 10)
    assert await b.holder("replica:x") == "x"
    await advance(11)
    assert await b.holder("replica:x") is None, "a lapsed lease has no holder"
    assert await a.try_lock("replica:x", "x", 10)
    assert await a.unlock("replica:x", "x")
    assert await b.holder("replica:x") is None


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
