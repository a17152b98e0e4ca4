"""Shell commands inside the sandbox: one-shot exec and persistent sessions.

A one-shot command runs in its own process group so a timeout kills everything it
started. A session is one long-lived bash; each command is ``source``d from a file so
``cd`` and ``export`` persist and a syntax error cannot wedge the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from sandbox.agent.bash_process import BashProcess, SessionEnded
from sandbox.agent.child import Child
from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.agent.plain_command import direct_argv
from sandbox.agent.process_tree import kill_descendants, kill_group, kill_group_fully
from sandbox.protocol import ErrorCode

DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 3600.0
DEFAULT_MAX_OUTPUT = 32 * 1024 * 1024
# After the command exits, background children may still hold its pipes open
# (e.g. `server &`); stop reading after this grace instead of waiting for them.
PIPE_GRACE_SECONDS = 0.2
MAX_SESSIONS = 64
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./-]+")
SPAWN_PROOF_S = 10.0
"""The shell check starts a process at most this often: within it, a process started by a command or by an earlier
check answers for the shell. The control plane probes every sandbox every 2 s, and a check that started `true`
cost about 3.7 ms of the machine's CPU against 0.9 ms for a ping: 300 idle terminals spent a third of a 2-core
machine on their checks alone. A start that fails is never reused: the next check starts a process again."""
SMALL_IO_BYTES = 64 * 1024
"""A session's command and output files up to this size are written and read in the event loop, larger ones in a
thread."""
OUTPUT_FILE_ROTATE_BYTES = 8 * 1024 * 1024
"""A session's output files are appended to (each command's output is what it added) and emptied before a command
only once they grew past this: emptying a file costs a write to disk (see ``_write_small``)."""


@dataclass
class _Output:
    limit: int
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    truncated: bool = False

    def add(self, chunk: bytes) -> None:
        room = self.limit - self.size
        if room <= 0:
            self.truncated = True
            return
        if len(chunk) > room:
            chunk = chunk[:room]
            self.truncated = True
        self.chunks.append(chunk)
        self.size += len(chunk)

    def data(self) -> bytes:
        return b"".join(self.chunks)


@dataclass
class _ExecRequest:
    command: str | list[str]
    timeout: float
    cwd: str | None
    env: dict[str, str]
    max_output: int
    session: str | None
    keep_background: bool


def _parse(args: dict[str, Any]) -> _ExecRequest:
    command = require(args, "cmd", (str, list))
    if isinstance(command, list) and not (command and all(isinstance(c, str) for c in command)):
        raise bad_request("cmd as a list must be a non-empty list of strings")
    if isinstance(command, str) and not command.strip():
        raise bad_request("cmd must not be empty")
    timeout = float(require(args, "timeout", (int, float), DEFAULT_TIMEOUT))
    if not 0 < timeout <= MAX_TIMEOUT:
        raise bad_request(f"timeout must be in (0, {MAX_TIMEOUT:g}] seconds")
    env = require(args, "env", dict, {})
    assert isinstance(env, dict)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise bad_request("env must map strings to strings")
    if any(not k or "=" in k or "\x00" in k + v for k, v in env.items()):
        raise bad_request("env names must be non-empty without '=' or NUL, and values without NUL")
    max_output = int(require(args, "max_output", int, DEFAULT_MAX_OUTPUT))
    if max_output <= 0:
        raise bad_request("max_output must be positive")
    cwd = require(args, "cwd", str, None)
    parts = [command] if isinstance(command, str) else command
    if any("\x00" in part for part in [*parts, cwd or ""]):
        raise bad_request("cmd and cwd must not contain NUL characters")
    session = require(args, "session", str, None)
    keep_background = bool(require(args, "keep_background", bool, False))
    return _ExecRequest(command, timeout, cwd, env, max_output, session, keep_background)


def _result(
    exit_code: int | None, timed_out: bool, out: _Output, err: _Output, started: float, **extra: Any
) -> tuple[dict[str, Any], bytes]:
    result = {
        "exit_code": exit_code,
        "timed_out": timed_out,
        "stdout_bytes": out.size,
        "stderr_bytes": err.size,
        "stdout_truncated": out.truncated,
        "stderr_truncated": err.truncated,
        "duration_ms": round((time.monotonic() - started) * 1000, 3),
        **extra,
    }
    return result, out.data() + err.data()


def _exit_code(returncode: int | None) -> int | None:
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


class Shell:
    def __init__(self, *, default_cwd: str, logger: logging.Logger) -> None:
        self._default_cwd = default_cwd
        self._log = logger
        self._sessions: dict[str, _Session] = {}
        self._started_at: float | None = None
        """When a process last started successfully (monotonic); None after a start failed."""

    async def exec(self, args: dict[str, Any], stdin: bytes) -> tuple[dict[str, Any], bytes]:
        req = _parse(args)
        if req.session is not None:
            return await self._session(req.session).run(req)
        return await self._run_once(req, stdin)

    async def close_session(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        name = require(args, "session", str)
        session = self._sessions.pop(name, None)
        if session is None:
            raise AgentError(ErrorCode.NOT_FOUND, f"no shell session named {name!r}")
        await session.close()
        return {"closed": name}, b""

    async def list_sessions(self, _args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        return {"sessions": sorted(name for name, s in self._sessions.items() if s.alive)}, b""

    async def check(self) -> dict[str, Any]:
        if self._started_at is not None and (since := time.monotonic() - self._started_at) < SPAWN_PROOF_S:
            return {"ok": True, "detail": f"spawns processes (one started {since:.1f} s ago)"}
        try:
            proc = await asyncio.create_subprocess_exec("true", stdin=asyncio.subprocess.DEVNULL, cwd=self._default_cwd)
            code = await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            self._started_at = None
            return {"ok": False, "detail": "`true` did not exit within 5 s"}
        except OSError as e:
            self._started_at = None
            return {"ok": False, "detail": f"cannot start a process: {e}"}
        if code != 0:
            return {"ok": False, "detail": f"`true` exited {code}"}
        self._started_at = time.monotonic()
        return {"ok": True, "detail": "spawns processes"}

    async def close(self) -> None:
        for session in list(self._sessions.values()):
            await session.close()
        self._sessions.clear()

    def _session(self, name: str) -> _Session:
        session = self._sessions.get(name)
        if session is not None and session.alive:
            return session
        if len(self._sessions) >= MAX_SESSIONS:
            self._sessions = {n: s for n, s in self._sessions.items() if s.alive}
            if len(self._sessions) >= MAX_SESSIONS:
                raise AgentError(ErrorCode.TOO_LARGE, f"at most {MAX_SESSIONS} shell sessions; close one first")
        session = _Session(name, cwd=self._default_cwd, logger=self._log)
        self._sessions[name] = session
        return session

    async def _run_once(self, req: _ExecRequest, stdin: bytes) -> tuple[dict[str, Any], bytes]:
        started = time.monotonic()
        direct = direct_argv(req.command) if isinstance(req.command, str) else None
        shell_argv = ["bash", "-c", req.command] if isinstance(req.command, str) else req.command
        env = {**os.environ, **req.env} if req.env else None  # None: the agent's own, with no copy to encode
        out, err = _Output(req.max_output), _Output(req.max_output)

        def spawn(argv: list[str]) -> Child:
            cwd = req.cwd or self._default_cwd
            return Child.start(argv, stdin=bool(stdin), cwd=cwd, env=env, sinks=(out, err))

        child = None
        if direct is not None:
            with contextlib.suppress(OSError):  # bash will say why, in its own words
                child = spawn(direct)
        try:
            child = child or spawn(shell_argv)
        except FileNotFoundError as e:
            raise AgentError(ErrorCode.NOT_FOUND, f"cannot run {shell_argv[0]!r} (or cwd missing): {e}") from e
        except OSError as e:
            self._started_at = None  # out of processes or memory, perhaps: the next check finds out
            raise AgentError(ErrorCode.BAD_REQUEST, f"cannot start {shell_argv[0]!r}: {e}") from e
        self._started_at = time.monotonic()
        timed_out = False
        try:
            try:
                async with asyncio.timeout(req.timeout):  # no task of its own, unlike wait_for (3.11)
                    await child.run(stdin)
            except TimeoutError:
                timed_out = True
            if timed_out or not req.keep_background:
                # What the command left running in its group dies with it, unless asked otherwise.
                await kill_group_fully(child.pid)
            await child.exited()
            if not child.is_drained:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(PIPE_GRACE_SECONDS):
                        await child.drained()
        finally:
            if child.returncode is None:  # cancelled by the request's deadline
                kill_group(child.pid)
            child.close()
        return _result(_exit_code(child.returncode), timed_out, out, err, started)


class _Session:
    """One persistent bash; commands are run one at a time in it.

    Each command is written to the session's ``cmd.sh`` and bash is sent one line, ``. <dir>/run``: the run file
    sources ``cmd.sh`` with its output redirected to files and prints the session's marker with the exit status
    (``bash_process.py``). A line bash reads costs it a ``read(2)`` per byte, so the line is kept that short: the
    earlier line, the redirections and the marker spelled out, cost bash about 200 system calls a command.
    """

    def __init__(self, name: str, *, cwd: str, logger: logging.Logger) -> None:
        self.name = name
        self._cwd = cwd
        self._log = logger
        self._bash: BashProcess | None = None
        self._lock = asyncio.Lock()
        self._dir = tempfile.mkdtemp(prefix="sbx-session-")
        self._script, self._out_path, self._err_path, self._runner = (
            os.path.join(self._dir, n) for n in ("cmd.sh", "out", "err", "run")
        )
        self._marker = f"__sbx_done_{secrets.token_hex(8)}__"
        self._wake = f". {_quote_path(self._runner)}\n"
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed and (self._bash is None or self._bash.returncode is None)

    async def _start(self) -> BashProcess:
        if self._bash is None or self._bash.returncode is not None:
            if self._bash is not None:
                self._bash.close()
            runner = (
                f"source {_quote(self._script)} </dev/null >>{_quote(self._out_path)} 2>>{_quote(self._err_path)}\n"
                f"printf '%s %d\\n' {self._marker} $?\n"
            )
            if not _write_small(self._runner, runner):
                await asyncio.to_thread(_write_text, self._runner, runner)
            self._bash = BashProcess.start(
                ["bash", "--noprofile", "--norc"], cwd=self._cwd, marker=self._marker.encode()
            )
        return self._bash

    async def run(self, req: _ExecRequest) -> tuple[dict[str, Any], bytes]:
        if isinstance(req.command, list):
            raise bad_request("a session runs shell text: give cmd as a string")
        # The session's bash reads `export NAME=...` lines: a name that is not an identifier (a quote in it) would
        # leave bash mid-word, swallowing the lines after it, and the command would only end at its timeout.
        for name in req.env:
            if not _SHELL_NAME.fullmatch(name):
                raise bad_request(f"in a session, env names are shell identifiers ([A-Za-z_][A-Za-z0-9_]*): {name!r}")
        async with self._lock:
            started = time.monotonic()
            bash = await self._start()
            if not _write_small(self._script, req.command + "\n"):
                await asyncio.to_thread(_write_text, self._script, req.command + "\n")
            line = "".join(f"export {k}={_quote(v)}\n" for k, v in req.env.items())
            if req.cwd:
                line += f"cd {_quote(req.cwd)} || true\n"
            line += self._wake
            starts = [_output_start(path) for path in (self._out_path, self._err_path)]
            timed_out, exit_code, restarted = False, None, False
            try:
                answer = bash.expect()
                await bash.send(line.encode())
                async with asyncio.timeout(req.timeout):  # no task of its own, unlike wait_for (3.11)
                    exit_code = await answer
            except TimeoutError:
                timed_out = True
                exit_code, restarted = await self._interrupt(bash)
            except SessionEnded:
                restarted = True
                bash.close()
                self._bash = None
            out, err = _Output(req.max_output), _Output(req.max_output)
            for path, sink, start in ((self._out_path, out, starts[0]), (self._err_path, err, starts[1])):
                if not _read_small(path, sink, start):
                    await asyncio.to_thread(_read_capped, path, sink, start)
            return _result(exit_code, timed_out, out, err, started, session=self.name, session_restarted=restarted)

    async def _interrupt(self, bash: BashProcess) -> tuple[int | None, bool]:
        """Kill what the timed-out command started; restart the shell if that is not enough."""
        kill_descendants(bash.pid)
        try:
            async with asyncio.timeout(1.0):
                return await bash.expect(), False
        except (TimeoutError, SessionEnded):
            kill_group(bash.pid)
            await bash.wait()
            bash.close()
            self._bash = None
            return None, True

    async def close(self) -> None:
        self._closed = True
        if self._bash is not None:
            if self._bash.returncode is None:
                kill_group(self._bash.pid)
                await self._bash.wait()
            self._bash.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _write_small(path: str, text: str) -> bool:
    """Write a small regular file in the event loop; False (nothing written) when the text is large or the path is
    not a regular file: the caller then writes it in a thread. Never blocks (``O_NONBLOCK``: a FIFO put there by the
    sandbox's own processes is not waited on).

    The file is overwritten in place and then cut to its new length, never truncated to nothing first: on ext4 (and
    overlayfs on it, a container's /tmp) a file truncated to zero is flushed to disk when closed, and the next
    truncation waits for that write: ``O_TRUNC`` made each session command wait 0.6-1.2 ms (p50) for the disk."""
    data = text.encode()
    if not data or len(data) > SMALL_IO_BYTES:
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
        return True
    finally:
        os.close(fd)


def _output_start(path: str) -> int:
    """Where a command's output will begin in the session's output file ``path``, which bash appends to: its size
    now, or 0 after emptying it when it grew large (or is missing, or not a regular file)."""
    try:
        info = os.stat(path)
    except OSError:
        return 0
    if not stat.S_ISREG(info.st_mode):
        return 0
    if info.st_size > OUTPUT_FILE_ROTATE_BYTES:
        with contextlib.suppress(OSError):
            os.truncate(path, 0)
        return 0
    return info.st_size


def _read_small(path: str, sink: _Output, start: int = 0) -> bool:
    """Read a small regular file from ``start`` into ``sink`` in the event loop (a missing one is empty); False
    (nothing read) when that is large or it is not a regular file: the caller then reads it in a thread. A session's
    output is usually a few bytes, and handing it to a thread cost more CPU than the read (over a third of a no-spawn
    step's, before). A file now shorter than ``start`` (emptied meanwhile) is read from its beginning."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if info.st_size < start:
            start = 0
        if not stat.S_ISREG(info.st_mode) or info.st_size - start > SMALL_IO_BYTES:
            return False
        if info.st_size == start:
            return True
        while not sink.truncated and (chunk := os.pread(fd, 1 << 16, start)):  # it may grow meanwhile
            sink.add(chunk)
            start += len(chunk)
        return True
    finally:
        os.close(fd)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _quote_path(path: str) -> str:
    """``path`` as bash reads it: bare when it has only characters bash takes literally (shorter to read)."""
    return path if _PLAIN_PATH.fullmatch(path) else _quote(path)


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _read_capped(path: str, sink: _Output, start: int = 0) -> None:
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size >= start:
                f.seek(start)
            sink.add(f.read(sink.limit + 1))
    except FileNotFoundError:
        return
