"""Files in and out of a sandbox anywhere its user may write, not only under the file API's roots: a path the
runtime's file calls refuse is staged through ``/tmp`` and moved with ``exec``."""

from __future__ import annotations

import posixpath
import secrets
import shlex

from sandbox.errors import InvalidArgument, NotFound, PermissionDenied
from sandbox.tasks.errors import TaskError
from sandbox.tasks.osworld import STATE_DIR
from sandbox.tasks.runtime import TaskRuntime

STAGE_DIR = f"{STATE_DIR}/stage"


async def put_file(runtime: TaskRuntime, path: str, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` in the sandbox, making its parent folders."""
    try:
        await runtime.write_file(path, data, mode=mode)
        return
    except PermissionDenied:
        pass
    staged = f"{STAGE_DIR}/{secrets.token_hex(8)}"
    await runtime.write_file(staged, data, mode=mode)
    parent = posixpath.dirname(path) or "/"
    line = f"mkdir -p -- {shlex.quote(parent)} && mv -f -- {shlex.quote(staged)} {shlex.quote(path)}"
    result = await runtime.exec(line, timeout=60)
    if not result.ok:
        await runtime.exec(f"rm -f -- {shlex.quote(staged)}", timeout=30)
        raise TaskError(f"cannot write {path} in the sandbox: {result.stderr.strip() or result.exit_code}")


async def get_file(runtime: TaskRuntime, path: str) -> bytes | None:
    """The bytes of the file at ``path`` in the sandbox, or None when there is no such file."""
    try:
        return await runtime.read_file(path)
    except NotFound:
        return None
    except PermissionDenied:
        pass
    except InvalidArgument:  # a folder, a device: not a file to read
        return None
    staged = f"{STAGE_DIR}/{secrets.token_hex(8)}"
    quoted = shlex.quote(path)
    line = f"[ -f {quoted} ] || exit 3; mkdir -p {STAGE_DIR} && cp -- {quoted} {shlex.quote(staged)}"
    result = await runtime.exec(line, timeout=60)
    if result.exit_code == 3:
        return None
    if not result.ok:
        raise TaskError(f"cannot read {path} in the sandbox: {result.stderr.strip() or result.exit_code}")
    try:
        return await runtime.read_file(staged)
    finally:
        await runtime.exec(f"rm -f -- {shlex.quote(staged)}", timeout=30)
