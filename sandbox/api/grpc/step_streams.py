"""The StepStream calls a server is serving, so that a stopping server ends at once those waiting for a step.

The SDK keeps a stream open per sandbox handle (a message on an open stream costs gRPC about half of what a unary
call does), so most streams are idle when the server stops. gRPC's graceful stop would wait out its whole grace
for each of them; ended here between two steps, they close with an OK status and the SDK opens a new one (on
another replica, or on this server once it is back) for its next step. A step already running finishes first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


class StepStreams:
    def __init__(self) -> None:
        self._waiting: set[asyncio.Task[object]] = set()
        self.ending = False

    async def next_request(self, requests: AsyncIterator[T]) -> T | None:
        """The stream's next request; None once the caller ended it or the server is stopping."""
        task = asyncio.current_task()
        if self.ending or task is None:
            return None
        self._waiting.add(task)
        try:
            return await anext(requests)
        except StopAsyncIteration:
            return None
        except asyncio.CancelledError:
            if not self.ending:
                raise
            task.uncancel()  # our own cancellation (end()): the stream closes cleanly
            return None
        finally:
            self._waiting.discard(task)

    def end(self) -> None:
        """From now on every stream ends before its next step; those waiting for one end now."""
        self.ending = True
        for task in list(self._waiting):
            task.cancel()
