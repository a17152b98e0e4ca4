"""The Redis store: state shared by several control-plane replicas. The only module that imports ``redis``.

Open it with ``store = await RedisStore.open(url, namespace=..., logger=...)``: it PINGs once and fails with
``Unavailable`` naming the server when Redis does not answer. Keys (``<ns>`` = namespace):

    <ns>:doc:<collection>   hash   field = key, value = the document's JSON    (Lua writes; HGET, HGETALL)
    <ns>:ver:<collection>   hash   field = key, value = the document's version (Lua writes; MULTI reads)
    <ns>:doc-version        string the store-wide version counter               (INCR, in the Lua writes)
    <ns>:queue:<queue>      list   head = next to pop                           (RPUSH, LPOP, LREM, LRANGE)
    <ns>:lock:<name>        string value = owner, expiring (PX)                 (SET NX PX; Lua renew/unlock)
    <ns>:counter:<name>     string an integer                                   (INCRBY, GET)

Versions. Every document write is one Lua script that sets the JSON and a fresh version (INCR of
``<ns>:doc-version``) together, after checking the expected version for ``put_if_version`` /
``put_if_absent`` / ``delete_if_version``; ``delete`` removes both fields. ``get_versioned`` and ``all_versioned``
read both hashes in one MULTI/EXEC, so a document and its version are always seen together. The counter is its own
key (not ``<ns>:counter:…``), so no ``incr`` call can move it. A document with no version field — written by a
build that predates versions — reads as version 1 and is compare-and-settable as such; the counter never hands out
1 (it starts at 2), so that version cannot come back after the document is deleted and written again. Every
replica sharing a namespace must run a build that keeps versions: an older one's HSET would change a document
without changing its version.

Every write is in Redis before its call returns (``durable`` changes nothing here); how long Redis keeps it is the
server's persistence setting. Commands are never retried by the client: a retried LPOP or INCRBY whose first reply
was lost would run twice. A connection error or timeout is ``Unavailable``; the caller retries if it may.
A pooled connection that Redis closed (say, after a restart) is replaced before its next use.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from sandbox.errors import FailedPrecondition, InternalError, InvalidArgument, Unavailable
from sandbox.store.base import Store, Stored, StoreState, Versioned, check_name, decode_document

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

# The document scripts: KEYS = <ns>:doc:<collection>, <ns>:ver:<collection>, <ns>:doc-version; ARGV[1] = key.
# The version of an absent document is '0'; of a document without a version field (an older build's), '1'.
# Versions are compared as the decimal strings Python sends and INCR-derived values are stored as.
_DOC_FUNCTIONS = """
local function version_of(key)
  if redis.call('HEXISTS', KEYS[1], key) == 0 then return '0' end
  return redis.call('HGET', KEYS[2], key) or '1'
end
local function write(key, text)
  local v = redis.call('INCR', KEYS[3])
  if v == 1 then v = redis.call('INCR', KEYS[3]) end
  redis.call('HSET', KEYS[1], key, text)
  redis.call('HSET', KEYS[2], key, v)
  return v
end
"""
# Write ARGV[2] as the document; the new version.
_PUT = _DOC_FUNCTIONS + "return write(ARGV[1], ARGV[2])"
# Write ARGV[2] if the version is ARGV[3]; the new version, or nil.
_PUT_IF_VERSION = (
    _DOC_FUNCTIONS
    + """
if version_of(ARGV[1]) ~= ARGV[3] then return false end
return write(ARGV[1], ARGV[2])
"""
)
# Delete the document (and its version) if its version is ARGV[2] (or, without ARGV[2], whatever it is); 1 if done.
_DELETE = (
    _DOC_FUNCTIONS
    + """
if ARGV[2] and version_of(ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
"""
)


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
        self._put_script = self._client.register_script(_PUT)
        self._put_if_version_script = self._client.register_script(_PUT_IF_VERSION)
        self._delete_script = self._client.register_script(_DELETE)

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
        await self._read(self._client.ping, "PING")

    async def _read(self, make: Callable[[], Awaitable[T]], what: str) -> T:
        """A read, sent once more on a new connection when its connection turns out closed: after Redis restarts,
        the pool's idle connections are dead, and the first command on each fails before the server sees it.
        Reads only: a write that fails that way may still have been done."""
        try:
            return await make()
        except (rexc.ConnectionError, OSError) as e:
            self._log.info("Redis at %s: %s failed on a closed connection (%s); once more", self._where, what, e)
            await self._drop_idle_connections()
        return await self._run(make(), what)

    async def _drop_idle_connections(self) -> None:
        """After one connection failed, the pool's idle ones likely point at the same gone server: close them, so
        that each later command does not find that out again (commands under way keep theirs)."""
        with contextlib.suppress(Exception):
            await self._client.connection_pool.disconnect(inuse_connections=False)

    async def _run(self, command: Awaitable[T], what: str) -> T:
        try:
            return await command
        except (rexc.ConnectionError, rexc.TimeoutError, rexc.ReadOnlyError, OSError) as e:
            if isinstance(e, rexc.ConnectionError | OSError):
                await self._drop_idle_connections()
            raise Unavailable(
                f"Redis at {self._where} does not answer ({what}): {e or type(e).__name__}; "
                "is redis-server running and reachable?"
            ) from e
        except rexc.RedisError as e:
            raise InternalError(f"Redis at {self._where} refused {what}: {e}") from e

    def _key(self, kind: str, name: str) -> str:
        return f"{self.namespace}:{kind}:{name}"

    # documents

    def _doc_keys(self, collection: str) -> list[str]:
        return [self._key("doc", collection), self._key("ver", collection), f"{self.namespace}:doc-version"]

    def _versioned(self, collection: str, key: str, text: str | bytes, version: str | bytes | None) -> Versioned:
        where = f"{collection}/{key} in Redis at {self._where}"
        return Versioned(decode_document(text, where), self._version(where, version))

    @staticmethod
    def _version(where: str, version: str | bytes | None) -> int:
        if version is None:
            return 1  # written by a build without versions
        try:
            number = int(version)
        except ValueError:
            number = 0
        if number < 1:
            raise FailedPrecondition(f"corrupt version of document {where}: {version!r}")
        return number

    async def _get(self, collection: str, key: str) -> dict[str, Any] | None:
        text = await self._read(lambda: self._client.hget(self._key("doc", collection), key), "HGET")
        return None if text is None else decode_document(text, f"{collection}/{key} in Redis at {self._where}")

    async def _get_versioned(self, collection: str, key: str) -> Versioned | None:
        text, version = await self._read_versioned(collection, key)
        return None if text is None else self._versioned(collection, key, text, version)

    async def _get_stored(self, collection: str, key: str) -> Stored | None:
        text, version = await self._read_versioned(collection, key)
        if text is None:
            return None
        where = f"{collection}/{key} in Redis at {self._where}"
        return Stored(_str(text), self._version(where, version), where)

    async def _read_versioned(self, collection: str, key: str) -> tuple[Any, Any]:
        """The document's text and version fields, read in one MULTI/EXEC."""
        docs, versions, _ = self._doc_keys(collection)

        async def read() -> list[Any]:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hget(docs, key)
                pipe.hget(versions, key)
                return await pipe.execute()

        text, version = await self._read(read, "MULTI HGET")
        return text, version

    async def _put(self, collection: str, key: str, text: str, *, durable: bool) -> int:
        return int(await self._run(self._put_script(keys=self._doc_keys(collection), args=[key, text]), "put"))

    async def _put_if_version(self, collection: str, key: str, text: str, *, version: int, durable: bool) -> int | None:
        script = self._put_if_version_script(keys=self._doc_keys(collection), args=[key, text, str(version)])
        new = await self._run(script, "put_if_version")
        return None if new is None else int(new)

    async def _delete(self, collection: str, key: str) -> bool:
        return bool(await self._run(self._delete_script(keys=self._doc_keys(collection), args=[key]), "delete"))

    async def _delete_if_version(self, collection: str, key: str, *, version: int) -> bool:
        script = self._delete_script(keys=self._doc_keys(collection), args=[key, str(version)])
        return bool(await self._run(script, "delete_if_version"))

    async def _all(self, collection: str) -> dict[str, dict[str, Any]]:
        found = await self._read(lambda: self._client.hgetall(self._key("doc", collection)), "HGETALL")
        where = f"in Redis at {self._where}"
        return {_str(k): decode_document(v, f"{collection}/{_str(k)} {where}") for k, v in found.items()}

    async def _all_versioned(self, collection: str) -> dict[str, Versioned]:
        docs, versions, _ = self._doc_keys(collection)

        async def read() -> list[Any]:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hgetall(docs)
                pipe.hgetall(versions)
                return await pipe.execute()

        found, numbers = await self._read(read, "MULTI HGETALL")
        numbers = {_str(k): v for k, v in numbers.items()}
        return {_str(k): self._versioned(collection, _str(k), v, numbers.get(_str(k))) for k, v in found.items()}

    # queues

    async def _push(self, queue: str, item: str) -> None:
        await self._run(self._client.rpush(self._key("queue", queue), item), "RPUSH")

    async def _pop(self, queue: str, *, durable: bool) -> str | None:
        item = await self._run(self._client.lpop(self._key("queue", queue)), "LPOP")
        if item is None or isinstance(item, bytes | str):
            return None if item is None else _str(item)
        raise InternalError(f"LPOP without a count answered a list: {item!r}")

    async def _remove(self, queue: str, item: str) -> bool:
        return bool(await self._run(self._client.lrem(self._key("queue", queue), 0, item), "LREM"))

    async def _items(self, queue: str) -> list[str]:
        return [
            _str(i) for i in await self._read(lambda: self._client.lrange(self._key("queue", queue), 0, -1), "LRANGE")
        ]

    # leased locks

    async def _try_lock(self, name: str, owner: str, ttl_s: float) -> bool:
        ttl_ms = max(1, round(ttl_s * 1000))
        return bool(
            await self._run(self._try_lock_script(keys=[self._key("lock", name)], args=[owner, ttl_ms]), "lock")
        )

    async def _unlock(self, name: str, owner: str) -> bool:
        return bool(await self._run(self._unlock_script(keys=[self._key("lock", name)], args=[owner]), "unlock"))

    async def _holder(self, name: str) -> str | None:
        owner = await self._read(lambda: self._client.get(self._key("lock", name)), "GET")
        return None if owner is None else _str(owner)

    # counters

    async def _incr(self, name: str, by: int) -> int:
        return int(await self._run(self._client.incrby(self._key("counter", name), by), "INCRBY"))

    async def _counter(self, name: str) -> int:
        value = await self._read(lambda: self._client.get(self._key("counter", name)), "GET")
        if value is None:
            return 0
        try:
            return int(value)
        except ValueError as e:
            raise FailedPrecondition(f"counter {name} in Redis at {self._where} is not an integer: {value!r}") from e

    async def _close(self) -> None:
        await self._client.aclose()
