"""The TCP handshake: a peer proves it holds the sandbox's secret before the agent serves it.

The secret lives in a file (a Kubernetes Secret mounted in the pod, a bind-mounted file under Docker). It is
read again on every handshake, so a rotated secret works without a restart, and compared in constant time.
Neither the secret nor what a peer presented is ever logged or echoed back.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from typing import Any, Literal

from sandbox.protocol import HELLO_OP, PROTOCOL_VERSION, ErrorCode, FrameError, encode_frame, read_frame

DEFAULT_HELLO_TIMEOUT = 5.0
FAILURE_DELAY = 0.2
"""Seconds the agent waits before answering a failed handshake: it slows guessing."""
MAX_TOKEN_FILE_BYTES = 64 * 1024
MAX_HELLO_HEADER = 16 * 1024


class TokenFileError(Exception):
    """The token file cannot be read, or holds no token. The message names the path, never the content."""


class TokenFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> bytes:
        """The secret (surrounding whitespace stripped); raises :class:`TokenFileError`."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_TOKEN_FILE_BYTES + 1)
        except OSError as e:
            raise TokenFileError(f"cannot read the token file {self.path}: {e.strerror or e}") from None
        if len(data) > MAX_TOKEN_FILE_BYTES:
            raise TokenFileError(f"the token file {self.path} is larger than {MAX_TOKEN_FILE_BYTES} bytes")
        token = data.strip()
        if not token:
            raise TokenFileError(f"the token file {self.path} is empty")
        return token

    def matches(self, presented: object) -> bool:
        """Whether ``presented`` is the secret the file holds now; raises :class:`TokenFileError`."""
        expected = self.read()
        if not isinstance(presented, str):
            return False
        return hmac.compare_digest(presented.strip().encode("utf-8", errors="surrogatepass"), expected)


Access = Literal["token", "lane"]


async def handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    tokens: TokenFile | None,
    *,
    timeout: float,
    logger: logging.Logger,
    lane_admits: Callable[[object], bool] | None = None,
) -> tuple[Access, Any] | None:
    """Wait for the peer's hello and answer it: what it proved (the sandbox's token, or a lane's ticket ``lane_admits``
    accepts) and what it presented, or None: hang up. ``tokens`` None: only lanes are served here."""
    peer = format_address(writer.get_extra_info("peername"))
    try:
        header, _ = await asyncio.wait_for(
            read_frame(reader, max_header=MAX_HELLO_HEADER, max_blob=0, skip_oversized=False), timeout
        )
    except TimeoutError:
        logger.warning("refused an unauthenticated connection from %s (no hello within %g s)", peer, timeout)
        await _refuse(writer, ErrorCode.UNAUTHENTICATED, f"no hello within {timeout:g} s")
        return None
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    except FrameError:
        await _failed(writer, logger, peer, "a malformed first frame")
        return None
    if header.get("op") != HELLO_OP:
        await _failed(writer, logger, peer, "the first frame was not a hello")
        return None
    args: Any = header.get("args")
    args = args if isinstance(args, dict) else {}
    if "lane" in args or tokens is None:
        ticket = args.get("lane")
        if lane_admits is None or not lane_admits(ticket):
            await _failed(writer, logger, peer, "a lane ticket not granted, revoked or expired")
            return None
        return await _welcome(writer, ("lane", ticket))
    presented = args.get("token")
    try:
        accepted = tokens.matches(presented)
    except TokenFileError as e:
        logger.error("refused a connection from %s: %s", peer, e)
        await asyncio.sleep(FAILURE_DELAY)
        await _refuse(writer, ErrorCode.UNAVAILABLE, "the agent cannot check tokens: its token file is unusable")
        return None
    if not accepted:
        await _failed(writer, logger, peer, "a wrong or missing token")
        return None
    return await _welcome(writer, ("token", None))


async def _welcome(writer: asyncio.StreamWriter, access: tuple[Access, Any]) -> tuple[Access, Any]:
    writer.write(encode_frame({"ok": True, "result": {"protocol": PROTOCOL_VERSION}}))
    await writer.drain()
    return access


async def _failed(writer: asyncio.StreamWriter, logger: logging.Logger, peer: str, why: str) -> None:
    logger.warning("refused an unauthenticated connection from %s (%s)", peer, why)
    await asyncio.sleep(FAILURE_DELAY)
    await _refuse(
        writer,
        ErrorCode.UNAUTHENTICATED,
        "authentication failed: open the connection with a hello carrying the sandbox's token or a lane's ticket",
    )
    return None


async def _refuse(writer: asyncio.StreamWriter, code: str, message: str) -> None:
    try:
        writer.write(encode_frame({"ok": False, "error": {"code": code, "message": message}}))
        await asyncio.wait_for(writer.drain(), 2)
    except (ConnectionError, TimeoutError):
        pass


def format_address(name: object) -> str:
    """``host:port`` (``[host]:port`` for IPv6) of a socket name as asyncio gives it."""
    if isinstance(name, tuple) and len(name) >= 2:
        host = str(name[0])
        return f"[{host}]:{name[1]}" if ":" in host else f"{host}:{name[1]}"
    return str(name or "an unknown peer")


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) into its parts; raises ValueError with the reason."""
    host, sep, port_text = value.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"{value!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is out of range")
    return host, port
