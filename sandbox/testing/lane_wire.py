"""Raw frames on a lane socket, for tests that speak to an agent as no SDK would (a wrong ticket, a forbidden op)."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from sandbox.protocol import encode_frame

_PREFIX = struct.Struct(">II")


def exchange(path: str, frames: list[dict[str, Any]], *, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Send each frame on one connection to the unix socket ``path``; the answers' headers, in order. A connection
    the agent hangs up on ends the list early."""
    answers: list[dict[str, Any]] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        for frame in frames:
            sock.sendall(encode_frame(frame))
            try:
                head_len, blob_len = _PREFIX.unpack(_read(sock, _PREFIX.size))
            except ConnectionError:
                break
            answers.append(json.loads(_read(sock, head_len)))
            _read(sock, blob_len)
    return answers


def _read(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the agent hung up")
        data += chunk
    return bytes(data)
