"""Fakes for the android driver's tests: an adb server speaking the adb host protocol (for Debian's real ``adb``
client), and an emulator console. Both listen on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

ADB_SERVER_VERSION = 41
"""Debian bookworm's adb 1.0.41: a server of another version would be killed and replaced by the client."""


class _LoopbackServer:
    """A TCP server on 127.0.0.1 with a free port; a subclass answers each connection in ``_serve``."""

    port: int
    _server: asyncio.AbstractServer | None

    async def start(self: Self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


@dataclass
class FakeAdbServer(_LoopbackServer):
    """``host:version``, ``host:features``, ``host:tport:…``/``host:transport:…``, then ``exec:``/``shell:``
    commands answered by ``reply(command) -> bytes`` (raw output, then the connection closes)."""

    serial: str = "emulator-5554"
    reply: Callable[[str], bytes] = lambda cmd: b""
    requests: list[str] = field(default_factory=list)
    port: int = 0
    _server: asyncio.AbstractServer | None = None

    @property
    def commands(self) -> list[str]:
        return [r.split(":", 1)[1] for r in self.requests if r.startswith(("exec:", "shell:"))]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int(await reader.readexactly(4), 16)
                request = (await reader.readexactly(size)).decode()
                self.requests.append(request)
                if request == "host:version":
                    writer.write(b"OKAY" + _hex(f"{ADB_SERVER_VERSION:04x}"))
                    break
                if request.endswith("features"):
                    writer.write(b"OKAY" + _hex(""))
                    break
                if request.startswith(("host:tport:", "host:transport")):
                    wanted = request.rsplit(":", 1)[1]
                    if wanted not in (self.serial, "any", "host:transport-any"):
                        writer.write(b"FAIL" + _hex(f"device '{wanted}' not found"))
                        break
                    writer.write(b"OKAY" + (b"\x01" + b"\x00" * 7 if "tport" in request else b""))
                    continue
                if request.startswith(("exec:", "shell:")):
                    writer.write(b"OKAY" + self.reply(request.split(":", 1)[1]))
                    break
                writer.write(b"FAIL" + _hex(f"unknown request {request}"))
                break
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()


def _hex(text: str) -> bytes:
    data = text.encode()
    return f"{len(data):04x}".encode() + data


@dataclass
class FakeConsole(_LoopbackServer):
    """The emulator console: a banner, ``auth``, ``avd snapshot load NAME`` (known names: OK, others: KO)."""

    snapshots: tuple[str, ...] = ("default_boot",)
    token: str = ""
    lines: list[str] = field(default_factory=list)
    port: int = 0
    _server: asyncio.AbstractServer | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"Android Console: type 'help' for a list of commands\r\nOK\r\n")
        authed = not self.token
        while line := (await reader.readline()).decode().strip():
            self.lines.append(line)
            if line == "quit":
                break
            if line.startswith("auth "):
                authed = line.split(" ", 1)[1] == self.token
                writer.write(b"OK\r\n" if authed else b"KO: authentication token does not match\r\n")
            elif not authed:
                writer.write(b"KO: unknown command, try 'help'\r\n")
            elif line.startswith("avd snapshot load "):
                name = line.rsplit(" ", 1)[1]
                writer.write(b"OK\r\n" if name in self.snapshots else f"KO: snapshot {name} not found\r\n".encode())
            else:
                writer.write(b"KO: unknown command\r\n")
            await writer.drain()
        writer.close()
