"""Raw frames on a lane socket, for tests that speak to an agent as no SDK would (a wrong ticket, a forbidden op)."""

from __future__ import annotations

import socket
from typing import Any

from sandbox.protocol import encode_frame, recv_frame


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
                header, _ = recv_frame(sock)
            except ConnectionError:
                break
            answers.append(header)
    return answers
