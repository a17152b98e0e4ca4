"""Small asyncio helpers shared by the layers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def settled(call: Awaitable[T]) -> T:
    """Await ``call`` to its end even if the caller is cancelled meanwhile, then pass the cancellation on.

    For work whose result must not be lost: a container a worker thread is creating (a thread cannot be
    stopped, so a cancelled await would let the container appear after the caller's clean-up looked for it),
    or the step that hands a new instance to its owner."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        raise


def raise_if_cancelled() -> None:
    """Raise ``CancelledError`` if the current task was asked to stop, even though every await it made returned.

    A cancellation can be lost on the way (``asyncio.wait_for`` in Python 3.11 drops one that arrives as its
    inner await completes; so can libraries). Work that must not be handed to a caller that stopped waiting
    (a started instance) checks this before returning it, so its clean-up path runs instead."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
