"""A websocket ↔ VNC byte pump for noVNC, and the filter that makes a view-only session view-only.

noVNC speaks RFB (RFC 6143) inside binary websocket frames; the pump carries those bytes to the
sandbox's x11vnc through the agent's tunnel and back. When the viewer may not drive the sandbox,
the client→server stream is parsed message by message and every input message is dropped here,
on the server: what the page claims about itself is never trusted. A stream the parser cannot
follow is cut off rather than passed through.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.websockets import WebSocket

from sandbox.api.ws_relay import run_both_ways

CHUNK_BYTES = 1 << 16
WS_NORMAL = 1000
WS_UNSUPPORTED_DATA = 1003
WS_POLICY_VIOLATION = 1008
WS_INTERNAL_ERROR = 1011

_VERSIONS = (b"RFB 003.007\n", b"RFB 003.008\n")
_SECURITY_NONE, _SECURITY_VNC_AUTH = 1, 2
_VNC_AUTH_RESPONSE = 16

# Client message types (RFC 6143 §7.5 and the registered extensions noVNC sends).
SET_PIXEL_FORMAT, SET_ENCODINGS, FRAMEBUFFER_UPDATE_REQUEST = 0, 2, 3
KEY_EVENT, POINTER_EVENT, CLIENT_CUT_TEXT = 4, 5, 6
ENABLE_CONTINUOUS_UPDATES, CLIENT_FENCE, XVP, SET_DESKTOP_SIZE, QEMU = 150, 248, 250, 251, 255
INPUT_MESSAGES = frozenset({KEY_EVENT, POINTER_EVENT, CLIENT_CUT_TEXT, XVP, SET_DESKTOP_SIZE, QEMU})
"""Everything that changes the sandbox: keys, pointer, clipboard, power (XVP), screen size, QEMU keys."""


class RfbViolation(Exception):
    """The client sent something a view-only session cannot follow or allow."""


class ViewOnlyFilter:
    """Passes the client's handshake and display requests; drops its input messages.

    ``feed`` takes bytes as they arrive (any split) and returns the bytes to forward.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._stage = "version"
        self._remaining = 0
        self._forward = True
        self.dropped = 0
        """How many input messages were dropped so far."""

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = bytearray()
        while self._buf:
            if self._remaining:
                take = min(self._remaining, len(self._buf))
                if self._forward:
                    out += self._buf[:take]
                del self._buf[:take]
                self._remaining -= take
                continue
            size = self._next_size()
            if size is None:
                break
            self._remaining = size
        return bytes(out)

    def _next_size(self) -> int | None:
        """Length of the next unit when its header is complete, setting whether to forward it."""
        buf, self._forward = self._buf, True
        if self._stage == "version":
            if len(buf) < 12:
                return None
            if bytes(buf[:12]) not in _VERSIONS:
                raise RfbViolation(f"unsupported RFB version {bytes(buf[:12])!r} (3.7 or 3.8 only)")
            self._stage = "security"
            return 12
        if self._stage == "security":
            if buf[0] == _SECURITY_NONE:
                self._stage = "client-init"
            elif buf[0] == _SECURITY_VNC_AUTH:
                self._stage = "vnc-auth"
            else:
                raise RfbViolation(f"security type {buf[0]} is not supported in a view-only session")
            return 1
        if self._stage == "vnc-auth":
            self._stage = "client-init"
            return _VNC_AUTH_RESPONSE
        if self._stage == "client-init":
            self._stage = "messages"
            return 1
        return self._message_size()

    def _message_size(self) -> int | None:
        buf = self._buf
        kind = buf[0]
        size: int | None
        if kind == SET_PIXEL_FORMAT:
            size = 20
        elif kind == SET_ENCODINGS:
            size = 4 + 4 * int.from_bytes(buf[2:4], "big") if len(buf) >= 4 else None
        elif kind in (FRAMEBUFFER_UPDATE_REQUEST, ENABLE_CONTINUOUS_UPDATES):
            size = 10
        elif kind == KEY_EVENT:
            size = 8
        elif kind == POINTER_EVENT:
            size = 6
        elif kind == CLIENT_CUT_TEXT:  # a negative length is the extended-clipboard form
            size = 8 + abs(int.from_bytes(buf[4:8], "big", signed=True)) if len(buf) >= 8 else None
        elif kind == CLIENT_FENCE:
            size = 9 + buf[8] if len(buf) >= 9 else None
        elif kind == XVP:
            size = 4
        elif kind == SET_DESKTOP_SIZE:
            size = 8 + 16 * buf[6] if len(buf) >= 8 else None
        elif kind == QEMU:
            if len(buf) < 2:
                return None
            if buf[1] != 0:
                raise RfbViolation(f"QEMU client message subtype {buf[1]} is not supported")
            size = 12
        else:
            raise RfbViolation(f"unknown RFB client message type {kind}")
        if size is not None and kind in INPUT_MESSAGES:
            self._forward = False
            self.dropped += 1
        return size


async def pump(
    websocket: WebSocket,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    view_only: bool,
    logger: logging.Logger,
    label: str,
) -> None:
    """Carry RFB both ways until either side ends; then close both. ``websocket`` is accepted."""
    gate = ViewOnlyFilter() if view_only else None
    close_code, reason = WS_NORMAL, "the VNC session ended"

    async def upstream() -> None:
        nonlocal close_code, reason
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is None:
                close_code, reason = WS_UNSUPPORTED_DATA, "RFB travels in binary frames"
                return
            if gate is not None:
                try:
                    data = gate.feed(data)
                except RfbViolation as e:
                    close_code, reason = WS_POLICY_VIOLATION, str(e)
                    return
            if data:
                writer.write(data)
                await writer.drain()

    async def downstream() -> None:
        while data := await reader.read(CHUNK_BYTES):
            await websocket.send_bytes(data)

    await run_both_ways(
        upstream(),
        downstream(),
        websocket=websocket,
        writer=writer,
        logger=logger,
        what=f"VNC proxy of {label}",
        close_with=lambda: (close_code, reason),
    )
    if gate is not None and gate.dropped:
        logger.info("view-only VNC session of %s: dropped %d input messages", label, gate.dropped)
