"""The half of the SWE-ReX runtime that runs inside the sandbox, under the image's ``python3`` (standard library only).

The platform's exec runs one command to its end (its sessions keep a shell's cwd and variables, not a running
program), while SWE-ReX's bash session is an interactive bash on a pseudo-terminal: a command that times out keeps
running until an interrupt (Ctrl-C on the terminal) stops it, and an interactive program (``python3``, ``gdb``) reads
the next action's line. So :class:`~sandbox.compat.swerex.runtime.SandboxRuntime` ships this file into the sandbox
and starts it once as a daemon (``serve``, an exec with ``keep_background``) that holds one bash per session on a
pseudo-terminal; every action is then one platform exec of ``call``, which hands the daemon a short program of
terminal operations (send a line, Ctrl-C, wait for one of these patterns for so long, ...) over a unix socket and
prints the results as JSON. One-shot work needs no daemon: ``execute`` (a ``Command``, run as ``subprocess.run``
runs it), ``read`` (a file outside the file API's roots), ``copy`` and ``untar`` (the end of an upload).

Usage: ``python3 inbox.py serve DIR | call DIR REQUEST | execute REQUEST | read REQUEST | copy REQUEST |
untar REQUEST``, where REQUEST is JSON, or ``@PATH`` of a file holding it (removed once read).
"""

from __future__ import annotations

import base64
import codecs
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tarfile
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
            print(f"the session daemon did not listen on {path} within {SERVE_READY_S:g} s", file=sys.stderr)
            return 1
        time.sleep(0.01)
    return 0


def call(directory: str, request: dict[str, Any]) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(os.path.join(directory, SOCKET_NAME))
        s.sendall(json.dumps(request).encode() + b"\n")
        with s.makefile("rb") as reply:
            sys.stdout.write(reply.readline().decode())
    return 0


def _error(e: OSError) -> dict[str, Any]:
    return {"error": {"type": type(e).__name__, "errno": e.errno, "strerror": e.strerror, "filename": e.filename}}


def execute(request: dict[str, Any]) -> dict[str, Any]:
    """A ``Command`` as ``subprocess.run`` runs it (a list or a shell string, ``env`` replacing the environment)."""
    try:
        run = subprocess.run(
            request["command"], shell=request["shell"], timeout=request["timeout"], env=request["env"],
            cwd=request["cwd"], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if request["merge_output_streams"] else subprocess.PIPE,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"timeout": True}
    except OSError as e:
        return _error(e)
    return {
        "stdout": run.stdout.decode(errors="backslashreplace"),
        "stderr": run.stderr.decode(errors="backslashreplace") if run.stderr is not None else "",
        "exit_code": run.returncode,
    }


def read(request: dict[str, Any]) -> dict[str, Any]:
    try:
        with open(request["path"], "rb") as f:
            return {"data": base64.b64encode(f.read()).decode()}
    except OSError as e:
        return _error(e)


def copy(request: dict[str, Any]) -> dict[str, Any]:
    """Put a staged file in place as ``shutil.copy`` would (into a directory that is there; its mode kept), making
    the parents when ``parents``; the staged file is removed."""
    try:
        if request.get("parents"):
            os.makedirs(os.path.dirname(request["target"]) or ".", exist_ok=True)
        target = request["target"]
        if os.path.isdir(target):
            target = os.path.join(target, request["name"])
        os.chmod(request["staged"], request["mode"])
        shutil.copy(request["staged"], target)
    except OSError as e:
        return _error(e)
    finally:
        os.unlink(request["staged"])
    return {}


def untar(request: dict[str, Any]) -> dict[str, Any]:
    """Unpack a staged tree as ``shutil.copytree`` would make it: a target that is there already is refused."""
    try:
        os.makedirs(request["target"], exist_ok=False)
        with tarfile.open(request["staged"]) as archive:
            if hasattr(tarfile, "tar_filter"):
                archive.extractall(request["target"], filter="tar")
            else:  # pragma: no cover - a Python without extraction filters
                archive.extractall(request["target"])
    except OSError as e:
        return _error(e)
    finally:
        os.unlink(request["staged"])
    return {}


def _request(raw: str) -> dict[str, Any]:
    if raw.startswith("@"):
        with open(raw[1:], encoding="utf-8") as f:
            text = f.read()
        os.unlink(raw[1:])
        return dict(json.loads(text))
    return dict(json.loads(raw))


def main(argv: list[str]) -> int:
    command = argv[0]
    if command == "serve":
        return serve(argv[1])
    if command == "call":
        return call(argv[1], _request(argv[2]))
    one_shot = {"execute": execute, "read": read, "copy": copy, "untar": untar}[command]
    sys.stdout.write(json.dumps(one_shot(_request(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
