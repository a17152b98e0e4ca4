"""Local TCP ports that lead to ports inside sandboxes, through the control plane's preview route.

OSWorld's controllers build URLs as ``http://{ip}:{port}/...`` (the in-VM API on 5000, Chromium's DevTools, VLC)
and Playwright follows DevTools' ``webSocketDebuggerUrl`` back to the same host and port. A preview URL has a path
prefix (``/v1/sandboxes/{id}/ports/{P}/``), so each forwarded sandbox port gets a listener on ``127.0.0.1`` of
its own: every connection it takes has its request line's target moved under the prefix, the preview's credential
added, and is then relayed byte for byte to the control plane's HTTP server.

- Plain HTTP: ``Connection: close`` is set on the request, so the control plane ends the connection after one
  answer and the next request (a new connection) is rewritten again. The client's ``Host`` is kept: the preview
  passes it to the app, so Chromium writes DevTools websocket URLs that point back at this listener.
- Websockets (``Upgrade``): the handshake is rewritten the same way, and the connection then carries frames both
  ways untouched (the control plane relays them to the app message by message).

One :class:`Forwarder` (one event loop on a daemon thread) serves every listener of a process, so many
environments in one process share it; :meth:`Forwarder.open` and :meth:`Forwarder.close` are thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

LOOPBACK = "127.0.0.1"
MAX_HEAD_BYTES = 64 * 1024
CHUNK = 1 << 16
HOP_BY_HOP = frozenset({b"connection", b"proxy-connection", b"keep-alive"})

T = TypeVar("T")


@dataclass(frozen=True)
class Upstream:
    """Where one local port leads: the control plane's HTTP server and the preview prefix of one sandbox port.

    ``credential`` returns the extra request headers that open the preview (a ``Cookie`` traded for a ticket, or
    ``Authorization``); it may block (it is called off the event loop) and should cache what it mints."""

    host: str
    port: int
    tls: bool
    prefix: str
    credential: Callable[[], list[tuple[bytes, bytes]]]


class Forwarder:
    """Listeners on loopback, each relaying to one :class:`Upstream`, served by one background event loop."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._servers: dict[int, asyncio.Server] = {}
        self._thread = threading.Thread(target=self._loop.run_forever, name="osworld-forwarder", daemon=True)
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def open(self, upstream: Upstream) -> int:
        """A new listener on a free loopback port that relays to ``upstream``; its port."""
        return self._call(self._open(upstream))

    async def _open(self, upstream: Upstream) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _relay(upstream, reader, writer)

        server = await asyncio.start_server(serve, LOOPBACK, 0, limit=MAX_HEAD_BYTES)
        port = int(server.sockets[0].getsockname()[1])
        self._servers[port] = server
        return port

    def close(self, port: int) -> None:
        """Stop the listener on ``port`` (connections in flight end with it). Unknown ports are ignored."""
        self._call(self._close(port))

    async def _close(self, port: int) -> None:
        server = self._servers.pop(port, None)
        if server is not None:
            server.close()
            if hasattr(server, "close_clients"):
                server.close_clients()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    async def _cancel_relays(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def ports(self) -> list[int]:
        return sorted(self._servers)

    def stop(self) -> None:
        """Close every listener and end the loop's thread (the shared forwarder lives as long as its process)."""
        for port in self.ports:
            self.close(port)
        self._call(self._cancel_relays())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


_shared: Forwarder | None = None
_shared_lock = threading.Lock()


def shared_forwarder() -> Forwarder:
    """The process's forwarder, started on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Forwarder()
        return _shared


def rewrite_head(head: bytes, upstream: Upstream, extra: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """The request head to send upstream (target under the prefix, credential added, ``Connection: close`` unless
    it is a websocket upgrade), and whether it is one. ``ValueError`` for something that is not an HTTP request."""
    lines = head.rstrip(b"\r\n").split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise ValueError(f"not an HTTP/1 request line: {lines[0][:80]!r}")
    method, target, version = parts
    if target.startswith(b"http://") or target.startswith(b"https://"):  # absolute form: keep the path
        target = b"/" + target.split(b"/", 3)[3] if target.count(b"/") >= 3 else b"/"
    if not target.startswith(b"/"):
        raise ValueError(f"unsupported request target {target[:80]!r}")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ValueError(f"malformed header line {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    names = {n.lower() for n, _ in headers}
    upgrade = b"upgrade" in names and any(n.lower() == b"connection" and b"upgrade" in v.lower() for n, v in headers)
    out = [(n, v) for n, v in headers if upgrade or n.lower() not in HOP_BY_HOP]
    for name, value in extra:
        if name.lower() == b"cookie":
            cookies = [v for n, v in out if n.lower() == b"cookie"]
            out = [(n, v) for n, v in out if n.lower() != b"cookie"]
            value = b"; ".join([*cookies, value])
        out.append((name, value))
    if not upgrade:
        out.append((b"Connection", b"close"))
    request_line = b" ".join([method, upstream.prefix.encode() + target, version])
    return b"\r\n".join([request_line, *(n + b": " + v for n, v in out)]) + b"\r\n\r\n", upgrade


async def _relay(upstream: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    up_writer: asyncio.StreamWriter | None = None
    try:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return
        try:
            extra = await asyncio.to_thread(upstream.credential)
        except Exception as e:  # the SDK's error (a deleted sandbox, a dead control plane): told to the caller
            await _answer(writer, 502, f"the OSWorld forwarder could not open the preview: {e}")
            return
        try:
            new_head, _ = rewrite_head(head, upstream, extra)
        except ValueError as e:
            await _answer(writer, 400, f"the OSWorld forwarder cannot relay this: {e}")
            return
        context = ssl.create_default_context() if upstream.tls else None
        up_reader, up_writer = await asyncio.open_connection(upstream.host, upstream.port, ssl=context, limit=CHUNK)
        up_writer.write(new_head)
        await up_writer.drain()
        await _pipe_both(reader, writer, up_reader, up_writer)
    except (TimeoutError, ConnectionError, OSError):
        pass
    finally:
        for w in (writer, up_writer):
            if w is not None:
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()


async def _answer(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    body = (message + "\n").encode()
    reason = b"Bad Request" if status == 400 else b"Bad Gateway"
    writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n" % (status, reason))
    writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Bytes both ways until the control plane's side ends (it closes after an answer, or when a websocket ends)."""
    to_up = asyncio.create_task(_pipe(reader, up_writer))
    try:
        await _pipe(up_reader, writer)
    finally:
        to_up.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
            await to_up


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy until ``src`` ends. No half-close is passed on: a client that stops sending still reads the answer."""
    while data := await src.read(CHUNK):
        dst.write(data)
        await dst.drain()
