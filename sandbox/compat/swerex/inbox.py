"""The half of the SWE-ReX runtime that runs inside the sandbox, under the image's ``python3`` (standard library only).

The platform's exec runs one command to its end (its sessions keep a shell's cwd and variables, not a running
program), while SWE-ReX's bash session is an interactive bash on a pseudo-terminal: a command that times out keeps
running until an interrupt (Ctrl-C on the terminal) stops it, and an interactive program (``python3``, ``gdb``) reads
the next action's line. So :class:`~sandbox.compat.swerex.runtime.SandboxRuntime` ships this file and its daemon
(``ptyd.py``) into the sandbox and starts the daemon once (``serve``, an exec with ``keep_background``), which holds
one bash per session on a pseudo-terminal; every action is then one platform exec of ``call``, which hands it a
short program of terminal operations (send a line, Ctrl-C, wait for one of these patterns for so long, ...) over a
unix socket and prints the results as JSON. One-shot work needs no daemon: ``execute`` (a ``Command``, run as
``subprocess.run`` runs it), ``read`` (a file outside the file API's roots), ``copy`` and ``untar`` (the end of an
upload). This file imports little (json, a socket): a ``call`` is made for every action.

Usage: ``python3 inbox.py serve DIR | call DIR REQUEST | execute REQUEST | read REQUEST | copy REQUEST |
untar REQUEST``, where REQUEST is JSON, or ``@PATH`` of a file holding it (removed once read).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

SOCKET_NAME = "sock"


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
    import subprocess

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
    import base64

    try:
        with open(request["path"], "rb") as f:
            return {"data": base64.b64encode(f.read()).decode()}
    except OSError as e:
        return _error(e)


def copy(request: dict[str, Any]) -> dict[str, Any]:
    """Put a staged file in place as ``shutil.copy`` would (into a directory that is there; its mode kept), making
    the parents when ``parents``; the staged file is removed."""
    import shutil

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
    import tarfile

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
        from ptyd import serve  # beside this file (sys.path[0])

        return serve(argv[1])
    if command == "call":
        return call(argv[1], _request(argv[2]))
    one_shot = {"execute": execute, "read": read, "copy": copy, "untar": untar}[command]
    sys.stdout.write(json.dumps(one_shot(_request(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
