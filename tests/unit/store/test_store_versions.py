"""Versioned documents and compare-and-set: the shared suite (embedded and Redis), then what each store keeps of
versions (the embedded file, old state files; Redis's keys and documents an older build wrote)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from sandbox.errors import FailedPrecondition, InvalidArgument
from sandbox.store import EmbeddedStore, RedisStore, Store, Versioned
from tests.redis_server import RedisServer
from tests.unit.store.conftest import LOGGER, drop_namespace

# --- the shared suite ---------------------------------------------------------------------------------------------


async def test_every_write_gets_a_greater_version(store: Store) -> None:
    assert await store.get_versioned("c", "k") is None
    v1 = await store.put("c", "k", {"n": 1})
    assert v1 >= 1
    assert await store.get_versioned("c", "k") == Versioned({"n": 1}, v1)
    v2 = await store.put("c", "k", {"n": 2}, durable=False)
    assert v2 > v1
    assert await store.put_if_absent("c", "other", {"n": 0}) is True
    got = await store.get_versioned("c", "other")
    assert got is not None and got.version > v2
    v3 = await store.put("elsewhere", "k", {"n": 3})  # one counter for the whole store
    assert v3 > got.version
    v4 = await store.put_if_version("c", "k", {"n": 4}, version=v2)
    assert v4 is not None and v4 > v3
    assert await store.get_versioned("c", "k") == Versioned({"n": 4}, v4)


async def test_put_if_version_writes_only_on_the_current_version(stores: tuple[Store, Store]) -> None:
    a, b = stores
    v1 = await a.put("c", "k", {"n": 1})
    v2 = await b.put_if_version("c", "k", {"n": 2}, version=v1)
    assert v2 is not None and v2 > v1
    assert await a.put_if_version("c", "k", {"n": 3}, version=v1) is None  # stale: nothing written
    assert await a.put_if_version("c", "k", {"n": 3}, version=v2 + 1000) is None
    assert await b.get_versioned("c", "k") == Versioned({"n": 2}, v2)
    v3 = await a.put_if_version("c", "k", {"n": 3}, version=v2, durable=False)
    assert v3 is not None and v3 > v2
    assert await b.get("c", "k") == {"n": 3}


async def test_version_zero_means_only_if_absent(stores: tuple[Store, Store]) -> None:
    a, b = stores
    v1 = await a.put_if_version("c", "k", {"n": 1}, version=0)
    assert v1 is not None and v1 >= 1
    assert await b.put_if_version("c", "k", {"n": 2}, version=0) is None
    assert await b.get_versioned("c", "k") == Versioned({"n": 1}, v1)
    assert await b.put_if_absent("c", "k", {"n": 2}) is False


async def test_delete_if_version(stores: tuple[Store, Store]) -> None:
    a, b = stores
    v1 = await a.put("c", "k", {"n": 1})
    v2 = await a.put("c", "k", {"n": 2})
    assert await b.delete_if_version("c", "k", version=v1) is False  # stale: still there
    assert await a.get_versioned("c", "k") == Versioned({"n": 2}, v2)
    assert await b.delete_if_version("c", "k", version=v2) is True
    assert await a.get_versioned("c", "k") is None
    assert await a.get("c", "k") is None
    assert await b.delete_if_version("c", "k", version=v2) is False  # gone
    assert await b.delete_if_version("c", "never", version=1) is False
    assert await a.all_versioned("c") == {}


async def test_no_aba_after_delete_and_recreate(stores: tuple[Store, Store]) -> None:
    a, b = stores
    v1 = await a.put("c", "k", {"same": True})
    assert await a.delete("c", "k") is True
    v2 = await b.put("c", "k", {"same": True})
    assert v2 > v1  # the same document again, but not the same version
    assert await a.put_if_version("c", "k", {"changed": True}, version=v1) is None
    assert await a.delete_if_version("c", "k", version=v1) is False
    assert await a.delete_if_version("c", "k", version=v2) is True
    assert await b.put_if_absent("c", "k", {"same": True}) is True
    v3 = (await a.get_versioned("c", "k") or Versioned({}, 0)).version
    assert v3 > v2
    assert await a.put_if_version("c", "k", {}, version=v2) is None


async def test_all_versioned_matches_get_versioned(stores: tuple[Store, Store]) -> None:
    a, b = stores
    for i in range(5):
        await a.put("things", f"k{i}", {"i": i, "pair": (i, i)})
    await b.put("things", "k2", {"i": 22})
    await b.delete("things", "k4")
    await a.put("other", "k0", {"elsewhere": True})
    everything = await b.all_versioned("things")
    assert sorted(everything) == ["k0", "k1", "k2", "k3"]
    for key, versioned in everything.items():
        assert await a.get_versioned("things", key) == versioned
    assert {k: v.doc for k, v in everything.items()} == await a.all("things")
    assert len({v.version for v in everything.values()}) == 4
    assert await a.all_versioned("nothing") == {}


async def test_all_versioned_since_hands_back_only_the_versions_of_documents_known(stores: tuple[Store, Store]) -> None:
    a, b = stores
    for i in range(3):
        await a.put("things", f"k{i}", {"i": i})
    first = await b.all_versioned("things")
    known = {key: v.version for key, v in first.items()}
    await a.put("things", "k1", {"i": 11})
    await a.delete("things", "k2")
    await a.put("things", "k3", {"i": 3})
    since = await b.all_versioned_since("things", {**known, "gone": 9})
    assert sorted(since) == ["k0", "k1", "k3"]
    assert since["k0"] == known["k0"]  # unchanged: just its version
    assert since["k1"] == await a.get_versioned("things", "k1") and since["k3"] == await a.get_versioned("things", "k3")
    assert await b.all_versioned_since("things", {}) == await b.all_versioned("things")
    assert await b.all_versioned_since("nothing", known) == {}


async def test_stored_is_the_text_and_version_get_versioned_reads(stores: tuple[Store, Store]) -> None:
    a, b = stores
    assert await a.get_stored("c", "k") is None
    v1 = await a.put("c", "k", {"n": 1, "pair": (1, 2)})
    stored = await b.get_stored("c", "k")
    assert stored is not None and stored.version == v1
    assert json.loads(stored.text) == {"n": 1, "pair": [1, 2]}
    assert Versioned(stored.decode(), stored.version) == await b.get_versioned("c", "k")
    v2 = await b.put("c", "k", {"n": 1, "pair": (1, 2)})  # the same document again: the same text, a new version
    again = await a.get_stored("c", "k")
    assert again is not None and again.text == stored.text and again.version == v2 > v1
    await a.delete("c", "k")
    assert await b.get_stored("c", "k") is None


async def test_versioned_is_a_frozen_copy(store: Store) -> None:
    version = await store.put("c", "k", {"list": [1]})
    got = await store.get_versioned("c", "k")
    assert got is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.version = 99  # type: ignore[misc]
    got.doc["list"].append(2)  # a copy: the store does not change with it
    assert await store.get_versioned("c", "k") == Versioned({"list": [1]}, version)


async def test_concurrent_compare_and_set_increments_lose_nothing(stores: tuple[Store, Store]) -> None:
    """N tasks (alternating between the two replicas) each add 1 to one field with read, modify, CAS, retry."""
    n = 40
    everyone_read = asyncio.Barrier(n)
    conflicts = 0

    async def increment(replica: Store) -> None:
        nonlocal conflicts
        first = True
        while True:
            current = await replica.get_versioned("counters", "shared")
            doc, version = (current.doc, current.version) if current else ({"n": 0}, 0)
            if first:  # the first attempts all start from the same read: all but one must conflict
                first = False
                await everyone_read.wait()
            doc["n"] += 1
            if await replica.put_if_version("counters", "shared", doc, version=version, durable=False) is not None:
                return
            conflicts += 1

    await asyncio.gather(*(increment(stores[i % 2]) for i in range(n)))
    final = await stores[1].get_versioned("counters", "shared")
    assert final is not None and final.doc == {"n": n}
    assert conflicts >= n - 1


async def test_reads_see_each_document_with_its_own_version(stores: tuple[Store, Store]) -> None:
    """A document and its version are read together, while another replica keeps rewriting it."""
    a, b = stores
    written: dict[int, int] = {await a.put("c", "k", {"i": 0}): 0}
    seen: list[Versioned] = []

    async def writer() -> None:
        for i in range(1, 100):
            written[await a.put("c", "k", {"i": i}, durable=False)] = i

    async def reader() -> None:
        for _ in range(100):
            got = await b.get_versioned("c", "k")
            assert got is not None
            seen.append(got)
            seen.extend((await b.all_versioned("c")).values())

    await asyncio.gather(writer(), reader())
    assert all(written[v.version] == v.doc["i"] for v in seen)


BAD_VERSIONS: list[Any] = [-1, 1.5, "1", True, None, 2**63]


@pytest.mark.parametrize("bad", BAD_VERSIONS, ids=repr)
async def test_bad_versions_are_refused(store: Store, bad: Any) -> None:
    await store.put("c", "k", {"n": 1})
    with pytest.raises(InvalidArgument, match="version"):
        await store.put_if_version("c", "k", {"n": 2}, version=bad)
    with pytest.raises(InvalidArgument, match="version"):
        await store.delete_if_version("c", "k", version=bad)
    with pytest.raises(InvalidArgument, match="version"):
        await store.delete_if_version("c", "k", version=0)  # a document's version is positive
    assert await store.get("c", "k") == {"n": 1}


@pytest.mark.parametrize("bad", ["", "x" * 201, "new\nline", 7, None], ids=repr)
async def test_bad_names_are_refused_by_the_versioned_calls(store: Store, bad: Any) -> None:
    calls = [
        store.get_versioned(bad, "k"),
        store.get_versioned("c", bad),
        store.all_versioned(bad),
        store.put_if_version(bad, "k", {}, version=0),
        store.put_if_version("c", bad, {}, version=0),
        store.delete_if_version(bad, "k", version=1),
        store.delete_if_version("c", bad, version=1),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument):
            await call
    with pytest.raises(InvalidArgument):
        await store.put_if_version("c", "k", [1], version=0)  # type: ignore[arg-type]


# --- embedded: versions in the file -------------------------------------------------------------------------------


def on_disk(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_bytes())
    return data


async def test_embedded_versions_and_the_counter_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = await EmbeddedStore.open(str(path), flush_interval=3600, logger=LOGGER)
    va = await store.put("c", "a", {"n": 1})
    vb = await store.put("c", "b", {"n": 2})
    vc = await store.put("d", "c", {"n": 3}, durable=False)
    assert await store.delete("c", "b")
    await store.close()
    assert on_disk(path)["versions"] == {"c": {"a": va}, "d": {"c": vc}}
    assert on_disk(path)["last_version"] == vc > vb > va

    store = await EmbeddedStore.open(str(path), logger=LOGGER)
    assert await store.get_versioned("c", "a") == Versioned({"n": 1}, va)
    assert await store.all_versioned("d") == {"c": Versioned({"n": 3}, vc)}
    va2 = await store.put_if_version("c", "a", {"n": 10}, version=va)  # a version read before the restart
    assert va2 is not None and va2 > vc  # the counter came back too: no version is handed out twice
    assert await store.put("c", "b", {"n": 2}) > va2
    await store.close()


OLD_FORMAT = {
    "version": 1,
    "documents": {"sandboxes": {"s1": {"state": "running"}, "s2": {"state": "idle"}}, "secrets": {"x": {"h": "0"}}},
    "queues": {"pool": ["w1"]},
    "locks": {},
    "counters": {"created": 2},
}


async def test_embedded_loads_a_state_file_written_before_versions(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(OLD_FORMAT))
    store = await EmbeddedStore.open(str(path), logger=LOGGER)
    everything = {**await store.all_versioned("sandboxes"), **await store.all_versioned("secrets")}
    assert {k: v.doc for k, v in everything.items()} == {
        "s1": {"state": "running"},
        "s2": {"state": "idle"},
        "x": {"h": "0"},
    }
    versions = {k: v.version for k, v in everything.items()}
    assert sorted(versions.values()) == [1, 2, 3]
    assert await store.items("pool") == ["w1"]
    assert await store.counter("created") == 2
    await store.close()
    assert "versions" not in on_disk(path)  # nothing changed: the file was left as it was

    store = await EmbeddedStore.open(str(path), logger=LOGGER)  # the same versions, loaded again
    assert {k: v.version for k, v in (await store.all_versioned("sandboxes")).items()} == {
        "s1": versions["s1"],
        "s2": versions["s2"],
    }
    v = await store.put_if_version("sandboxes", "s1", {"state": "stopped"}, version=versions["s1"])
    assert v is not None and v > 3
    await store.close()
    assert on_disk(path)["versions"] == {"sandboxes": {"s1": v, "s2": versions["s2"]}, "secrets": {"x": versions["x"]}}
    assert on_disk(path)["last_version"] == v


@pytest.mark.parametrize(
    "extra",
    [
        {"versions": []},
        {"versions": {"c": []}},
        {"versions": {"c": {"k": 0}}, "last_version": 5},
        {"versions": {"c": {"k": "1"}}, "last_version": 5},
        {"versions": {"c": {"k": 6}}, "last_version": 5},
        {"versions": {"c": {"k": 1, "gone": 2}}, "last_version": 5},
        {"versions": {"c": {"k": 1}}, "last_version": "5"},
        {"versions": {"c": {"k": 1}}, "last_version": -1},
        {"versions": {"c": {"k": 1}}, "last_version": True},
    ],
    ids=repr,
)
async def test_embedded_bad_versions_make_the_file_corrupt(tmp_path: Path, extra: dict[str, Any]) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "documents": {"c": {"k": {"v": 1}}}, **extra}))
    with pytest.raises(FailedPrecondition, match=rf"state file {path} is corrupt"):
        await EmbeddedStore.open(str(path), logger=LOGGER)


# --- Redis: versions in keys --------------------------------------------------------------------------------------


async def test_redis_version_keys(redis_server: RedisServer) -> None:
    namespace = f"test-{secrets.token_hex(4)}"
    store = await RedisStore.open(redis_server.url, namespace=namespace, logger=LOGGER)
    raw = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        v1 = await store.put("sandboxes", "s1", {"a": 1})
        assert v1 == 2  # the counter never hands out 1: that is the version of a document without one
        assert await raw.hget(f"{namespace}:doc:sandboxes", "s1") == '{"a":1}'
        assert await raw.hget(f"{namespace}:ver:sandboxes", "s1") == str(v1)
        assert await raw.get(f"{namespace}:doc-version") == str(v1)
        assert await store.incr("doc-version") == 1  # a counter of that name is another key
        v2 = await store.put("sandboxes", "s1", {"a": 2})
        assert v2 == v1 + 1
        assert await store.delete("sandboxes", "s1")
        assert await raw.exists(f"{namespace}:doc:sandboxes", f"{namespace}:ver:sandboxes") == 0

        await raw.hset(f"{namespace}:doc:sandboxes", "s2", "{}")
        await raw.hset(f"{namespace}:ver:sandboxes", "s2", "not-a-number")
        with pytest.raises(FailedPrecondition, match="corrupt version of document sandboxes/s2"):
            await store.get_versioned("sandboxes", "s2")
        with pytest.raises(FailedPrecondition, match="corrupt version of document sandboxes/s2 in Redis at"):
            await store.get_stored("sandboxes", "s2")
        with pytest.raises(FailedPrecondition, match="corrupt version"):
            await store.all_versioned("sandboxes")
    finally:
        await raw.aclose()
        await store.close()
        await drop_namespace(redis_server.url, namespace)


async def test_redis_documents_from_before_versions_read_as_version_1(redis_server: RedisServer) -> None:
    namespace = f"test-{secrets.token_hex(4)}"
    store = await RedisStore.open(redis_server.url, namespace=namespace, logger=LOGGER)
    raw = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        await raw.hset(f"{namespace}:doc:old", mapping={"a": '{"n":1}', "b": '{"n":2}', "c": '{"n":3}'})
        assert await store.get_versioned("old", "a") == Versioned({"n": 1}, 1)
        assert await store.all_versioned("old") == {
            "a": Versioned({"n": 1}, 1),
            "b": Versioned({"n": 2}, 1),
            "c": Versioned({"n": 3}, 1),
        }
        assert await store.put_if_version("old", "a", {"n": 10}, version=0) is None  # present
        assert await store.put_if_version("old", "a", {"n": 10}, version=2) is None
        va = await store.put_if_version("old", "a", {"n": 10}, version=1)
        assert va is not None and va >= 2
        assert await store.get_versioned("old", "a") == Versioned({"n": 10}, va)
        assert await store.delete_if_version("old", "b", version=1) is True
        vb = await store.put("old", "b", {"n": 2})  # written again: never version 1 again
        assert vb > va
        assert await store.delete_if_version("old", "b", version=1) is False
        assert await store.delete("old", "c") is True

        await raw.hset(f"{namespace}:ver:old", "stray", "7")  # a version with no document: the key is absent
        assert await store.get_versioned("old", "stray") is None
        vs = await store.put_if_version("old", "stray", {"new": True}, version=0)
        assert vs is not None and vs > vb
        assert await raw.hget(f"{namespace}:ver:old", "stray") == str(vs)
    finally:
        await raw.aclose()
        await store.close()
        await drop_namespace(redis_server.url, namespace)
