"""Claim files written in batches: one worker-thread hop carries every claim set or removed since the last one.

A burst of creates sets one claim per sandbox; a thread hop each (the file write, the hand-off and the wake-up of
the event loop) queued 64 hops behind each other and took CPU from the claims themselves. Here the changes made
while a batch is on disk wait for the next batch, applied in the order of the batches, so the last change of an
instance's claim is the one left on disk (a removal after a write removes it). Each caller still returns only
once its change is on disk, or with the batch's ``OSError``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sandbox.backends.docker import claims as claim_files

_Change = dict[str, Any] | None
"""A claim to write, or None to remove the instance's claim."""


class ClaimWriter:
    def __init__(self, socket_root: str) -> None:
        self._root = socket_root
        self._pending: dict[str, _Change] = {}
        self._pending_done: asyncio.Future[None] | None = None
        self._drainer: asyncio.Task[None] | None = None

    async def write(self, instance_id: str, claim: dict[str, Any]) -> None:
        await self._change(instance_id, claim)

    async def remove(self, instance_id: str) -> None:
        await self._change(instance_id, None)

    async def _change(self, instance_id: str, change: _Change) -> None:
        self._pending[instance_id] = change
        if self._pending_done is None:
            self._pending_done = asyncio.get_running_loop().create_future()
            self._pending_done.add_done_callback(_retrieve)  # every waiter may have been cancelled
        done = self._pending_done
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        await asyncio.shield(done)  # a cancelled caller leaves the batch to the others

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, {}
                done, self._pending_done = self._pending_done, None
                assert done is not None
                try:
                    await asyncio.to_thread(_apply, self._root, batch)
                except OSError as e:
                    done.set_exception(e)
                except BaseException as e:
                    done.set_exception(OSError(f"claim files not written: {e!r}"))
                    raise
                else:
                    done.set_result(None)
        finally:
            self._drainer = None
            if self._pending_done is not None and not self._pending_done.done():  # the drain was cancelled
                self._pending_done.set_exception(OSError("claim files not written: the writer was stopped"))
                self._pending, self._pending_done = {}, None


def _apply(socket_root: str, batch: dict[str, _Change]) -> None:
    """Write and remove the batch's claims; the first failure is raised once every other change was tried."""
    failure: OSError | None = None
    for instance_id, change in batch.items():
        try:
            if change is None:
                claim_files.remove_claim(socket_root, instance_id)
            else:
                claim_files.write_claim(socket_root, instance_id, change)
        except OSError as e:
            failure = failure or e
    if failure is not None:
        raise failure


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
