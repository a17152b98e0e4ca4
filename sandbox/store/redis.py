"""The Redis store: state shared by several control-plane replicas. The only module that imports ``redis``.

Open it with ``store = await RedisStore.open(url, namespace=..., logger=...)``: it PINGs once and fails with
``Unavailable`` naming the server when Redis does not answer. Keys (``<ns>`` = namespace):

    <ns>:doc:<collection>   hash   field = key, value = the document's JSON    (HSET, HSETNX, HDEL, HGETALL)
    <ns>:queue:<queue>      list   head = next to pop                           (RPUSH, LPOP, LREM, LRANGE)
    <ns>:lock:<name>        string value = owner, expiring (PX)                 (SET NX PX; Lua renew/unlock)
    <ns>:counter:<name>     string an integer                                   (INCRBY, GET)

Every write is in Redis before its call returns (``durable`` changes nothing here); how long Redis keeps it is the
server's persistence setting. Commands are never retried by the client: a retried LPOP or INCRBY whose first reply
was lost would run twice. A connection error or timeout is ``Unavailable``; the caller retries if it may.
A pooled connection that Redis closed (say, after a restart) is replaced before its next use.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from sandbox.errors import FailedPrecondition, InternalError, InvalidArgument, Unavailable
from sandbox.store.base import Store, StoreState, check_name, decode_document

T = TypeVar("T")

# Acquire (SET NX PX) or, if ARGV[1] already holds it, renew. 1 if the caller holds the lock afterwards.
_TRY_LOCK = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
"""
# Delete the lock only if ARGV[1] holds it.
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisStore(Store):
    """Documents, queues, locks and counters in one Redis database, under ``<namespace>:``."""

    def __init__(self, url: str, *, namespace: str = "sandbox", timeout_s: float = 5.0, logger: logging.Logger) -> None:
        super().__init__()
        self.url = url
        self.namespace = check_name("namespace", namespace)
        self._where = redact(url)
        self._log = logger
        try:
            self._client = aioredis.Redis.from_url(
                url,
                decode_responses=True,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), 0),
            )
        except ValueError as e:
            raise InvalidArgument(f"bad Redis URL {self._where}: {e}") from e
        self._try_lock_script = self._client.register_script(_TRY_LOCK)
        self._unlock_script = self._client.register_script(_UNLOCK)

    @classmethod
    async def open(
        cls, url: str, *, namespace: str = "sandbox", timeout_s: float = 5.0, logger: logging.Logger
    ) -> RedisStore:
        """Connect and PING; ``Unavailable`` with the server's address if Redis does not answer."""
        store = cls(url, namespace=namespace, timeout_s=timeout_s, logger=logger)
        try:
            await store.ping()
        except BaseException:
            await store._client.aclose()
            raise
        store._state = StoreState.OPEN
        logger.info("state store: Redis at %s, namespace %r", store._where, namespace)
        return store

    async def ping(self) -> None:
        """Raise ``Unavailable`` unless Redis answers a PING."""
        await self._run(self._client.ping(), "PING")

    async def _run(self, command: Awaitable[T], what: str) -> T:
        try:
            return await command
        except (rexc.ConnectionError, rexc.TimeoutError, rexc.ReadOnlyError, OSError) as e:
            raise Unavailable(
                f"Redis at {self._where} does not answer ({what}): {e or type(e).__name__}; "
                "is redis-server running and reachable?"
            ) from e
        except rexc.RedisError as e:
            raise InternalError(f"Redis at {self._where} refused {what}: {e}") from e

    def _key(self, kind: str, name: str) -> str:
        return f"{self.namespace}:{kind}:{name}"

    # documents

    async def _get(self, collection: str, key: str) -> dict[str, Any] | None:
        text = await self._run(self._client.hget(self._key("doc", collection), key), "HGET")
        return None if text is None else decode_document(text, f"{collection}/{key} in Redis at {self._where}")

    async def _put(self, collection: str, key: str, text: str, *, durable: bool) -> None:
        await self._run(self._client.hset(self._key("doc", collection), key, text), "HSET")

    async def _put_if_absent(self, collection: str, key: str, text: str) -> bool:
        return bool(await self._run(self._client.hsetnx(self._key("doc", collection), key, text), "HSETNX"))

    async def _delete(self, collection: str, key: str) -> bool:
        return bool(await self._run(self._client.hdel(self._key("doc", collection), key), "HDEL"))

    async def _all(self, collection: str) -> dict[str, dict[str, Any]]:
        found = await self._run(self._client.hgetall(self._key("doc", collection)), "HGETALL")
        where = f"in Redis at {self._where}"
        return {_str(k): decode_document(v, f"{collection}/{_str(k)} {where}") for k, v in found.items()}

    # queues

    async def _push(self, queue: str, item: str) -> None:
        await self._run(self._client.rpush(self._key("queue", queue), item), "RPUSH")

    async def _pop(self, queue: str) -> str | None:
        item = await self._run(self._client.lpop(self._key("queue", queue)), "LPOP")
        if item is None or isinstance(item, bytes | str):
            return None if item is None else _str(item)
        raise InternalError(f"LPOP without a count answered a list: {item!r}")

    async def _remove(self, queue: str, item: str) -> bool:
        return bool(await self._run(self._client.lrem(self._key("queue", queue), 0, item), "LREM"))

    async def _items(self, queue: str) -> list[str]:
        return [_str(i) for i in await self._run(self._client.lrange(self._key("queue", queue), 0, -1), "LRANGE")]

    # leased locks

    async def _try_lock(self, name: str, owner: str, ttl_s: float) -> bool:
        ttl_ms = max(1, round(ttl_s * 1000))
        return bool(
            await self._run(self._try_lock_script(keys=[self._key("lock", name)], args=[owner, ttl_ms]), "lock")
        )

    async def _unlock(self, name: str, owner: str) -> bool:
        return bool(await self._run(self._unlock_script(keys=[self._key("lock", name)], args=[owner]), "unlock"))

    # counters

    async def _incr(self, name: str, by: int) -> int:
        return int(await self._run(self._client.incrby(self._key("counter", name), by), "INCRBY"))

    async def _counter(self, name: str) -> int:
        value = await self._run(self._client.get(self._key("counter", name)), "GET")
        if value is None:
            return 0
        try:
            return int(value)
        except ValueError as e:
            raise FailedPrecondition(f"counter {name} in Redis at {self._where} is not an integer: {value!r}") from e

    async def _close(self) -> None:
        await self._client.aclose()
