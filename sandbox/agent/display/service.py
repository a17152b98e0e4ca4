"""``Display``: what the agent's ops call to drive the sandbox's X server (screenshots, actions, health probes).

python-xlib is blocking and its connection is not meant to be shared between threads, so every X call runs
on one dedicated worker thread. Screenshot encoding runs on a separate small pool.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from Xlib import error as xerror

from sandbox.agent.display.actions import ACTIONS, MAX_WAIT_SECONDS
from sandbox.agent.display.arguments import int_arg
from sandbox.agent.display.encoders import JPEG_DEFAULT_QUALITY, PNG_BANDS, bgrx, encode_jpeg, encode_png, zstd
from sandbox.agent.display.frames import Compressed, FrameCache, PixelFrames, Take, Taken
from sandbox.agent.display.session import XSession
from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.protocol import ErrorCode

T = TypeVar("T")
FORMATS = ("png", "jpeg", "zstd")


class Display:
    def __init__(self, display_name: str, *, logger: logging.Logger) -> None:
        self._name = display_name
        self._log = logger
        self._x_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="x11")
        self._encoder = ThreadPoolExecutor(max_workers=PNG_BANDS, thread_name_prefix="screenshot-encode")
        self._frames = FrameCache(self._encoder)
        self._pixel_frames = PixelFrames()  # touched only on the X thread
        self._session: XSession | None = None  # touched only on the X thread
        self._closed = False

    async def screenshot(self, args: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        fmt = cast(str, require(args, "format", str, "png")).lower()
        if fmt == "jpg":
            fmt = "jpeg"
        if fmt not in FORMATS:
            raise bad_request(f"argument 'format' must be 'png', 'jpeg' or 'zstd', got {fmt!r}")
        quality = int_arg(args, "quality", 1, 100, JPEG_DEFAULT_QUALITY)
        region = require(args, "region", dict, None)
        started = time.perf_counter()
        if fmt == "png" and region is None:
            return await self._screen_png(started)
        if fmt == "zstd" and region is None:
            return await self._screen_zstd(started)
        image = await self._call(lambda s: s.capture(cast("dict[str, Any] | None", region)))
        captured = time.perf_counter()
        if fmt == "jpeg":
            data = await encode_jpeg(image, quality, self._encoder)
        elif fmt == "zstd":
            data = await asyncio.get_running_loop().run_in_executor(self._encoder, lambda: zstd(bgrx(image)))
        else:
            data = await encode_png(image, self._encoder)
        meta = {"width": image.width, "height": image.height, "format": fmt, **_timings(started, captured)}
        return meta, data

    async def _screen_png(self, started: float) -> tuple[dict[str, Any], bytes]:
        captured = started

        async def capture(take: Take, *, whole: bool, align: int) -> Taken:
            nonlocal captured
            taken = await self._call(lambda s: take(*s.screen_pixels(whole=whole, align=align)))
            captured = time.perf_counter()
            return taken

        encoded = await self._frames.png(capture)
        meta = {
            "width": encoded.width,
            "height": encoded.height,
            "format": "png",
            **_timings(started, captured),
            "bands": encoded.bands,
            "bands_reused": encoded.reused,
        }
        return meta, encoded.png

    async def _screen_zstd(self, started: float) -> tuple[dict[str, Any], bytes]:
        def take(s: XSession) -> tuple[Compressed, float]:
            return self._pixel_frames.take(s.screen_pixels), time.perf_counter()

        frame, captured = await self._call(take)
        meta = {
            "width": frame.width,
            "height": frame.height,
            "format": "zstd",
            # the X thread captures and compresses in one go: capture_ms holds both, as encode_ms the hand-back
            **_timings(started, captured),
            "reused": frame.reused,
        }
        return meta, frame.data

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        kind = action.get("type")
        if kind == "wait":
            seconds = require(action, "seconds", (int, float))
            if not 0 <= cast(float, seconds) <= MAX_WAIT_SECONDS:
                raise bad_request(f"argument 'seconds' must be between 0 and {MAX_WAIT_SECONDS:g}, got {seconds}")
            await asyncio.sleep(cast(float, seconds))
            return {"cursor": list(await self.cursor())}
        perform = ACTIONS.get(kind) if isinstance(kind, str) else None
        if perform is None:
            known = ", ".join(sorted([*ACTIONS, "wait"]))
            raise bad_request(f"unknown action type {kind!r}; known: {known}")
        # A deadline cancels the await, not the worker thread: the flag makes long actions stop early.
        stop = threading.Event()
        try:
            x, y = await self._call(lambda s: s.run(perform, action, stop))
        except asyncio.CancelledError:
            stop.set()
            raise
        return {"cursor": [x, y]}

    async def cursor(self) -> tuple[int, int]:
        return await self._call(lambda s: s.cursor())

    async def check(self) -> dict[str, Any]:
        try:
            detail = await self._call(lambda s: s.describe())
        except AgentError as e:
            return {"ok": False, "detail": e.message}
        return {"ok": True, "detail": detail}

    async def window_manager_check(self) -> dict[str, Any]:
        try:
            ok, detail = await self._call(lambda s: s.window_manager())
        except AgentError as e:
            return {"ok": False, "detail": e.message}
        return {"ok": ok, "detail": detail}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Runs after whatever the X thread is busy with; never blocks the caller.
        self._x_thread.submit(self._drop)
        self._x_thread.shutdown(wait=False)
        self._encoder.shutdown(wait=False)
        self._frames.forget()

    async def _call(self, fn: Callable[[XSession], T]) -> T:
        if self._closed:
            raise AgentError(ErrorCode.UNAVAILABLE, "the display has been closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._x_thread, self._on_x_thread, fn)

    def _on_x_thread(self, fn: Callable[[XSession], T]) -> T:
        if self._session is None:
            try:
                self._session = XSession(self._name)
            except (xerror.DisplayError, xerror.ConnectionClosedError, OSError) as e:
                raise AgentError(ErrorCode.UNAVAILABLE, f"cannot connect to X display {self._name}: {e}") from e
            self._log.info(
                "connected to X display %s (%dx%d, capture via %s)",
                self._name,
                self._session.width,
                self._session.height,
                self._session.capture_method,
            )
        try:
            return fn(self._session)
        except (xerror.ConnectionClosedError, OSError) as e:
            self._drop()
            raise AgentError(ErrorCode.UNAVAILABLE, f"lost the connection to X display {self._name}: {e}") from e

    def _drop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


def _timings(started: float, captured: float) -> dict[str, float]:
    return {
        "capture_ms": round((captured - started) * 1000, 3),
        "encode_ms": round((time.perf_counter() - captured) * 1000, 3),
    }
