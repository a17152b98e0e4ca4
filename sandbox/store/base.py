"""The state-store interface: versioned JSON documents, FIFO queues, leased locks and counters.

Two implementations share it: ``EmbeddedStore`` (one process, one JSON file) and ``RedisStore`` (several
control-plane replicas, one Redis). The public methods here validate their arguments and the lifecycle once, for
both; an implementation fills in the ``_``-prefixed abstract methods and receives only checked input.

Errors (see ``sandbox.errors``): ``InvalidArgument`` for a bad name, value or ttl; ``Unavailable`` when the store
does not answer (Redis down, state file not writable); ``FailedPrecondition`` for a closed store or corrupt state.

Versions. Every write of a document (``put``, ``put_if_absent``, ``put_if_version``) gives it a new version: a
positive int taken from ONE store-wide, monotonically increasing counter, so versions only grow and a key deleted
and created again never gets an old version back (no ABA). ``put_if_version`` / ``delete_if_version`` are
compare-and-set on that version, atomic across replicas; version 0 stands for "absent". The usual loop::

    while True:
        current = await store.get_versioned(c, k)
        doc, version = (current.doc, current.version) if current else ({}, 0)
        doc["n"] = doc.get("n", 0) + 1
        if await store.put_if_version(c, k, doc, version=version) is not None:
            break
"""

from __future__ import annotations

import abc
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandbox.errors import FailedPrecondition, InvalidArgument

MAX_NAME_LEN = 200
MAX_TTL_S = 365 * 86400.0
MAX_COUNTER_STEP = 2**63 - 1  # Redis counters are signed 64-bit
MAX_VERSION = 2**63 - 1


@dataclass(frozen=True)
class Versioned:
    """A document (a fresh copy) and its version."""

    doc: dict[str, Any]
    version: int


@dataclass(frozen=True)
class Stored:
    """A document as the store keeps it, compact JSON text, not yet decoded, and its version (``get_stored``). The
    same text is the same document, whatever the versions: a caller that parsed this text before may reuse what it
    made of it, and skip decoding and validating it again."""

    text: str
    version: int
    where: str
    """The document's name in ``decode``'s error."""

    def decode(self) -> dict[str, Any]:
        """The document (a fresh copy), as ``get_versioned`` returns it; FailedPrecondition for corrupt text."""
        return decode_document(self.text, self.where)


class StoreState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


def check_name(kind: str, name: object) -> str:
    """A collection, key, queue, item, lock, owner or counter name: a printable string of 1-200 characters."""
    if not isinstance(name, str):
        raise InvalidArgument(f"{kind} name must be a string, not {type(name).__name__}")
    if not name or len(name) > MAX_NAME_LEN:
        raise InvalidArgument(f"{kind} name must have 1-{MAX_NAME_LEN} characters, got {len(name)}")
    if not name.isprintable():
        raise InvalidArgument(f"{kind} name {name!r} holds a non-printable character")
    return name


def check_version(version: object, *, absent_ok: bool) -> int:
    """An expected version: an int in [1, 2**63-1], or also 0 ("absent") when ``absent_ok``."""
    low = 0 if absent_ok else 1
    if isinstance(version, bool) or not isinstance(version, int) or not low <= version <= MAX_VERSION:
        raise InvalidArgument(f"version must be an int in [{low}, {MAX_VERSION}], got {version!r}")
    return version


def encode_document(value: object) -> str:
    """A document as compact JSON text: the one form both stores keep, so both return the same thing."""
    if not isinstance(value, dict):
        raise InvalidArgument(f"a document must be a dict, not {type(value).__name__}")
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"document is not JSON-serializable: {e}") from e


def decode_document(text: str | bytes, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise FailedPrecondition(f"corrupt document {where}: {e}") from e
    if not isinstance(value, dict):
        raise FailedPrecondition(f"corrupt document {where}: a {type(value).__name__}, not an object")
    return value


class Store(abc.ABC):
    """Collections of JSON documents, FIFO queues, leased locks and counters.

    Documents: ``collection -> key -> dict`` (anything ``json.dumps`` takes; returned as fresh copies, so tuples
    come back as lists), each with a version (see the module docstring). Queues: each pushed item is popped by
    exactly one caller, across replicas. Locks: leased; ``try_lock`` acquires or renews, the lease ends after
    ``ttl_s`` unless renewed. Counters start at 0.
    """

    def __init__(self) -> None:
        self._state = StoreState.NEW

    def _check_open(self) -> None:
        if self._state is not StoreState.OPEN:
            raise FailedPrecondition(f"{type(self).__name__} is {self._state.value}; use `await ….open(...)`")

    # documents

    async def get(self, collection: str, key: str) -> dict[str, Any] | None:
        self._check_open()
        return await self._get(check_name("collection", collection), check_name("key", key))

    async def get_versioned(self, collection: str, key: str) -> Versioned | None:
        """The document and its version, read together (atomically); None if absent."""
        self._check_open()
        return await self._get_versioned(check_name("collection", collection), check_name("key", key))

    async def get_stored(self, collection: str, key: str) -> Stored | None:
        """The document's text and its version, read together (atomically), without decoding it; None if absent."""
        self._check_open()
        return await self._get_stored(check_name("collection", collection), check_name("key", key))

    async def put(self, collection: str, key: str, value: dict[str, Any], *, durable: bool = True) -> int:
        """Write a document; returns its new version. ``durable=False`` may be batched (the embedded store flushes
        it within its ``flush_interval``); ``durable=True`` is on disk / in Redis before this returns."""
        self._check_open()
        text = encode_document(value)
        return await self._put(check_name("collection", collection), check_name("key", key), text, durable=durable)

    async def put_if_absent(self, collection: str, key: str, value: dict[str, Any]) -> bool:
        """Atomically write the document unless the key exists; True if written (durably, with a new version)."""
        self._check_open()
        text = encode_document(value)
        collection, key = check_name("collection", collection), check_name("key", key)
        return await self._put_if_version(collection, key, text, version=0, durable=True) is not None

    async def put_if_version(
        self, collection: str, key: str, value: dict[str, Any], *, version: int, durable: bool = True
    ) -> int | None:
        """Write the document only if its current version is ``version`` (0: only if absent), atomically;
        returns the new version, or None on a conflict (nothing is written). ``durable`` as for ``put``."""
        self._check_open()
        text = encode_document(value)
        collection, key = check_name("collection", collection), check_name("key", key)
        expected = check_version(version, absent_ok=True)
        return await self._put_if_version(collection, key, text, version=expected, durable=durable)

    async def delete(self, collection: str, key: str) -> bool:
        """Remove a document (durably); True if it existed."""
        self._check_open()
        return await self._delete(check_name("collection", collection), check_name("key", key))

    async def delete_if_version(self, collection: str, key: str, *, version: int) -> bool:
        """Remove the document (durably) only if its current version is ``version`` (>= 1), atomically; True if
        it was removed, False if absent or at another version."""
        self._check_open()
        collection, key = check_name("collection", collection), check_name("key", key)
        return await self._delete_if_version(collection, key, version=check_version(version, absent_ok=False))

    async def all(self, collection: str) -> dict[str, dict[str, Any]]:
        self._check_open()
        return await self._all(check_name("collection", collection))

    async def all_versioned(self, collection: str) -> dict[str, Versioned]:
        """Every document of the collection with its version, read at one moment (atomically)."""
        self._check_open()
        return await self._all_versioned(check_name("collection", collection))

    async def all_versioned_since(self, collection: str, known: Mapping[str, int]) -> dict[str, Versioned | int]:
        """:meth:`all_versioned`, but a document whose version is the one ``known`` names comes back as just that
        version, not decoded again: a caller that keeps what it parsed (the lifecycle reads every sandbox's record
        twice a second) pays only for the documents that changed."""
        self._check_open()
        return await self._all_versioned_since(check_name("collection", collection), known)

    # queues

    async def push(self, queue: str, item: str) -> None:
        """Append an item at the tail of the queue."""
        self._check_open()
        await self._push(check_name("queue", queue), check_name("queue item", item))

    async def pop(self, queue: str, *, durable: bool = True) -> str | None:
        """Atomically take the item at the head of the queue; None when it is empty. ``durable`` as for ``put``:
        with False, a crash before the next flush may put the item back at the head of the queue."""
        self._check_open()
        return await self._pop(check_name("queue", queue), durable=durable)

    async def remove(self, queue: str, item: str) -> bool:
        """Remove every occurrence of an item (e.g. a warm sandbox found dead); True if there was one."""
        self._check_open()
        return await self._remove(check_name("queue", queue), check_name("queue item", item))

    async def items(self, queue: str) -> list[str]:
        """The queue's items, head first."""
        self._check_open()
        return await self._items(check_name("queue", queue))

    # leased locks

    async def try_lock(self, name: str, owner: str, ttl_s: float) -> bool:
        """Acquire the lock, or renew it if ``owner`` holds it; it lapses ``ttl_s`` seconds after the last call."""
        self._check_open()
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not 0 < ttl_s <= MAX_TTL_S:
            raise InvalidArgument(f"lock ttl must be a number of seconds in (0, {MAX_TTL_S:.0f}], got {ttl_s!r}")
        return await self._try_lock(check_name("lock", name), check_name("lock owner", owner), float(ttl_s))

    async def unlock(self, name: str, owner: str) -> bool:
        """Release the lock if ``owner`` holds it; False if someone else (or nobody) does."""
        self._check_open()
        return await self._unlock(check_name("lock", name), check_name("lock owner", owner))

    async def holder(self, name: str) -> str | None:
        """Who holds the lock now; None when nobody does (never taken, released or lapsed)."""
        self._check_open()
        return await self._holder(check_name("lock", name))

    # counters

    async def incr(self, name: str, by: int = 1) -> int:
        """Add ``by`` (may be negative) and return the new value, durably."""
        self._check_open()
        if isinstance(by, bool) or not isinstance(by, int) or abs(by) > MAX_COUNTER_STEP:
            raise InvalidArgument(f"counter increment must be a 64-bit int, got {by!r}")
        return await self._incr(check_name("counter", name), by)

    async def counter(self, name: str) -> int:
        self._check_open()
        return await self._counter(check_name("counter", name))

    async def close(self) -> None:
        """Flush and release everything; idempotent. The store refuses calls afterwards."""
        if self._state is StoreState.CLOSED:
            return
        self._state = StoreState.CLOSED
        await self._close()

    # what an implementation provides; arguments are already checked

    @abc.abstractmethod
    async def _get(self, collection: str, key: str) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    async def _get_versioned(self, collection: str, key: str) -> Versioned | None: ...

    @abc.abstractmethod
    async def _get_stored(self, collection: str, key: str) -> Stored | None: ...

    @abc.abstractmethod
    async def _put(self, collection: str, key: str, text: str, *, durable: bool) -> int: ...

    @abc.abstractmethod
    async def _put_if_version(
        self, collection: str, key: str, text: str, *, version: int, durable: bool
    ) -> int | None: ...

    @abc.abstractmethod
    async def _delete(self, collection: str, key: str) -> bool: ...

    @abc.abstractmethod
    async def _delete_if_version(self, collection: str, key: str, *, version: int) -> bool: ...

    @abc.abstractmethod
    async def _all(self, collection: str) -> dict[str, dict[str, Any]]: ...

    @abc.abstractmethod
    async def _all_versioned(self, collection: str) -> dict[str, Versioned]: ...

    async def _all_versioned_since(self, collection: str, known: Mapping[str, int]) -> dict[str, Versioned | int]:
        """What an implementation that cannot skip the unchanged documents does: read them all."""
        found = await self._all_versioned(collection)
        return {key: v.version if known.get(key) == v.version else v for key, v in found.items()}

    @abc.abstractmethod
    async def _push(self, queue: str, item: str) -> None: ...

    @abc.abstractmethod
    async def _pop(self, queue: str, *, durable: bool) -> str | None: ...

    @abc.abstractmethod
    async def _remove(self, queue: str, item: str) -> bool: ...

    @abc.abstractmethod
    async def _items(self, queue: str) -> list[str]: ...

    @abc.abstractmethod
    async def _try_lock(self, name: str, owner: str, ttl_s: float) -> bool: ...

    @abc.abstractmethod
    async def _unlock(self, name: str, owner: str) -> bool: ...

    @abc.abstractmethod
    async def _holder(self, name: str) -> str | None: ...

    @abc.abstractmethod
    async def _incr(self, name: str, by: int) -> int: ...

    @abc.abstractmethod
    async def _counter(self, name: str) -> int: ...

    @abc.abstractmethod
    async def _close(self) -> None: ...
