"""The emulator console (telnet, ``127.0.0.1:5554``): ``avd snapshot load|save NAME`` for resets.

The console answers each command with its output and then ``OK`` or ``KO: reason``. It asks for
``auth <token>`` (``~/.emulator_console_auth_token``) first unless that file is empty.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sandbox.agent.errors import AgentError
from sandbox.protocol import ErrorCode

CONSOLE_TIMEOUT_S = 120.0
"""A snapshot load of a large AVD takes seconds to tens of seconds."""
TOKEN_FILE = Path.home() / ".emulator_console_auth_token"


class Console:
    def __init__(self, port: int = 5554, *, host: str = "127.0.0.1", token_file: Path = TOKEN_FILE) -> None:
        self.host, self.port, self.token_file = host, port, token_file

    async def command(self, *lines: str, timeout: float = CONSOLE_TIMEOUT_S) -> list[str]:
        """Send ``lines`` in one session (after auth if a token is set); each one's output."""
        try:
            return await asyncio.wait_for(self._session(lines), timeout)
        except TimeoutError:
            raise AgentError(ErrorCode.TIMEOUT, f"emulator console: no answer within {timeout:g} s") from None
        except OSError as e:
            raise AgentError(ErrorCode.UNAVAILABLE, f"emulator console {self.host}:{self.port}: {e}") from e

    async def _session(self, lines: tuple[str, ...]) -> list[str]:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            await _reply(reader, "banner")
            token = self.token_file.read_text().strip() if self.token_file.is_file() else ""
            if token:
                await _send(writer, f"auth {token}")
                await _reply(reader, "auth")
            outputs = []
            for line in lines:
                await _send(writer, line)
                outputs.append(await _reply(reader, line))
            await _send(writer, "quit")
            return outputs
        finally:
            writer.close()

    async def snapshot_load(self, name: str) -> None:
        await self.command(f"avd snapshot load {name}")

    async def snapshot_save(self, name: str) -> None:
        await self.command(f"avd snapshot save {name}")


async def _send(writer: asyncio.StreamWriter, line: str) -> None:
    if "\n" in line or "\r" in line:
        raise AgentError(ErrorCode.BAD_REQUEST, "a console command is one line")
    writer.write(line.encode() + b"\r\n")
    await writer.drain()


async def _reply(reader: asyncio.StreamReader, what: str) -> str:
    lines: list[str] = []
    while True:
        raw = await reader.readline()
        if not raw:
            raise AgentError(ErrorCode.UNAVAILABLE, f"emulator console closed the connection ({what})")
        line = raw.decode(errors="replace").rstrip("\r\n")
        if line == "OK":
            return "\n".join(lines)
        if line.startswith("KO"):
            raise AgentError(ErrorCode.UNAVAILABLE, f"emulator console refused {what!r}: {line[3:].strip()}")
        lines.append(line)
