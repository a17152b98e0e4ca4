"""The Redis store's own behaviour: the server going away, the key layout, passwords in messages."""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest
import redis.asyncio as aioredis

from sandbox.errors import FailedPrecondition, Unavailable
from sandbox.store import RedisStore, RedisStoreConfig, open_store
from sandbox.store.redis import redact
from tests.redis_server import RedisServer, free_port
from tests.unit.store.conftest import LOGGER, drop_namespace


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


async def test_reads_after_a_restart_do_not_fail_on_the_pools_dead_connections() -> None:
    """Redis restarted while the pool held idle connections: every one is dead, and a read sent on one failed with
    "Connection closed by server" (CI: an adopted sandbox's ReadFile answered UNAVAILABLE after the restart had
    passed). A read goes once more on a new connection; the store answers as soon as Redis does."""
    with RedisServer() as server:
        store = await RedisStore.open(server.url, logger=LOGGER)
        await asyncio.gather(*(store.get("c", f"k{i}") for i in range(8)))  # the pool holds several connections
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)
        reads = await asyncio.gather(  # each would have met a dead connection of the pool
            *(store.get("c", "k") for _ in range(8)),
            *(store.get_versioned("c", "k") for _ in range(4)),
            store.all("c"),
            store.items("q"),
            store.holder("l"),
            store.counter("n"),
        )
        assert reads == [None] * 12 + [{}, [], None, 0]
        await store.put("c", "k", {"v": 1})  # the pool's dead connections are gone: a write finds none either
        assert await asyncio.gather(*(store.get("c", "k") for _ in range(8))) == [{"v": 1}] * 8
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
        stored = await store.get_stored("sandboxes", "bad")  # read as it is; its decoding says what is wrong
        assert stored is not None and stored.text == "{not json"
        with pytest.raises(FailedPrecondition, match="corrupt document sandboxes/bad in Redis at"):
            stored.decode()
    finally:
        await raw.aclose()
        await store.close()
        await drop_namespace(redis_server.url, namespace)


def test_redis_password_never_shown() -> None:
    assert redact("redis://:s3cret@10.0.0.1:6379/0") == "redis://:***@10.0.0.1:6379/0"
    assert redact("redis://user:s3cret@host/1") == "redis://user:***@host/1"
    assert redact("redis://host:6379/0") == "redis://host:6379/0"
