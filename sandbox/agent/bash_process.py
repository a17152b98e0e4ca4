"""A shell session's long-lived bash, driven through two pipes the event loop reads and writes by plain callbacks.

bash reads a script from a pipe one byte per ``read(2)`` (it must not read past the line it runs, which a command
could otherwise not read itself), so each byte the agent writes to its stdin is a system call in bash. The agent
writes one short line a command, ``. <run file>``; the run file (read by bash in one ``read``) sources the command's
own file and prints ``<marker> <exit status>`` as one line on bash's stdout, the one thing bash writes there. A
session's marker is random and stays the same for its bash: exactly one marker line answers each line sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess

from sandbox.agent.child import until_writable, watch_exit

READ_CHUNK = 1 << 16


class SessionEnded(Exception):
    """The session's shell exited (e.g. the command ran `exit`) or stopped reading its commands."""


class BashProcess:
    """Start with :meth:`start`; :meth:`send` a line, ``await`` what :meth:`expect` returned; :meth:`close` it."""

    def __init__(self, popen: subprocess.Popen[bytes], stdin: int, stdout: int, marker: bytes) -> None:
        self._loop = asyncio.get_running_loop()
        self._popen = popen
        self.pid = popen.pid
        self._stdin: int | None = stdin
        self._stdout: int | None = stdout
        self._marker = marker
        self._buffer = bytearray()
        self._waiter: asyncio.Future[int] | None = None
        self._exited: asyncio.Future[int] = self._loop.create_future()
        os.set_blocking(stdin, False)
        os.set_blocking(stdout, False)
        self._loop.add_reader(stdout, self._read)
        watch_exit(self._loop, self.pid, self._reaped)

    @classmethod
    def start(cls, argv: list[str], *, cwd: str, marker: bytes) -> BashProcess:
        """Spawn ``argv`` in a new session (its own process group), stderr to /dev/null. OSError as from Popen."""
        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        try:
            popen = subprocess.Popen(
                argv, stdin=in_read, stdout=out_write, stderr=subprocess.DEVNULL, cwd=cwd, start_new_session=True
            )
        except BaseException:
            os.close(in_write)
            os.close(out_read)
            raise
        finally:
            os.close(in_read)
            os.close(out_write)
        return cls(popen, in_write, out_read, marker)

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def expect(self) -> asyncio.Future[int]:
        """A future of the next marker line's exit status; it fails with :class:`SessionEnded` if bash ends first.
        Cancelling it (a timeout) leaves the line to a later :meth:`expect`."""
        waiter: asyncio.Future[int] = self._loop.create_future()
        self._waiter = waiter
        self._scan()
        if not waiter.done() and (self._stdout is None or self.returncode is not None):
            waiter.set_exception(SessionEnded())
        return waiter

    async def send(self, line: bytes) -> None:
        """Write ``line`` to bash's stdin; :class:`SessionEnded` if bash no longer reads it."""
        view = memoryview(line)
        try:
            while view:
                if self._stdin is None:
                    raise SessionEnded
                try:
                    view = view[os.write(self._stdin, view) :]
                except BlockingIOError:
                    await until_writable(self._loop, self._stdin)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise SessionEnded from e

    async def wait(self) -> int:
        """Until bash has exited and been reaped; its return code."""
        return await asyncio.shield(self._exited)

    def close(self) -> None:
        """Stop reading and writing (the exit is still reaped in the background: no zombie is left)."""
        self._close_stdout()
        if self._stdin is not None:
            with contextlib.suppress(OSError):
                os.close(self._stdin)
            self._stdin = None

    def _read(self) -> None:
        if self._stdout is None:
            return
        try:
            chunk = os.read(self._stdout, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close_stdout()
            self._fail_waiter()
            return
        self._buffer += chunk
        self._scan()

    def _scan(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._waiter = None
            self._trim()
            return
        start = self._buffer.find(self._marker)
        if start < 0:
            self._trim()
            return
        end = self._buffer.find(b"\n", start)
        if end < 0:
            return
        status = bytes(self._buffer[start + len(self._marker) : end]).split()
        del self._buffer[: end + 1]
        self._waiter = None
        try:
            waiter.set_result(int(status[-1]))
        except (IndexError, ValueError):
            waiter.set_exception(SessionEnded())

    def _trim(self) -> None:
        """Keep only what could still be the start of a marker: nothing else bash writes there is wanted."""
        keep = len(self._marker)
        if len(self._buffer) > keep:
            del self._buffer[:-keep]

    def _fail_waiter(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(SessionEnded())

    def _close_stdout(self) -> None:
        if self._stdout is not None:
            self._loop.remove_reader(self._stdout)
            with contextlib.suppress(OSError):
                os.close(self._stdout)
            self._stdout = None

    def _reaped(self, status: int) -> None:
        self._popen.returncode = os.waitstatus_to_exitcode(status)
        if self._stdout is not None:  # what bash wrote before it ended still counts
            self._read()
        if not self._exited.done():
            self._exited.set_result(self._popen.returncode)
        self._fail_waiter()
