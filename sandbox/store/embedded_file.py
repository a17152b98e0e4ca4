"""The embedded store's state file: its format, and reading and replacing it safely.

The file (``"version": 1``)::

    {"version": 1,
     "documents": {collection: {key: doc}},
     "versions": {collection: {key: int}},      # every document's version
     "last_version": int,                       # the store-wide version counter (>= every version)
     "queues": {queue: [item]},
     "locks": {name: {"owner": str, "expires_at": unix time}},
     "counters": {name: int}}

``versions`` and ``last_version`` were added without changing the format number: a file written before them
(no ``versions``) still loads, and its documents get versions 1, 2, … in file order (the same ones each time it
is loaded, until the next write stores them); code that predates them ignores the two keys.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from sandbox.errors import FailedPrecondition, InvalidArgument
from sandbox.store.base import MAX_VERSION, encode_document

FORMAT_VERSION = 1


@dataclass
class Snapshot:
    """The file's content: documents as (JSON text, version); lock expiry as unix time."""

    documents: dict[str, dict[str, tuple[str, int]]]
    queues: dict[str, list[str]]
    locks: dict[str, dict[str, Any]]
    counters: dict[str, int]
    last_version: int = 0


def empty() -> Snapshot:
    return Snapshot({}, {}, {}, {})


def render(snapshot: Snapshot) -> bytes:
    dumps = json.dumps
    collections = ",".join(
        dumps(c) + ":{" + ",".join(dumps(k) + ":" + text for k, (text, _) in docs.items()) + "}"
        for c, docs in snapshot.documents.items()
    )
    versions = {c: {k: version for k, (_, version) in docs.items()} for c, docs in snapshot.documents.items()}
    return (
        f'{{"version":{FORMAT_VERSION},"documents":{{{collections}}},"versions":{dumps(versions)},'
        f'"last_version":{snapshot.last_version},"queues":{dumps(snapshot.queues)},'
        f'"locks":{dumps(snapshot.locks)},"counters":{dumps(snapshot.counters)}}}\n'
    ).encode()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse(raw: bytes) -> Snapshot:
    """The file's content, checked; ValueError if it is not a state file this code (or its predecessor) wrote."""
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} state file")
    parts = ("documents", "versions", "queues", "locks", "counters")
    documents, versions, queues, locks, counters = (data.get(k, {}) for k in parts)
    if not all(isinstance(part, dict) for part in (documents, versions, queues, locks, counters)):
        raise ValueError("documents, versions, queues, locks and counters must be objects")
    last_version = data.get("last_version", 0)
    if not _is_int(last_version) or not 0 <= last_version <= MAX_VERSION:
        raise ValueError(f"last_version must be an int in [0, {MAX_VERSION}], got {last_version!r}")
    snapshot = empty()
    unversioned: list[tuple[str, str, str]] = []
    for collection, docs in documents.items():
        if not isinstance(docs, dict):
            raise ValueError(f"collection {collection!r} is not an object")
        known = versions.get(collection, {})
        if not isinstance(known, dict):
            raise ValueError(f"versions of collection {collection!r} are not an object")
        texts = snapshot.documents[collection] = {}
        for key, doc in docs.items():
            text = encode_document(doc)
            if key not in known:
                unversioned.append((collection, key, text))
                continue
            version = known[key]
            if not _is_int(version) or not 1 <= version <= last_version:
                raise ValueError(f"document {collection}/{key} has version {version!r}, not in [1, {last_version}]")
            texts[key] = (text, version)
    for collection, known in versions.items():
        if not isinstance(known, dict):
            raise ValueError(f"versions of collection {collection!r} are not an object")
        stray = set(known) - set(documents.get(collection, {}))
        if stray:
            raise ValueError(f"versions of collection {collection!r} name documents it does not hold: {sorted(stray)}")
    for collection, key, text in unversioned:  # written by a build without versions: fresh ones
        last_version += 1
        snapshot.documents[collection][key] = (text, last_version)
    snapshot.last_version = last_version
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
        if not _is_int(value):
            raise ValueError(f"counter {name!r} is not an integer")
        snapshot.counters[name] = value
    return snapshot


def open_file(path: str, reset_corrupt: bool, logger: logging.Logger) -> tuple[int, Snapshot]:
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
            return lock_fd, empty()
        try:
            return lock_fd, parse(raw)
        except (ValueError, InvalidArgument) as e:
            if not reset_corrupt:
                raise FailedPrecondition(
                    f"state file {path} is corrupt ({e}); fix or remove it, or start with reset_corrupt=True "
                    f"to move it aside as {path}.corrupt-<time> and start empty"
                ) from e
            aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            os.replace(path, aside)
            logger.error("state file %s is corrupt (%s); moved it to %s and started empty", path, e, aside)
            return lock_fd, empty()
    except BaseException:
        os.close(lock_fd)
        raise


def write_file(path: str, snapshot: Snapshot) -> None:
    """Replace the file atomically and durably (in a worker thread)."""
    data = render(snapshot)
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
