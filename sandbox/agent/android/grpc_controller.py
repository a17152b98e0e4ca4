"""The emulator's gRPC controller (``-grpc PORT``): a screenshot in about 20 ms, against about 500 ms for
``adb exec-out screencap``, and touch and key events without a round trip through the guest's shell.

Uses grpcio (Debian's ``python3-grpcio`` in the android image) with generic unary calls and the messages of
``wire.py``: no generated stubs, no protobuf runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc  # the android image only (python3-grpcio); the other kinds never import this module

from sandbox.agent.android import wire

SWIPE_STEPS = 12
RPC_TIMEOUT_S = 10.0


def _same(data: bytes) -> bytes:
    return data


class GrpcController:
    """One channel to the emulator's controller at ``target`` (``127.0.0.1:8554``)."""

    def __init__(self, target: str, *, token: str | None = None) -> None:
        self.target = target
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._channel = grpc.aio.insecure_channel(target)
        self._ident = 0

    async def _call(self, method: str, request: bytes, timeout: float = RPC_TIMEOUT_S) -> bytes:
        rpc: Callable[..., Any] = self._channel.unary_unary(
            wire.SERVICE + method, request_serializer=_same, response_deserializer=_same
        )
        response: bytes = await rpc(request, timeout=timeout, metadata=self._metadata)
        return response

    async def status(self) -> dict[str, object]:
        return wire.parse_status(await self._call("getStatus", b""))

    async def screenshot(self) -> tuple[bytes, int, int]:
        """A PNG of the main display and its size."""
        pixels, width, height, _ = wire.parse_image(await self._call("getScreenshot", wire.image_format(wire.PNG)))
        if not pixels:
            raise RuntimeError("the emulator returned an empty screenshot (is the display visible?)")
        return pixels, width, height

    def _finger(self) -> int:
        self._ident = (self._ident + 1) % 10
        return self._ident

    async def touch(self, x: int, y: int, *, down: bool, ident: int) -> None:
        await self._call("sendTouch", wire.touch_event([(x, y, ident, 1 if down else 0)]))

    async def tap(self, x: int, y: int, hold_s: float = 0.0) -> None:
        ident = self._finger()
        await self.touch(x, y, down=True, ident=ident)
        if hold_s:
            await asyncio.sleep(hold_s)
        await self.touch(x, y, down=False, ident=ident)

    async def swipe(self, x0: int, y0: int, x1: int, y1: int, duration_s: float) -> None:
        ident = self._finger()
        await self.touch(x0, y0, down=True, ident=ident)
        try:
            for step in range(1, SWIPE_STEPS + 1):
                await asyncio.sleep(duration_s / SWIPE_STEPS)
                x, y = x0 + (x1 - x0) * step // SWIPE_STEPS, y0 + (y1 - y0) * step // SWIPE_STEPS
                await self.touch(x, y, down=True, ident=ident)
        finally:
            await self.touch(x1, y1, down=False, ident=ident)

    async def key(self, w3c_key: str) -> None:
        await self._call("sendKey", wire.keyboard_event(key=w3c_key))

    async def text(self, text: str) -> None:
        await self._call("sendKey", wire.keyboard_event(text=text))

    async def close(self) -> None:
        await self._channel.close()
