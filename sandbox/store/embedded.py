"""The embedded store: state in this process, persisted to ONE JSON file.

Open it with ``store = await EmbeddedStore.open(path, logger=...)`` (loads the file, takes its lock, starts the
flusher) and end with ``await store.close()`` (final flush, releases the lock).

Durability. Every change bumps a generation number; the file is rewritten whole (temp file, fsync, ``os.replace``,
fsync of the directory, in a worker thread) by one writer at a time, so the file is always a complete old or new
state, even after ``kill -9`` or a power cut. These calls return only once their change is on disk: ``put``
(``durable=True``), ``put_if_absent``, ``delete``, ``push``, ``pop``, ``remove``, ``incr``; concurrent ones share
one write (group commit). ``put(durable=False)``, ``try_lock`` and ``unlock`` are flushed by a background task
within ``flush_interval`` — a crash may lose them (locks are leases: they lapse anyway). Locks are stored with
their wall-clock expiry, so a restart keeps a lease until it would have run out.

One process per file: ``<path>.lock`` is held (``flock``) while the store is open; a second store on the same
file fails clearly instead of silently overwriting the first one's writes. Share state between processes or
replicas with Redis. A corrupt file raises ``FailedPrecondition`` naming it; with ``reset_corrupt=True`` it is
moved aside to ``<path>.corrupt-<UTC time>`` and the store starts empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sandbox.errors import FailedPrecondition, InvalidArgument, Unavailable
from sandbox.store.base import Store, StoreState, decode_document, encode_document

FORMAT_VERSION = 1


@dataclass
class _State:
    documents: dict[str, dict[str, str]] = field(default_factory=dict)  # JSON text per document
    queues: dict[str, deque[str]] = field(default_factory=dict)
    locks: dict[str, tuple[str, float]] = field(default_factory=dict)  # owner, expiry (wall clock on disk)
    counters: dict[str, int] = field(default_factory=dict)


class EmbeddedStore(Store):
    """State of one control plane, in memory and in the JSON file at ``path`` (``None``: memory only)."""

    def __init__(
        self,
        path: str | None,
        *,
        flush_interval: float = 0.5,
        reset_corrupt: bool = False,
        logger: logging.Logger,
    ) -> None:
        super().__init__()
        if flush_interval <= 0:
            raise InvalidArgument(f"flush_interval must be positive, got {flush_interval}")
        self.path = os.path.abspath(os.path.expanduser(path)) if path is not None else None
        self._flush_interval = flush_interval
        self._reset_corrupt = reset_corrupt
        self._log = logger
        self._data = _State()  # locks here hold monotonic expiry
        self._gen = 0  # bumped by every change
        self._written_gen = 0  # the newest generation on disk
        self._write_lock = asyncio.Lock()  # one writer of the file at a time
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
    ) -> EmbeddedStore:
        """Load the state file (a missing one is an empty state) and start the background flusher."""
        store = cls(path, flush_interval=flush_interval, reset_corrupt=reset_corrupt, logger=logger)
        if store.path is not None:
            store._lock_fd, loaded = await asyncio.to_thread(_open_file, store.path, reset_corrupt, logger)
            store._data = _from_disk(loaded)
            store._flusher = asyncio.create_task(store._flush_loop(), name=f"store-flush:{store.path}")
        store._state = StoreState.OPEN
        return store

    # documents

    async def _get(self, collection: str, key: str) -> dict[str, Any] | None:
        text = self._data.documents.get(collection, {}).get(key)
        return None if text is None else decode_document(text, f"{collection}/{key}")

    async def _put(self, collection: str, key: str, text: str, *, durable: bool) -> None:
        self._data.documents.setdefault(collection, {})[key] = text
        await self._changed(durable=durable)

    async def _put_if_absent(self, collection: str, key: str, text: str) -> bool:
        docs = self._data.documents.setdefault(collection, {})
        if key in docs:
            return False
        docs[key] = text
        await self._changed(durable=True)
        return True

    async def _delete(self, collection: str, key: str) -> bool:
        docs = self._data.documents.get(collection)
        if docs is None or docs.pop(key, None) is None:
            return False
        if not docs:
            del self._data.documents[collection]
        await self._changed(durable=True)
        return True

    async def _all(self, collection: str) -> dict[str, dict[str, Any]]:
        docs = self._data.documents.get(collection, {})
        return {key: decode_document(text, f"{collection}/{key}") for key, text in docs.items()}

    # queues

    async def _push(self, queue: str, item: str) -> None:
        self._data.queues.setdefault(queue, deque()).append(item)
        await self._changed(durable=True)

    async def _pop(self, queue: str) -> str | None:
        items = self._data.queues.get(queue)
        if not items:
            return None
        item = items.popleft()
        if not items:
            del self._data.queues[queue]
        await self._changed(durable=True)
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
        now = time.monotonic()
        held = self._data.locks.get(name)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        self._data.locks[name] = (owner, now + ttl_s)
        await self._changed(durable=False)
        return True

    async def _unlock(self, name: str, owner: str) -> bool:
        held = self._data.locks.get(name)
        if held is None or held[0] != owner or held[1] <= time.monotonic():
            return False
        del self._data.locks[name]
        await self._changed(durable=False)
        return True

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
        # The write runs as its own task: a cancelled caller must not cancel a write half-way and let a second
        # writer start on the same temp file.
        task = asyncio.create_task(self._write(gen))
        self._writes.add(task)
        task.add_done_callback(_forget(self._writes))
        await asyncio.shield(task)

    async def _write(self, gen: int) -> None:
        assert self.path is not None
        async with self._write_lock:
            if self._written_gen >= gen:
                return  # a write that began after this change already carried it
            target = self._gen
            snapshot = _to_disk(self._data)
            try:
                await asyncio.to_thread(_write_file, self.path, snapshot)
            except OSError as e:
                raise Unavailable(f"cannot write the state file {self.path}: {e}") from e
            self._written_gen = max(self._written_gen, target)

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
            if self._lock_fd is not None:
                await asyncio.to_thread(os.close, self._lock_fd)
                self._lock_fd = None


def _forget(tasks: set[asyncio.Task[None]]) -> Any:
    def done(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here too, so an abandoned write's error is not reported twice

    return done


# the file: {"version": 1, "documents": {collection: {key: doc}}, "queues": {queue: [item]},
#            "locks": {name: {"owner": str, "expires_at": unix time}}, "counters": {name: int}}


@dataclass
class _Snapshot:
    documents: dict[str, dict[str, str]]
    queues: dict[str, list[str]]
    locks: dict[str, dict[str, Any]]
    counters: dict[str, int]


def _to_disk(data: _State) -> _Snapshot:
    """A copy the writer thread can own (documents are immutable strings: shallow copies are enough)."""
    now_mono, now_wall = time.monotonic(), time.time()
    return _Snapshot(
        documents={c: dict(docs) for c, docs in data.documents.items()},
        queues={q: list(items) for q, items in data.queues.items()},
        locks={
            name: {"owner": owner, "expires_at": now_wall + (expiry - now_mono)}
            for name, (owner, expiry) in data.locks.items()
            if expiry > now_mono
        },
        counters=dict(data.counters),
    )


def _from_disk(snapshot: _Snapshot) -> _State:
    now_mono, now_wall = time.monotonic(), time.time()
    return _State(
        documents=snapshot.documents,
        queues={q: deque(items) for q, items in snapshot.queues.items() if items},
        locks={n: (lock["owner"], now_mono + (lock["expires_at"] - now_wall)) for n, lock in snapshot.locks.items()},
        counters=snapshot.counters,
    )


def _render(snapshot: _Snapshot) -> bytes:
    dumps = json.dumps
    collections = ",".join(
        dumps(c) + ":{" + ",".join(dumps(k) + ":" + text for k, text in docs.items()) + "}"
        for c, docs in snapshot.documents.items()
    )
    return (
        f'{{"version":{FORMAT_VERSION},"documents":{{{collections}}},"queues":{dumps(snapshot.queues)},'
        f'"locks":{dumps(snapshot.locks)},"counters":{dumps(snapshot.counters)}}}\n'
    ).encode()


def _parse(raw: bytes) -> _Snapshot:
    """The file's content, checked; ValueError if it is not a state file this code wrote."""
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} state file")
    documents, queues, locks, counters = (data.get(k, {}) for k in ("documents", "queues", "locks", "counters"))
    if not all(isinstance(part, dict) for part in (documents, queues, locks, counters)):
        raise ValueError("documents, queues, locks and counters must be objects")
    snapshot = _Snapshot({}, {}, {}, {})
    for collection, docs in documents.items():
        if not isinstance(docs, dict):
            raise ValueError(f"collection {collection!r} is not an object")
        snapshot.documents[collection] = {key: encode_document(doc) for key, doc in docs.items()}
    for queue, items in queues.items():
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"queue {queue!r} is not a list of strings")
        snapshot.queues[queue] = items
    for name, lock in locks.items():
        if not (isinstance(lock, dict) and isinstance(lock.get("owner"), str)):
            raise ValueError(f"lock {name!r} has no owner")
        if isinstance(lock.get("expires_at"), bool) or not isinstance(lock.get("expires_at"), int | float):
            raise ValueError(f"lock {name!r} has no expiry")
        snapshot.locks[name] = lock
    for name, value in counters.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"counter {name!r} is not an integer")
        snapshot.counters[name] = value
    return snapshot


def _open_file(path: str, reset_corrupt: bool, logger: logging.Logger) -> tuple[int, _Snapshot]:
    """Take ``<path>.lock`` and read the state (in a worker thread). Returns the lock's fd and the state."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise FailedPrecondition(
                f"state file {path} is in use by another store ({path}.lock is held); "
                "one process per state file — share state between processes with Redis"
            ) from e
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return lock_fd, _Snapshot({}, {}, {}, {})
        try:
            return lock_fd, _parse(raw)
        except (ValueError, InvalidArgument) as e:
            if not reset_corrupt:
                raise FailedPrecondition(
                    f"state file {path} is corrupt ({e}); fix or remove it, or start with reset_corrupt=True "
                    f"to move it aside as {path}.corrupt-<time> and start empty"
                ) from e
            aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            os.replace(path, aside)
            logger.error("state file %s is corrupt (%s); moved it to %s and started empty", path, e, aside)
            return lock_fd, _Snapshot({}, {}, {}, {})
    except BaseException:
        os.close(lock_fd)
        raise


def _write_file(path: str, snapshot: _Snapshot) -> None:
    """Replace the file atomically and durably (in a worker thread)."""
    data = _render(snapshot)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
