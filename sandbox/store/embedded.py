"""The embedded store: state in this process, persisted to ONE JSON file.

Open it with ``store = await EmbeddedStore.open(path, logger=...)`` (loads the file, takes its lock, starts the
flusher) and end with ``await store.close()`` (final flush, releases the lock).

Durability. Every change bumps a generation number; the file is rewritten whole (temp file, fsync, ``os.replace``,
fsync of the directory, in a thread of its own) by one writer at a time, so the file is always a complete old or new
state, even after ``kill -9`` or a power cut. These calls return only once their change is on disk: ``put``,
``put_if_version`` and ``pop`` (with ``durable=True``, the default), ``put_if_absent``, ``delete``,
``delete_if_version``, ``push``, ``remove``, ``incr``; concurrent ones share one write (group commit). The others
(those three with ``durable=False``, taking a lock, ``unlock``) reach the file with the next write: a durable call's,
or the background flush within ``flush_interval`` — a crash before it may lose them (locks are leases: they lapse
anyway). A store with no change writes nothing: in particular the lock's owner renewing it (``try_lock``
again) only moves its expiry in memory, so a leader renewing its lease every few hundred milliseconds does not
rewrite the file. Locks are stored with their wall-clock expiry as of the last write, so a restart keeps a lease
until it would have run out — or, for a lease renewed since that write, until its older expiry: it may lapse
earlier than it would have without the restart, which is harmless since one state file serves one process.
Lease expiry is measured with ``clock`` (``time.monotonic``; tests pass a fake one), converted to wall-clock time
(``time.time``) relative to that clock on the way to and from the file.

Versions. Each document is kept as (JSON text, version); ``last_version`` is the store-wide counter they are taken
from. Both are in the file (see ``sandbox.store.embedded_file``), so a version read before a restart still
matches after it if the document did not change, and a version is never handed out twice — except one handed out
by a ``put(durable=False)`` that a crash lost before its flush, which may be handed out again; it lived only in
the process the crash ended. Compare-and-set needs no lock: check and write happen with no ``await`` between.

One process per file: ``<path>.lock`` is held (``flock``) while the store is open; a second store on the same
file fails clearly instead of silently overwriting the first one's writes. Share state between processes or
replicas with Redis. A corrupt file raises ``FailedPrecondition`` naming it; with ``reset_corrupt=True`` it is
moved aside to ``<path>.corrupt-<UTC time>`` and the store starts empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sandbox.errors import InvalidArgument, Unavailable
from sandbox.store.base import Store, Stored, StoreState, Versioned, decode_document
from sandbox.store.embedded_file import Snapshot, open_file, write_file


@dataclass
class _State:
    documents: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)  # JSON text, version
    queues: dict[str, deque[str]] = field(default_factory=dict)
    locks: dict[str, tuple[str, float]] = field(default_factory=dict)  # owner, expiry (by the store's clock)
    counters: dict[str, int] = field(default_factory=dict)
    last_version: int = 0  # the newest document version handed out


class EmbeddedStore(Store):
    """State of one control plane, in memory and in the JSON file at ``path`` (``None``: memory only)."""

    def __init__(
        self,
        path: str | None,
        *,
        flush_interval: float = 0.5,
        reset_corrupt: bool = False,
        logger: logging.Logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if flush_interval <= 0:
            raise InvalidArgument(f"flush_interval must be positive, got {flush_interval}")
        self.path = os.path.abspath(os.path.expanduser(path)) if path is not None else None
        self._flush_interval = flush_interval
        self._reset_corrupt = reset_corrupt
        self._log = logger
        self._clock = clock  # lock expiry is measured with it
        self._data = _State()
        self._gen = 0  # bumped by every change
        self._written_gen = 0  # the newest generation on disk
        self._writing: tuple[asyncio.Task[None], list[int]] | None = None
        """The write under way (one at a time) and, once it has begun, the generation it carries."""
        # The file is written in a thread of its own: in the loop's default executor, a durable write would queue
        # behind whatever else waits there (engine calls, file copies) and every caller of the store with it.
        self._writer: ThreadPoolExecutor | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._flusher: asyncio.Task[None] | None = None
        self._lock_fd: int | None = None

    @classmethod
    async def open(
        cls,
        path: str | None,
        *,
        flush_interval: float = 0.5,
        reset_corrupt: bool = False,
        logger: logging.Logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> EmbeddedStore:
        """Load the state file (a missing one is an empty state) and start the background flusher. ``clock``
        measures lock leases (seconds; a fake one lets tests move time)."""
        store = cls(path, flush_interval=flush_interval, reset_corrupt=reset_corrupt, logger=logger, clock=clock)
        if store.path is not None:
            store._lock_fd, loaded = await asyncio.to_thread(open_file, store.path, reset_corrupt, logger)
            store._data = _from_disk(loaded, clock)
            store._flusher = asyncio.create_task(store._flush_loop(), name=f"store-flush:{store.path}")
        store._state = StoreState.OPEN
        return store

    # documents

    def _version(self, collection: str, key: str) -> int:
        held = self._data.documents.get(collection, {}).get(key)
        return 0 if held is None else held[1]

    def _write_doc(self, collection: str, key: str, text: str) -> int:
        self._data.last_version += 1
        self._data.documents.setdefault(collection, {})[key] = (text, self._data.last_version)
        return self._data.last_version

    def _drop_doc(self, collection: str, key: str) -> None:
        docs = self._data.documents[collection]
        del docs[key]
        if not docs:
            del self._data.documents[collection]

    async def _get(self, collection: str, key: str) -> dict[str, Any] | None:
        held = self._data.documents.get(collection, {}).get(key)
        return None if held is None else decode_document(held[0], f"{collection}/{key}")

    async def _get_versioned(self, collection: str, key: str) -> Versioned | None:
        held = self._data.documents.get(collection, {}).get(key)
        return None if held is None else Versioned(decode_document(held[0], f"{collection}/{key}"), held[1])

    async def _get_stored(self, collection: str, key: str) -> Stored | None:
        held = self._data.documents.get(collection, {}).get(key)
        return None if held is None else Stored(held[0], held[1], f"{collection}/{key}")

    async def _put(self, collection: str, key: str, text: str, *, durable: bool) -> int:
        version = self._write_doc(collection, key, text)
        await self._changed(durable=durable)
        return version

    async def _put_if_version(self, collection: str, key: str, text: str, *, version: int, durable: bool) -> int | None:
        if self._version(collection, key) != version:
            return None
        new = self._write_doc(collection, key, text)
        await self._changed(durable=durable)
        return new

    async def _delete(self, collection: str, key: str) -> bool:
        if not self._version(collection, key):
            return False
        self._drop_doc(collection, key)
        await self._changed(durable=True)
        return True

    async def _delete_if_version(self, collection: str, key: str, *, version: int) -> bool:
        if self._version(collection, key) != version:
            return False
        self._drop_doc(collection, key)
        await self._changed(durable=True)
        return True

    async def _all(self, collection: str) -> dict[str, dict[str, Any]]:
        docs = self._data.documents.get(collection, {})
        return {key: decode_document(text, f"{collection}/{key}") for key, (text, _) in docs.items()}

    async def _all_versioned(self, collection: str) -> dict[str, Versioned]:
        docs = self._data.documents.get(collection, {})
        return {key: Versioned(decode_document(text, f"{collection}/{key}"), v) for key, (text, v) in docs.items()}

    async def _all_versioned_since(self, collection: str, known: Mapping[str, int]) -> dict[str, Versioned | int]:
        docs = self._data.documents.get(collection, {})
        return {
            key: v if known.get(key) == v else Versioned(decode_document(text, f"{collection}/{key}"), v)
            for key, (text, v) in docs.items()
        }

    # queues

    async def _push(self, queue: str, item: str) -> None:
        self._data.queues.setdefault(queue, deque()).append(item)
        await self._changed(durable=True)

    async def _pop(self, queue: str, *, durable: bool) -> str | None:
        items = self._data.queues.get(queue)
        if not items:
            return None
        item = items.popleft()
        if not items:
            del self._data.queues[queue]
        await self._changed(durable=durable)
        return item

    async def _remove(self, queue: str, item: str) -> bool:
        items = self._data.queues.get(queue)
        if not items or item not in items:
            return False
        kept = deque(i for i in items if i != item)
        if kept:
            self._data.queues[queue] = kept
        else:
            del self._data.queues[queue]
        await self._changed(durable=True)
        return True

    async def _items(self, queue: str) -> list[str]:
        return list(self._data.queues.get(queue, ()))

    # leased locks

    async def _try_lock(self, name: str, owner: str, ttl_s: float) -> bool:
        now = self._clock()
        held = self._data.locks.get(name)
        if held is not None and held[1] > now:
            if held[0] != owner:
                return False
            # A renewal by the holder: in memory only, so an idle store writes nothing (see the module docstring).
            self._data.locks[name] = (owner, now + ttl_s)
            return True
        self._data.locks[name] = (owner, now + ttl_s)
        await self._changed(durable=False)
        return True

    async def _unlock(self, name: str, owner: str) -> bool:
        held = self._data.locks.get(name)
        if held is None or held[0] != owner or held[1] <= self._clock():
            return False
        del self._data.locks[name]
        await self._changed(durable=False)
        return True

    async def _holder(self, name: str) -> str | None:
        held = self._data.locks.get(name)
        return held[0] if held is not None and held[1] > self._clock() else None

    # counters

    async def _incr(self, name: str, by: int) -> int:
        value = self._data.counters.get(name, 0) + by
        self._data.counters[name] = value
        await self._changed(durable=True)
        return value

    async def _counter(self, name: str) -> int:
        return self._data.counters.get(name, 0)

    # persistence

    async def _changed(self, *, durable: bool) -> None:
        """Record a change made (synchronously, so atomically) by the caller; wait for the disk if durable."""
        self._gen += 1
        if durable and self.path is not None:
            await self._write_through(self._gen)

    async def _write_through(self, gen: int) -> None:
        """Every change up to generation ``gen`` on disk. Callers share writes (group commit): one joins the write
        under way, which carries every change made before it began, or the next one, begun once that ends. The write
        runs as a task of its own: a cancelled caller must not cancel a write half-way (the others wait for it)."""
        while self._written_gen < gen:
            if self._writing is None:
                carries: list[int] = []
                task = asyncio.create_task(self._write(carries))
                self._writing = (task, carries)
                self._writes.add(task)
                task.add_done_callback(_forget(self._writes))
            task, carries = self._writing
            try:
                await asyncio.shield(task)
            except Unavailable:
                if carries and carries[0] >= gen:
                    raise  # the write that carried this change failed
                # it failed before this change: the next write carries it

    async def _write(self, carries: list[int]) -> None:
        assert self.path is not None
        try:
            target = self._gen
            carries.append(target)
            snapshot = _to_disk(self._data, self._clock)
            if self._writer is None:
                self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="state-file")
            try:
                await asyncio.get_running_loop().run_in_executor(self._writer, write_file, self.path, snapshot)
            except OSError as e:
                raise Unavailable(f"cannot write the state file {self.path}: {e}") from e
            self._written_gen = max(self._written_gen, target)
        finally:
            self._writing = None

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self._flush_interval)
            if self._gen > self._written_gen:
                try:
                    await self._write_through(self._gen)
                except Unavailable as e:
                    self._log.warning("state store: %s; retrying in %.2fs", e, self._flush_interval)

    async def flush(self) -> None:
        """Write every change so far to disk now."""
        self._check_open()
        if self.path is not None and self._gen > self._written_gen:
            await self._write_through(self._gen)

    async def _close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        try:
            if self.path is not None and self._gen > self._written_gen:
                await self._write_through(self._gen)
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=False)  # idle: every write was awaited above
                self._writer = None
            if self._lock_fd is not None:
                await asyncio.to_thread(os.close, self._lock_fd)
                self._lock_fd = None


def _forget(tasks: set[asyncio.Task[None]]) -> Any:
    def done(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here too, so an abandoned write's error is not reported twice

    return done


def _to_disk(data: _State, clock: Callable[[], float]) -> Snapshot:
    """A copy the writer thread can own (documents are immutable tuples of a string and an int: shallow copies
    are enough). Lock expiry becomes wall-clock time; lapsed locks are left out."""
    now_mono, now_wall = clock(), time.time()
    return Snapshot(
        documents={c: dict(docs) for c, docs in data.documents.items()},
        queues={q: list(items) for q, items in data.queues.items()},
        locks={
            name: {"owner": owner, "expires_at": now_wall + (expiry - now_mono)}
            for name, (owner, expiry) in data.locks.items()
            if expiry > now_mono
        },
        counters=dict(data.counters),
        last_version=data.last_version,
    )


def _from_disk(snapshot: Snapshot, clock: Callable[[], float]) -> _State:
    now_mono, now_wall = clock(), time.time()
    return _State(
        documents=snapshot.documents,
        queues={q: deque(items) for q, items in snapshot.queues.items() if items},
        locks={n: (lock["owner"], now_mono + (lock["expires_at"] - now_wall)) for n, lock in snapshot.locks.items()},
        counters=snapshot.counters,
        last_version=snapshot.last_version,
    )
