"""Fixtures of the state-store tests: each shared test runs against the embedded store (on a temp file, with a
fake clock) and the Redis store (two clients of a real redis-server, as two replicas have)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from sandbox.store import EmbeddedStore, RedisStore, Store
from tests.redis_server import RedisServer, redis_server  # noqa: F401  (the session fixture)

LOGGER = logging.getLogger("sandbox.test.store")
ROOT = Path(__file__).resolve().parents[3]

Advance = Callable[[float], Awaitable[None]]


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def drop_namespace(url: str, namespace: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{namespace}:*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def shift_redis_leases(url: str, namespace: str, seconds: float) -> None:
    """Move Redis's time for the namespace's locks: every lease gets ``seconds`` shorter (gone if used up)."""
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        async for key in client.scan_iter(match=f"{namespace}:lock:*"):
            left = await client.pttl(key) - round(seconds * 1000)
            if left > 0:
                await client.pexpire(key, left)
            else:
                await client.delete(key)
    finally:
        await client.aclose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest_asyncio.fixture(params=["embedded", "redis"])
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[tuple[Store, Store]]:
    """Two handles on one state: two Redis connections (as two replicas have), or the one embedded store."""
    if request.param == "embedded":
        path = str(tmp_path / "state.json")
        store = await EmbeddedStore.open(path, flush_interval=0.05, logger=LOGGER, clock=clock)
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


@pytest.fixture
def advance(stores: tuple[Store, Store], clock: FakeClock) -> Advance:
    """Let ``seconds`` pass for the stores' leases, without sleeping: the embedded store's fake clock moves; in
    Redis every lock of the namespace gets that much closer to its expiry."""

    async def advance(seconds: float) -> None:
        first = stores[0]
        if isinstance(first, RedisStore):
            await shift_redis_leases(first.url, first.namespace, seconds)
        else:
            clock.advance(seconds)

    return advance
