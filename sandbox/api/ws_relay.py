"""The tear-down shared by the websocket relays (VNC, previews): two pumps, one each way, run until either ends;
then both stop, the tunnel closes and the caller's websocket closes with the code the relay chose."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

Pump = Coroutine[Any, Any, None]


async def run_both_ways(
    upstream: Pump,
    downstream: Pump,
    *,
    websocket: WebSocket,
    writer: asyncio.StreamWriter,
    logger: logging.Logger,
    what: str,
    close_with: Callable[[], tuple[int, str]] | None = None,
) -> None:
    """Run ``upstream`` and ``downstream`` until the first ends; a failure other than a hang-up is logged as
    ``what``. ``close_with`` gives the websocket's close code and reason once the pumps are done."""
    tasks = [asyncio.create_task(upstream), asyncio.create_task(downstream)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            if error is not None and not isinstance(error, WebSocketDisconnect | ConnectionError):
                logger.warning("%s failed: %r", what, error)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        with contextlib.suppress(Exception):
            if close_with is None:
                await websocket.close()
            else:
                code, reason = close_with()
                await websocket.close(code, reason[:120])
