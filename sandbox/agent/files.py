"""File operations confined to allowed roots.

A path is refused when it has a ``..`` component, or when it resolves (following
symlinks) outside every root. The last component is opened with ``O_NOFOLLOW`` so a
symlink swapped in after the check cannot redirect the operation.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from typing import Any

from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.protocol import MAX_READ_BYTES, ErrorCode

MAX_LIST_ENTRIES = 10_000


def _denied(message: str) -> AgentError:
    return AgentError(ErrorCode.PERMISSION_DENIED, message)


class Files:
    def __init__(self, *, roots: Sequence[str], default_dir: str) -> None:
        if not roots:
            raise ValueError("at least one allowed root is needed")
        self._roots = [os.path.realpath(r) for r in roots]
        self._default_dir = default_dir

    @property
    def roots(self) -> list[str]:
        return list(self._roots)

    def resolve(self, raw: object) -> str:
        """Return the real absolute path for ``raw``, or raise if it leaves the roots."""
        if not isinstance(raw, str) or not raw:
            raise bad_request("path must be a non-empty string")
        if "\x00" in raw:
            raise bad_request("path must not contain NUL")
        if ".." in raw.replace("\\", "/").split("/"):
            raise _denied(f"path {raw!r} uses '..' traversal, which is not allowed")
        absolute = raw if os.path.isabs(raw) else os.path.join(self._default_dir, raw)
        real = os.path.realpath(absolute)
        if not any(real == root or real.startswith(root + os.sep) for root in self._roots):
            via = " through a symlink" if real != os.path.normpath(absolute) else ""
            raise _denied(f"path {raw!r} resolves{via} to {real!r}, outside the allowed roots {self._roots}")
        return real

    async def read(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        path = self.resolve(args.get("path"))
        offset = int(require(args, "offset", int, 0))
        length = require(args, "length", int, None)
        if offset < 0 or (length is not None and length < 0):
            raise bad_request("offset and length must not be negative")
        return await asyncio.to_thread(self._read, path, offset, length)

    def _read(self, path: str, offset: int, length: int | None) -> tuple[dict[str, Any], bytes]:
        fd = self._open(path, os.O_RDONLY)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # checked before fdopen, which refuses a directory with IsADirectoryError
            os.close(fd)
            raise bad_request(f"{path!r} is not a regular file")
        with os.fdopen(fd, "rb") as f:
            want = info.st_size - offset if length is None else length
            if want > MAX_READ_BYTES:
                raise AgentError(
                    ErrorCode.TOO_LARGE,
                    f"{path!r} has {info.st_size} bytes; read at most {MAX_READ_BYTES} at a time with offset/length",
                )
            f.seek(min(offset, info.st_size))  # past the end: nothing to read (and lseek refuses a huge offset)
            data = f.read(max(want, 0))
        return {"path": path, "size": info.st_size, "offset": offset, "length": len(data)}, data

    async def write(self, args: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
        path = self.resolve(args.get("path"))
        mode = int(require(args, "mode", int, 0o644))
        append = bool(require(args, "append", bool, False))
        parents = bool(require(args, "make_parents", bool, True))
        if not 0 <= mode <= 0o7777:
            raise bad_request("mode must be a permission number such as 420 (0o644)")
        return await asyncio.to_thread(self._write, path, data, mode, append, parents)

    def _write(self, path: str, data: bytes, mode: int, append: bool, parents: bool) -> tuple[dict[str, Any], bytes]:
        parent = os.path.dirname(path)
        if parents:
            os.makedirs(parent, exist_ok=True)
        elif not os.path.isdir(parent):
            raise AgentError(ErrorCode.NOT_FOUND, f"directory {parent!r} does not exist")
        if append:
            fd = self._open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                size = os.fstat(f.fileno()).st_size
            return {"path": path, "size": size}, b""
        if os.path.isdir(path):
            raise bad_request(f"{path!r} is a directory")
        # Write beside the target and rename: a reader never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".sbx-write-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return {"path": path, "size": len(data)}, b""

    async def list_dir(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        path = self.resolve(args.get("path", self._default_dir))
        return await asyncio.to_thread(self._list, path)

    def _list(self, path: str) -> tuple[dict[str, Any], bytes]:
        if not os.path.isdir(path):
            raise AgentError(ErrorCode.NOT_FOUND, f"{path!r} is not a directory")
        entries: list[dict[str, Any]] = []
        with os.scandir(path) as it:
            for entry in it:
                if len(entries) >= MAX_LIST_ENTRIES:
                    break
                entries.append(_describe(entry.path, entry.stat(follow_symlinks=False)))
        entries.sort(key=lambda e: e["name"])
        return {"path": path, "entries": entries, "truncated": len(entries) >= MAX_LIST_ENTRIES}, b""

    async def stat(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        path = self.resolve(args.get("path"))
        try:
            info = await asyncio.to_thread(os.lstat, path)
        except FileNotFoundError as e:
            raise AgentError(ErrorCode.NOT_FOUND, f"{path!r} does not exist") from e
        return _describe(path, info), b""

    async def delete(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        path = self.resolve(args.get("path"))
        recursive = bool(require(args, "recursive", bool, False))
        if path in self._roots:
            raise _denied(f"{path!r} is an allowed root and cannot be deleted")
        return await asyncio.to_thread(self._delete, path, recursive)

    def _delete(self, path: str, recursive: bool) -> tuple[dict[str, Any], bytes]:
        if not os.path.lexists(path):
            raise AgentError(ErrorCode.NOT_FOUND, f"{path!r} does not exist")
        if os.path.isdir(path) and not os.path.islink(path):
            if not recursive:
                raise bad_request(f"{path!r} is a directory; pass recursive=true")
            shutil.rmtree(path)
        else:
            os.unlink(path)
        return {"deleted": path}, b""

    async def mkdir(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        path = self.resolve(args.get("path"))
        await asyncio.to_thread(os.makedirs, path, exist_ok=True)
        return {"path": path}, b""

    def _open(self, path: str, flags: int, mode: int = 0o644) -> int:
        """Open a regular file. ``O_NONBLOCK`` first: a FIFO (or a device) planted in a root must not hold the call
        until a peer that never comes opens its other end; it is refused once opened, and a regular file goes back
        to blocking I/O."""
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
        except FileNotFoundError as e:
            raise AgentError(ErrorCode.NOT_FOUND, f"{path!r} does not exist") from e
        except IsADirectoryError as e:
            raise bad_request(f"{path!r} is a directory") from e
        except PermissionError as e:
            raise _denied(f"no permission for {path!r}: {e.strerror}") from e
        except OSError as e:  # ELOOP: the last component became a symlink after the check; ENXIO: a FIFO, no reader
            raise _denied(f"cannot open {path!r}: {e.strerror}") from e
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            os.close(fd)
            raise bad_request(f"{path!r} is not a regular file")
        os.set_blocking(fd, True)
        return fd

    async def check(self) -> dict[str, Any]:
        ok = os.access(self._default_dir, os.W_OK)
        return {"ok": ok, "detail": f"{self._default_dir} {'is' if ok else 'is not'} writable"}


def _describe(path: str, info: os.stat_result) -> dict[str, Any]:
    if stat.S_ISLNK(info.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(info.st_mode):
        kind = "dir"
    elif stat.S_ISREG(info.st_mode):
        kind = "file"
    else:
        kind = "other"
    return {
        "name": os.path.basename(path),
        "path": path,
        "type": kind,
        "size": info.st_size,
        "mode": stat.S_IMODE(info.st_mode),
        "mtime": info.st_mtime,
    }
