"""A sandbox's record in the store: read for a caller, written by compare-and-set, swapped one at a time, and the
agent of the instance it names. Every other part of the service reaches the store's sandbox records through this.

Every call names the principal it acts for; a sandbox of another tenant is reported exactly like a missing one, so
its existence does not leak. Records are written by compare-and-set on the version they were read at (``update``):
a write decided before an await can never undo one made meanwhile.

Also here, shared by the parts: ``timed`` (an operation's duration), ``_ids`` (a log line's fields) and the checks of
a sandbox's kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import Backend
from sandbox.errors import DeadlineExceeded, FailedPrecondition, NotFound, SandboxError, Unavailable
from sandbox.models import SandboxKind, SandboxState
from sandbox.observability.metrics import Metrics, note_kind
from sandbox.service.auth import Principal
from sandbox.service.parsed_records import ParsedTexts
from sandbox.service.records import EPOCH, META, SANDBOXES, SandboxRecord
from sandbox.store import Store

LOCK_TTL_S = 300.0


class Timed(Protocol):
    """What ``timed`` needs of the object whose method it times."""

    metrics: Metrics


P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S", bound=Timed)


Method = Callable[Concatenate[S, P], Awaitable[T]]


def timed(operation: str) -> Callable[[Method[S, P, T]], Method[S, P, T]]:
    """Time every call of the method in ``sandbox_operation_duration_seconds``; ``Records.find`` names the sandbox's
    kind."""

    def decorate(method: Method[S, P, T]) -> Method[S, P, T]:
        @functools.wraps(method)
        async def timed_call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            with self.metrics.operation(operation):
                return await method(self, *args, **kwargs)

        return timed_call

    return decorate


class Records:
    def __init__(self, *, backend: Backend, store: Store, replica: str, logger: logging.Logger) -> None:
        self.backend = backend
        self.store = store
        self.replica = replica
        """This control-plane process among the others sharing the store (it names the swap locks it holds)."""
        self._log = logger
        self.epoch: str | None = None
        """The store's epoch as this replica last saw it; see ``records.EPOCH``."""
        self._parsed = ParsedTexts()

    async def mark_epoch(self) -> None:
        """Mark a new store with an epoch (a store that later lacks it has lost its data), and note it."""
        await self.store.put_if_absent(META, EPOCH, {"id": secrets.token_hex(8), "created_at": time.time()})
        doc = await self.store.get(META, EPOCH)
        self.epoch = None if doc is None else str(doc.get("id"))

    async def read(self, sandbox_id: str) -> SandboxRecord | None:
        """The stored record with its version, whoever's it is; None when there is none. A copy the caller may
        change; parsed again only when the stored text changed (``parsed_records.ParsedTexts``)."""
        return self._parsed.parse(sandbox_id, await self.store.get_stored(SANDBOXES, sandbox_id))

    async def find(self, principal: Principal, sandbox_id: str, *, allow_expired: bool = False) -> SandboxRecord:
        """The record of a sandbox ``principal`` sees: ``NotFound`` (another tenant's too), ``Unavailable`` while a
        wiped store is adopted again, ``FailedPrecondition`` for an expired one unless ``allow_expired``."""
        record = await self.read(sandbox_id) if sandbox_id else None
        if record is None:
            if await self.store_was_wiped():
                raise Unavailable(
                    "the state store lost its records (did Redis restart empty?); the control plane is adopting "
                    "the running sandboxes again from the engine: retry in a few seconds"
                )
            raise NotFound(f"no sandbox {sandbox_id!r}")
        if not principal.can_see(record.tenant):
            raise NotFound(f"no sandbox {sandbox_id!r}")
        note_kind(record.spec.kind)
        if record.state is SandboxState.EXPIRED and not allow_expired:
            raise FailedPrecondition(f"sandbox {sandbox_id} {record.error}; create a new one")
        return record

    async def store_was_wiped(self) -> bool:
        """Whether the store lost the epoch this replica saw (its records are being adopted again)."""
        if self.epoch is None:
            return False
        doc = await self.store.get(META, EPOCH)
        if doc is None:
            return True
        self.epoch = str(doc.get("id"))  # adopted again meanwhile: this replica catches up
        return False

    async def insert(self, record: SandboxRecord) -> None:
        version = await self.store.put_if_version(SANDBOXES, record.id, record.model_dump(mode="json"), version=0)
        if version is None:
            raise FailedPrecondition(f"sandbox {record.id} exists already")
        record.version = version

    async def update(
        self, sandbox_id: str, change: Callable[[SandboxRecord], bool], *, durable: bool = True
    ) -> SandboxRecord | None:
        """Apply ``change`` to the stored record and write it by compare-and-set; on a conflict, read the record
        again and apply ``change`` to that. ``change`` returns False to leave the record as it is. Returns the
        record as written, or None when nothing was (the record is gone, or ``change`` declined)."""
        while True:
            record = await self.read(sandbox_id)
            if record is None or not change(record):
                return None
            doc = record.model_dump(mode="json")
            version = await self.store.put_if_version(
                SANDBOXES, sandbox_id, doc, version=record.version, durable=durable
            )
            if version is not None:
                record.version = version
                return record

    async def publish_claim(self, record: SandboxRecord) -> None:
        """Tell the engine side which lease holds the record's instance (best effort: only a wiped store reads it)."""
        try:
            await self.backend.set_claim(record.instance, record.claim())
        except (SandboxError, OSError) as e:
            self._log.warning("could not attach the claim of %s: %s", record.id, e, extra=_ids(record))

    @contextlib.asynccontextmanager
    async def exclusive(self, sandbox_id: str, wait_s: float = 120.0) -> AsyncIterator[None]:
        """One swap of a sandbox's instance at a time, across replicas."""
        lock, owner = f"sandbox:{sandbox_id}", f"{self.replica}:{secrets.token_hex(4)}"
        give_up = time.monotonic() + wait_s
        while not await self.store.try_lock(lock, owner, LOCK_TTL_S):
            if time.monotonic() > give_up:
                raise DeadlineExceeded(f"sandbox {sandbox_id} is busy (reset or recovery in progress)")
            await asyncio.sleep(0.05)
        try:
            yield
        finally:
            await self.store.unlock(lock, owner)

    def agent(self, record: SandboxRecord) -> AgentClient:
        """The agent of the instance ``record`` names; ``FailedPrecondition`` for an unhealthy sandbox."""
        if record.state is SandboxState.UNHEALTHY:
            raise FailedPrecondition(f"sandbox {record.id} is unhealthy: {record.error}")
        return self.backend.agent(record.instance)


def _ids(record: SandboxRecord) -> dict[str, str]:
    """The ``extra`` of a log line about a sandbox: structured logs carry these as fields."""
    return {
        "sandbox_id": record.id,
        "tenant": record.tenant,
        "kind": record.spec.kind.value,
        "instance": record.instance,
    }


def ms_since(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


def require_display(record: SandboxRecord) -> None:
    if not record.spec.kind.has_display:
        raise FailedPrecondition(f"sandbox {record.id} is a {record.spec.kind.value} sandbox with no display")


def require_kind(record: SandboxRecord, kind: SandboxKind, what: str) -> None:
    if record.spec.kind is not kind:
        raise FailedPrecondition(f"{what} needs a {kind.value} sandbox; {record.id} is {record.spec.kind.value}")
