"""The ADB path: the ``adb`` client (the SDK's platform-tools, or Debian's ``adb``) run as a subprocess against
the container's adb server, one device (``-s emulator-5554``). Slower than gRPC for screenshots and input, but
the only way to a shell in the guest: ``input``, ``getprop``, ``uiautomator dump``, ``monkey``, ``screenrecord``.
"""

from __future__ import annotations

import asyncio
import shlex

from sandbox.agent.errors import AgentError
from sandbox.protocol import ErrorCode

ADB_TIMEOUT_S = 30.0
UI_DUMP_PATH = "/sdcard/sandbox-window-dump.xml"
RECORD_PATH = "/sdcard/sandbox-recording.mp4"
RECORD_LIMIT_S = 180
"""``screenrecord`` stops by itself after this long (its own maximum)."""
RECORD_BIT_RATE = 4_000_000
"""4 Mbit/s: a full segment is at most about 90 MB, well under what a trajectory keeps (its default, about 20
Mbit/s on recent images, could pass that)."""


def input_text_arg(text: str) -> str:
    """``input text`` takes one shell word, with ``%s`` for a space."""
    return shlex.quote(text.replace(" ", "%s"))


class Adb:
    def __init__(self, serial: str, *, adb: str = "adb", server_port: int | None = None) -> None:
        self.serial = serial
        self._argv = [adb, *(["-P", str(server_port)] if server_port else []), "-s", serial]
        self._recording: asyncio.subprocess.Process | None = None

    async def run(self, *args: str, timeout: float = ADB_TIMEOUT_S) -> bytes:
        """``adb -s SERIAL ARGS...``'s stdout; an AgentError (unavailable) when adb fails or says ``error:``."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
        except OSError as e:
            raise AgentError(ErrorCode.UNAVAILABLE, f"cannot run adb ({self._argv[0]}): {e}") from e
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise AgentError(ErrorCode.TIMEOUT, f"adb {' '.join(args)}: no answer within {timeout:g} s") from None
        if proc.returncode != 0:
            detail = (err or out).decode(errors="replace").strip() or f"exit code {proc.returncode}"
            raise AgentError(ErrorCode.UNAVAILABLE, f"adb {' '.join(args)}: {detail}")
        return out

    async def exec_out(self, command: str, timeout: float = ADB_TIMEOUT_S) -> bytes:
        """A guest command's raw stdout (``exec-out``: no pty, binary-safe)."""
        return await self.run("exec-out", command, timeout=timeout)

    async def shell(self, command: str, timeout: float = ADB_TIMEOUT_S) -> str:
        return (await self.exec_out(command, timeout)).decode(errors="replace")

    async def boot_completed(self) -> bool:
        return (await self.shell("getprop sys.boot_completed")).strip() == "1"

    async def screenshot(self) -> bytes:
        data = await self.exec_out("screencap -p")
        if not data.startswith(b"\x89PNG"):
            raise AgentError(ErrorCode.UNAVAILABLE, f"screencap returned no PNG ({data[:60]!r})")
        return data

    async def tap(self, x: int, y: int) -> None:
        await self.shell(f"input tap {x} {y}")

    async def swipe(self, x0: int, y0: int, x1: int, y1: int, duration_ms: int) -> None:
        await self.shell(f"input swipe {x0} {y0} {x1} {y1} {duration_ms}")

    async def long_press(self, x: int, y: int, duration_ms: int) -> None:
        await self.swipe(x, y, x, y, duration_ms)

    async def text(self, text: str) -> None:
        await self.shell(f"input text {input_text_arg(text)}")

    async def keyevent(self, keycode: str) -> None:
        await self.shell(f"input keyevent {keycode}")

    async def open_app(self, package: str, activity: str | None = None) -> str:
        if activity:
            return await self.shell(f"am start -W -n {shlex.quote(f'{package}/{activity}')}")
        return await self.shell(f"monkey -p {shlex.quote(package)} -c android.intent.category.LAUNCHER 1")

    async def ui_tree(self) -> str:
        """The accessibility tree as ``uiautomator dump`` writes it (XML)."""
        out = await self.shell(f"uiautomator dump {UI_DUMP_PATH} >/dev/null && cat {UI_DUMP_PATH}", timeout=60)
        start = out.find("<?xml")
        if start < 0:
            raise AgentError(ErrorCode.UNAVAILABLE, f"uiautomator dump gave no XML: {out.strip()[:200]!r}")
        return out[start:]

    async def record_start(self) -> None:
        if self._recording is not None and self._recording.returncode is None:
            raise AgentError(ErrorCode.BAD_REQUEST, "a screen recording is already running")
        command = f"screenrecord --time-limit {RECORD_LIMIT_S} --bit-rate {RECORD_BIT_RATE} {RECORD_PATH}"
        self._recording = await asyncio.create_subprocess_exec(
            *self._argv, "shell", command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )

    async def record_stop(self) -> bytes:
        """Stops the recording (SIGINT lets screenrecord finish the MP4) and returns the file."""
        proc, self._recording = self._recording, None
        if proc is None:
            raise AgentError(ErrorCode.BAD_REQUEST, "no screen recording is running")
        await self.shell("pid=$(pidof screenrecord) && kill -INT $pid; true")
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        data = await self.exec_out(f"cat {RECORD_PATH}", timeout=120)
        await self.shell(f"rm -f {RECORD_PATH}")
        return data
