"""Concurrent creates of one spec from one ``AsyncClient``, sent as one call.

A rollout that starts its environments with ``asyncio.gather(*(client.create("terminal") for _ in range(64)))``
makes 64 calls, and on a small control plane most of each is gRPC's own work per call, in the server and in the
client. The creates such a program starts in the same turn of the event loop, of the same spec and without a wait for
capacity, go instead as one ``CreateSandboxes`` call with ``each`` set: each sandbox admitted and made on its own,
exactly as its own call would be (not all or none, as ``create_group`` is), and each caller gets its own sandbox or
its own error. A single create is sent as itself. A caller cancelled while its create is in flight does not get a
sandbox, and nobody keeps one: the one made for it is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sandbox.errors import SandboxError
from sandbox.models import GROUP_MAX, SandboxInfo, SandboxSpec

Each = Callable[[int, SandboxSpec], Awaitable[list[SandboxInfo | SandboxError]]]
One = Callable[[SandboxSpec], Awaitable[SandboxInfo]]
Delete = Callable[[str], Awaitable[None]]


@dataclass
class _Batch:
    spec: SandboxSpec
    waiters: list[asyncio.Future[SandboxInfo]] = field(default_factory=list)


class CreateCoalescer:
    def __init__(self, *, each: Each, one: One, delete: Delete) -> None:
        self._each = each
        self._one = one
        self._delete = delete
        self._pending: dict[str, _Batch] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        """``spec``'s sandbox, made in one call with the other creates of the same spec this turn of the loop."""
        loop = asyncio.get_running_loop()
        key = spec.model_dump_json()
        batch = self._pending.get(key)
        if batch is None:
            batch = self._pending[key] = _Batch(spec)
            loop.call_soon(self._flush, key)  # after the other tasks this turn have asked
        waiter: asyncio.Future[SandboxInfo] = loop.create_future()
        batch.waiters.append(waiter)
        return await waiter

    def _flush(self, key: str) -> None:
        batch = self._pending.pop(key)
        for start in range(0, len(batch.waiters), GROUP_MAX):
            waiters = batch.waiters[start : start + GROUP_MAX]
            task = asyncio.ensure_future(self._send(batch.spec, waiters))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, spec: SandboxSpec, waiters: list[asyncio.Future[SandboxInfo]]) -> None:
        try:
            if len(waiters) == 1:
                made: list[SandboxInfo | SandboxError] = [await self._one(spec)]
            else:
                made = await self._each(len(waiters), spec)
        except Exception as e:  # the whole call failed: each caller gets its error
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(e)
            return
        except BaseException:  # the client is closing
            for waiter in waiters:
                waiter.cancel()
            raise
        for waiter, outcome in zip(waiters, made, strict=True):
            if isinstance(outcome, SandboxError):
                if not waiter.done():
                    waiter.set_exception(outcome)
            elif waiter.done():  # its caller gave up: the sandbox is nobody's
                await self._forget(outcome)
            else:
                waiter.set_result(outcome)

    async def _forget(self, info: SandboxInfo) -> None:
        try:
            await self._delete(info.id)
        except SandboxError as e:
            logging.getLogger(__name__).warning("could not delete %s, made for a cancelled create: %s", info.id, e)

    async def close(self) -> None:
        """Wait for the calls in flight (their sandboxes are handed out or deleted)."""
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
