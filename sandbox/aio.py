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
