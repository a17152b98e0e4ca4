"""The session daemon of the SWE-ReX runtime, inside the sandbox (standard library only): one bash per session on a
pseudo-terminal, and the interpreter of the terminal operations ``inbox.py call`` hands it over a unix socket.

Started by ``inbox.py serve DIR`` (an exec with ``keep_background``): it forks itself off (its own session, stdio on
/dev/null) and listens on ``DIR/sock`` until a ``shutdown`` request. Kept apart from ``inbox.py`` so that a ``call``,
one per action, imports only what it needs (json and a socket: a tenth of the interpreter's start-up).
"""

from __future__ import annotations

import codecs
import fcntl
import json
import os
import pty
import re
import select
import signal
import socketserver
import struct
import subprocess
import termios
import threading
import time
from typing import Any

ROWS, COLS = 24, 80
"""The terminal's size, as pexpect gives its children."""
READ_BYTES = 4096
SOCKET_NAME = "sock"
SERVE_READY_S = 10.0


class PtySession:
    """One bash on a pseudo-terminal, read only when an operation waits for output (as pexpect does)."""

    def __init__(self, env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the terminal's slave is its stdin/stdout/stderr and controlling terminal
            try:
                attrs = termios.tcgetattr(0)
                attrs[3] &= ~termios.ECHO
                termios.tcsetattr(0, termios.TCSANOW, attrs)
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
                os.execvpe("/usr/bin/env", ["/usr/bin/env", "bash"], {**os.environ, **env})
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.buffer = ""
        self.eof = False
        self.lock = threading.Lock()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")

    def _read(self, wait: float | None) -> bool:
        """Read what is there (waiting up to ``wait`` s for the first byte); False when nothing came."""
        if self.eof:
            return False
        ready, _, _ = select.select([self.fd], [], [], wait)
        if not ready:
            return False
        try:
            data = os.read(self.fd, READ_BYTES)
        except OSError:  # EIO: the shell and everything on its terminal are gone
            data = b""
        if not data:
            self.eof = True
            return False
        self.buffer += self._decoder.decode(data)
        return True

    def send(self, text: str) -> None:
        data = text.encode()
        while data:
            data = data[os.write(self.fd, data) :]

    def expect(self, patterns: list[str], timeout: float | None) -> dict[str, Any]:
        """Wait for the earliest match of any pattern (regular expressions, as pexpect takes strings); what came
        before it is ``before`` and the buffer keeps what follows it."""
        compiled = [re.compile(p, re.DOTALL) for p in patterns]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            best: tuple[int, int, re.Match[str]] | None = None
            for index, pattern in enumerate(compiled):
                found = pattern.search(self.buffer)
                if found and (best is None or found.start() < best[0]):
                    best = (found.start(), index, found)
            if best is not None:
                _, index, found = best
                before, self.buffer = self.buffer[: found.start()], self.buffer[found.end() :]
                return {"ok": True, "index": index, "before": before}
            if self.eof:
                before, self.buffer = self.buffer, ""
                return {"ok": False, "eof": True, "before": before}
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return {"ok": False, "timeout": True}
            self._read(left)

    def eat(self, wait: float) -> dict[str, Any]:
        """What arrives in the next ``wait`` s, read as pexpect's ``read_nonblocking()`` reads it: one byte, straight
        from the terminal (the buffer's unmatched text stays for the next ``expect``)."""
        time.sleep(wait)
        if self.eof or not select.select([self.fd], [], [], 0.1)[0]:
            return {"ok": True, "output": ""}
        try:
            data = os.read(self.fd, 1)
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return {"ok": False, "eof": True, "before": ""}
        return {"ok": True, "output": self._decoder.decode(data)}

    def echo_off(self) -> None:
        """Turn the terminal's echo off and wait until it is off (a program may have turned it on)."""
        attrs = termios.tcgetattr(self.fd)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(self.fd, termios.TCSANOW, attrs)
        while termios.tcgetattr(self.fd)[3] & termios.ECHO:
            time.sleep(0.1)

    def close(self) -> None:
        for sig in (signal.SIGHUP, signal.SIGCONT, signal.SIGINT):
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                break
        os.close(self.fd)
        time.sleep(0.1)
        try:
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def check_syntax(command: str) -> dict[str, Any]:
    """``bash -n`` on the command, fed as a here-document (so its messages name lines as bash names them then)."""
    end = "SBX_SWEREX_SYNTAX_END"
    run = subprocess.run(f"/usr/bin/env bash -n <<'{end}'\n{command}\n{end}", shell=True, capture_output=True)
    if run.returncode == 0:
        return {"ok": True}
    out, err = (b.decode(errors="backslashreplace") for b in (run.stdout, run.stderr))
    return {"ok": False, "syntax": {"exit_code": run.returncode, "stdout": out, "stderr": err}}


class Daemon:
    """The sessions by name, and the interpreter of the operations a ``call`` sends."""

    def __init__(self) -> None:
        self.sessions: dict[str, PtySession] = {}
        self.lock = threading.Lock()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request["session"]
        if request.get("open"):
            with self.lock:
                old = self.sessions.pop(name, None)
                self.sessions[name] = PtySession(request.get("env") or {})
            if old is not None:
                old.close()
        with self.lock:
            session = self.sessions.get(name)
        if session is None:
            return {"error": "no_session", "results": []}
        results: list[dict[str, Any]] = []
        with session.lock:
            for op in request.get("ops", []):
                result = self._do(session, op)
                results.append(result)
                if not result["ok"]:
                    break
        if request.get("close"):
            with self.lock:
                if self.sessions.get(name) is session:
                    del self.sessions[name]
            session.close()
        return {"results": results}

    def _do(self, session: PtySession, op: dict[str, Any]) -> dict[str, Any]:
        kind = op["op"]
        if kind == "send":
            session.send(op["data"])
            return {"ok": True}
        if kind == "control":  # Ctrl-<char>: c is the terminal's interrupt
            session.send(chr(ord(op["char"].lower()) & 0x1F))
            return {"ok": True}
        if kind == "expect":
            return session.expect(op["patterns"], op["timeout"])
        if kind == "eat":
            return session.eat(op["wait"])
        if kind == "sleep":
            time.sleep(op["seconds"])
            return {"ok": True}
        if kind == "syntax":
            return check_syntax(op["command"])
        if kind == "echo_off":
            session.echo_off()
            return {"ok": True}
        raise ValueError(f"unknown operation {kind!r}")


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        request = json.loads(self.rfile.readline())
        if request.get("shutdown"):
            reply: dict[str, Any] = {"results": []}
            threading.Thread(target=self.server.shutdown, daemon=True).start()
        else:
            try:
                reply = self.server.daemon.handle(request)
            except Exception as e:  # reported to the caller, the daemon lives on
                reply = {"error": f"{type(e).__name__}: {e}", "results": []}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        super().__init__(path, _Handler)
        self.daemon = Daemon()


def serve(directory: str) -> int:
    """Fork the daemon off (its own session, no terminal, stdio on /dev/null) and return once it listens."""
    path = os.path.join(directory, SOCKET_NAME)
    if os.path.exists(path):
        os.unlink(path)
    if os.fork() == 0:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        server = _Server(path)
        try:
            server.serve_forever()
        finally:
            for session in list(server.daemon.sessions.values()):
                session.close()
            os.unlink(path)
        os._exit(0)
    give_up = time.monotonic() + SERVE_READY_S
    while not os.path.exists(path):
        if time.monotonic() > give_up:
            print(f"the session daemon did not listen on {path} within {SERVE_READY_S:g} s", flush=True)
            return 1
        time.sleep(0.01)
    return 0
