"""Wire protocol between the control plane and the in-sandbox agent.

Standard library only: this module is copied into every sandbox image and runs under
the image's own python3, next to ``sandbox.agent``.

One frame is ``u32 header_len | u32 blob_len | header (JSON, UTF-8) | blob``. A request
header is ``{"op": str, "args": {...}, "deadline": float seconds}``; a response header is
``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": {"code": str, "message": str}}``.
Binary payloads (screenshots, file contents) travel in the blob, never base64 in JSON.

After a successful ``tunnel`` request the connection stops carrying frames and becomes a
raw byte pipe to a port inside the sandbox (VNC, DevTools).

The agent serves a unix socket (guarded by its directory's permissions: no handshake) and,
when asked, TCP. On TCP the first frame must be ``{"op": "hello", "args": {"token": str}}``
carrying the sandbox's secret; the agent answers ``{"ok": true, "result": {"protocol": N}}``
and then serves the connection like a unix one, or answers one ``unauthenticated`` error
frame and hangs up.

A direct lane (docs/lanes.md) lets an SDK step a sandbox without the control plane in the path. Its connections
reach the agent on the lane socket (next to the agent's, under Docker) or on TCP, and always open with
``{"op": "hello", "args": {"lane": ticket}}``, a ticket the control plane granted (``lane_grant``); such a
connection serves ``lane_step`` only, and the agent keeps what each step did for the control plane to read
(``lane_report``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

PROTOCOL_VERSION = 1
_PREFIX = struct.Struct(">II")
MAX_HEADER_BYTES = 4 * 1024 * 1024
MAX_BLOB_BYTES = 256 * 1024 * 1024
MAX_READ_BYTES = 128 * 1024 * 1024
"""The most one file read returns."""
AGENT_SOCKET_NAME = "agent.sock"
LANE_SOCKET_NAME = "lane.sock"
LANE_STEP_OP = "lane_step"
SOCKET_DIR_IN_SANDBOX = "/run/sandbox"
HELLO_OP = "hello"
LISTEN_ENV = "SANDBOX_AGENT_LISTEN"
"""``HOST:PORT`` the agent listens on over TCP (unset or empty: no TCP)."""
TOKEN_FILE_ENV = "SANDBOX_AGENT_TOKEN_FILE"
"""The file holding the secret a TCP peer must present in its hello."""


class FrameError(Exception):
    """A frame was malformed or broke a size limit."""

    def __init__(self, message: str, *, recoverable: bool = False) -> None:
        super().__init__(message)
        self.recoverable = recoverable
        """The oversized frame was read past: the stream is still in step."""


# Error codes the agent returns; the host maps them onto its own exception tree.
class ErrorCode:
    BAD_REQUEST = "bad_request"
    NOT_FOUND = "not_found"
    PERMISSION_DENIED = "permission_denied"
    TOO_LARGE = "too_large"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"
    UNAUTHENTICATED = "unauthenticated"


def encode_frame(header: dict[str, Any], blob: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if len(head) > MAX_HEADER_BYTES:
        raise FrameError(f"header of {len(head)} bytes exceeds {MAX_HEADER_BYTES}")
    if len(blob) > MAX_BLOB_BYTES:
        raise FrameError(f"payload of {len(blob)} bytes exceeds {MAX_BLOB_BYTES}")
    return _PREFIX.pack(len(head), len(blob)) + head + blob


async def read_frame(
    reader: asyncio.StreamReader,
    *,
    max_header: int = MAX_HEADER_BYTES,
    max_blob: int = MAX_BLOB_BYTES,
    skip_oversized: bool = True,
) -> tuple[dict[str, Any], bytes]:
    """Read one frame; raises ``asyncio.IncompleteReadError`` on a clean EOF.

    A payload over ``max_blob`` (but within :data:`MAX_BLOB_BYTES`) is read past, so the stream stays
    in step, unless ``skip_oversized`` is false (a peer not yet trusted: nothing is read past).
    """
    prefix = await reader.readexactly(_PREFIX.size)
    head_len, blob_len = _PREFIX.unpack(prefix)
    if head_len > max_header:
        raise FrameError(f"header of {head_len} bytes exceeds the limit of {max_header}")
    if blob_len > max_blob:
        if blob_len > MAX_BLOB_BYTES or not skip_oversized:
            raise FrameError(f"payload of {blob_len} bytes exceeds the limit of {max_blob}")
        await _discard(reader, head_len + blob_len)
        raise FrameError(f"payload of {blob_len} bytes exceeds the limit of {max_blob}", recoverable=True)
    head = await reader.readexactly(head_len)
    blob = await reader.readexactly(blob_len) if blob_len else b""
    return decode_header(head), blob


def recv_frame(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    """``read_frame`` on a blocking socket (its timeout applies to each read); ``ConnectionError`` when the peer
    closed it midway, ``FrameError`` for a malformed or oversized frame."""
    head_len, blob_len = _PREFIX.unpack(_recv_exactly(sock, _PREFIX.size))
    if head_len > MAX_HEADER_BYTES or blob_len > MAX_BLOB_BYTES:
        raise FrameError(f"a frame of {head_len} + {blob_len} bytes exceeds the limits")
    header = decode_header(_recv_exactly(sock, head_len))
    return header, _recv_exactly(sock, blob_len) if blob_len else b""


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    buffer = bytearray(count)
    view = memoryview(buffer)
    got = 0
    while got < count:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the peer closed the connection")
        got += n
    return bytes(buffer)


def decode_header(head: bytes) -> dict[str, Any]:
    """A frame's header from its bytes; raises :class:`FrameError`."""
    try:
        header = json.loads(head)
    except ValueError as e:
        raise FrameError(f"header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise FrameError("header must be a JSON object")
    return header


async def _discard(reader: asyncio.StreamReader, count: int) -> None:
    while count > 0:
        chunk = await reader.read(min(count, 1 << 20))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", count)
        count -= len(chunk)
