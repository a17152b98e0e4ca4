"""SWE-ReX's ``AbstractRuntime`` over the platform's SDK: :class:`SandboxRuntime` acts inside one sandbox.

What it is built on, call by call:

- ``create_session`` / ``run_in_session`` / ``close_session``: a bash on a pseudo-terminal held by the helper's
  daemon in the sandbox, one platform exec an action (:mod:`sandbox.compat.swerex.session`);
- ``execute``: one platform exec of the helper, which runs the ``Command`` as ``subprocess.run`` does (a list or a
  shell string, ``env`` replacing the environment, ``cwd``, the timeout, stdout and stderr apart or merged);
- ``read_file`` / ``write_file``: the platform's file API (binary-safe, chunked) where it reaches (``/workspace``
  and ``/tmp``), else through the helper with the sandbox user's own rights;
- ``upload``: the file, or a directory as one tar, through the file API into a staging folder, then put in place
  by the helper as ``shutil.copy`` / ``shutil.copytree`` would;
- ``is_alive``: the sandbox's health.

The SDK calls run in worker threads over its blocking client (see :class:`~sandbox.compat.swerex.box.Box`).

Errors are SWE-ReX's own (``SessionExistsError``, ``CommandTimeoutError``, ...) or the built-in ``OSError`` a local
run raises (``FileNotFoundError``, ``IsADirectoryError``, ``FileExistsError``).
"""

from __future__ import annotations

import asyncio
import base64
import errno
import io
import logging
import os
import tarfile
import tempfile
from typing import Any

from swerex.exceptions import CommandTimeoutError, NonZeroExitCodeError, SessionDoesNotExistError, SessionExistsError
from swerex.runtime.abstract import (
    AbstractRuntime,
    BashAction,
    BashInterruptAction,
    BashObservation,
    CloseBashSessionRequest,
    CloseBashSessionResponse,
    CloseResponse,
    Command,
    CommandResponse,
    CreateBashSessionRequest,
    CreateBashSessionResponse,
    IsAliveResponse,
    ReadFileRequest,
    ReadFileResponse,
    UploadRequest,
    UploadResponse,
    WriteFileRequest,
    WriteFileResponse,
)

from sandbox.client import Sandbox
from sandbox.compat.swerex.box import MAX_EXEC_S, Box, os_error
from sandbox.compat.swerex.session import BashSession
from sandbox.errors import InvalidArgument, NotFound, PermissionDenied, SandboxError

LOGGER = logging.getLogger("sandbox.compat.swerex")


class SandboxRuntime(AbstractRuntime):
    """SWE-ReX's runtime inside a sandbox of this platform (a ``Sandbox``: ``Client.create`` gives one). Its methods
    may be awaited from any event loop, a new one each time too (as SWE-agent does).

    Closing it closes its sessions; the sandbox itself is the deployment's to delete."""

    def __init__(self, sandbox: Sandbox, *, logger: logging.Logger | None = None, python: str = "python3") -> None:
        """``python``: the sandbox's interpreter for the helper (it needs the standard library only)."""
        self.sandbox = sandbox
        self.logger = logger or LOGGER
        self._box = Box(sandbox, python=python)
        self._sessions: dict[str, BashSession] = {}

    @property
    def sessions(self) -> dict[str, BashSession]:
        return self._sessions

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        try:
            health = await asyncio.wait_for(self._box.health(), timeout)
        except (SandboxError, TimeoutError) as e:
            return IsAliveResponse(is_alive=False, message=f"sandbox {self.sandbox.id}: {e or 'no answer'}")
        message = "; ".join(f"{name}: {detail}" for name, detail in health.failures.items())
        return IsAliveResponse(is_alive=health.ok, message=message)

    async def create_session(self, request: CreateBashSessionRequest) -> CreateBashSessionResponse:
        if request.session in self._sessions:
            raise SessionExistsError(f"session {request.session} already exists")
        if not isinstance(request, CreateBashSessionRequest):
            raise ValueError(f"unknown session type: {request!r}")
        session = BashSession(self._box, request)
        self._sessions[request.session] = session  # as SWE-ReX does: a session whose start failed stays named
        return await session.start()

    async def run_in_session(self, action: BashAction | BashInterruptAction) -> BashObservation:
        session = self._sessions.get(action.session)
        if session is None:
            raise SessionDoesNotExistError(f"session {action.session!r} does not exist")
        return await session.run(action)

    async def close_session(self, request: CloseBashSessionRequest) -> CloseBashSessionResponse:
        session = self._sessions.pop(request.session, None)
        if session is None:
            raise SessionDoesNotExistError(f"session {request.session!r} does not exist")
        return await session.close()

    async def execute(self, command: Command) -> CommandResponse:
        request = {
            "command": command.command, "shell": command.shell, "timeout": command.timeout, "env": command.env,
            "cwd": command.cwd, "merge_output_streams": command.merge_output_streams,
        }  # fmt: skip
        wait = MAX_EXEC_S if command.timeout is None else command.timeout
        reply = await self._box.one_shot("execute", request, wait_s=wait)
        if reply.get("timeout"):
            raise CommandTimeoutError(f"Timeout ({command.timeout}s) exceeded while running command")
        if "error" in reply:
            raise os_error(reply["error"])
        response = CommandResponse(**reply)
        if command.check and response.exit_code != 0:
            message = (
                f"Command {command.command!r} failed with exit code {response.exit_code}. "
                f"Stdout:\n{response.stdout!r}\nStderr:\n{response.stderr!r}"
            )
            raise NonZeroExitCodeError(f"{command.error_msg}: {message}" if command.error_msg else message)
        return response

    async def read_file(self, request: ReadFileRequest) -> ReadFileResponse:
        try:
            data = await self._box.read(request.path)
        except PermissionDenied:  # outside the file API's roots: read as the sandbox's user
            reply = await self._box.one_shot("read", {"path": request.path})
            if "error" in reply:
                raise os_error(reply["error"]) from None
            data = base64.b64decode(reply["data"])
        except NotFound as e:
            raise _file_error(errno.ENOENT, request.path) from e
        except InvalidArgument as e:  # not a regular file: a directory, most likely
            raise _file_error(errno.EISDIR, request.path) from e
        # Text mode as Path.read_text reads: the encoding, the error handler, universal newlines.
        text = io.TextIOWrapper(io.BytesIO(data), encoding=request.encoding, errors=request.errors).read()
        return ReadFileResponse(content=text)

    async def write_file(self, request: WriteFileRequest) -> WriteFileResponse:
        data = request.content.encode()
        try:
            await self._box.write(request.path, data)
        except PermissionDenied:
            await self._put(data, request.path, mode=0o644)
        except InvalidArgument as e:
            raise _file_error(errno.EISDIR, request.path) from e
        return WriteFileResponse()

    async def upload(self, request: UploadRequest) -> UploadResponse:
        source = request.source_path
        if await asyncio.to_thread(os.path.isdir, source):
            archive = await asyncio.to_thread(_tar, source)
            try:
                staged = self._box.staging_path(".tar")
                await self._box.ship()
                await self._box.upload(archive, staged)
            finally:
                os.unlink(archive)
            reply = await self._box.one_shot("untar", {"staged": staged, "target": request.target_path})
        else:
            mode = (await asyncio.to_thread(os.stat, source)).st_mode & 0o7777  # FileNotFoundError, as shutil.copy
            staged = self._box.staging_path()
            await self._box.ship()
            await self._box.upload(source, staged)
            name = os.path.basename(source)
            reply = await self._box.one_shot(
                "copy", {"staged": staged, "target": request.target_path, "mode": mode, "name": name}
            )
        if "error" in reply:
            raise os_error(reply["error"])
        return UploadResponse()

    async def close(self) -> CloseResponse:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()
        await self._box.stop_sessions()
        return CloseResponse()

    async def _put(self, data: bytes, target: str, *, mode: int) -> None:
        staged = self._box.staging_path()
        await self._box.ship()
        await self._box.write(staged, data)
        request = {"staged": staged, "target": target, "mode": mode, "parents": True, "name": os.path.basename(target)}
        reply = await self._box.one_shot("copy", request)
        if "error" in reply:
            raise os_error(reply["error"])


def _file_error(code: int, path: str) -> OSError:
    cls: Any = {errno.ENOENT: FileNotFoundError, errno.EISDIR: IsADirectoryError}.get(code, OSError)
    error: OSError = cls(code, os.strerror(code), path)
    return error


def _tar(source: str) -> str:
    """The directory's tree as a tar file (its path): modes kept, symlinks followed, as ``shutil.copytree`` copies."""
    fd, path = tempfile.mkstemp(prefix="swerex-upload-", suffix=".tar")
    with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w", dereference=True) as archive:
        for name in sorted(os.listdir(source)):
            archive.add(os.path.join(source, name), arcname=name)
    return path
