"""The one way tests wait for a state change: poll a check until it holds or a deadline passes, then fail
naming what did not happen. Never a fixed sleep before an assertion."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

POLL_S = 0.1


async def eventually(check: Callable[[], Awaitable[object] | object], within: float, what: str) -> float:
    """Await until ``check()`` (sync or async) is truthy; returns the seconds it took."""
    started = time.monotonic()
    while True:
        outcome = check()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return time.monotonic() - started
        if time.monotonic() - started > within:
            raise AssertionError(f"{what} did not happen within {within:g} s")
        await asyncio.sleep(POLL_S)


def wait_until(check: Callable[[], bool], within: float, what: str) -> float:
    """The blocking twin of ``eventually``, for synchronous tests."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within:
            raise AssertionError(f"{what} did not happen within {within:g} s")
        time.sleep(POLL_S)
    return time.monotonic() - started
