"""Snapshots on a stock cluster: an archive of the sandbox's writable paths, kept by the control plane.

**Taking one** (``take_archive``): through the agent, ``tar`` packs ``/workspace`` and ``/home/sandbox`` (staying on
the container's own file system: shared volumes mounted below them are left out, as ``docker commit`` leaves volumes
out) into ``/tmp`` inside the pod; the control plane reads it back in chunks over the agent channel and writes
``<snapshot_dir>/<name>.tar.gz`` with ``<name>.json`` (the service's record, size and SHA-256) beside it. The
reference is ``archive:<name>``. ``snapshot_dir`` is a PVC mounted into the control plane (ReadWriteMany when
several replicas run), so no CSI snapshot support, registry or node access is needed.

**Starting from one** (``restore_archive``): a spec whose image is ``archive:<name>`` starts a pod of the kind's
image; before ``create`` returns, the archive is written into the pod in chunks and unpacked over ``/``. On a
desktop, the programs recorded in ``/home/sandbox/.config/sandbox/autostart`` (the windows open at snapshot time)
are then started as the entrypoint starts them at boot on Docker. Warm pools of a snapshot hold pods restored ahead
of time, so a reset to it is a swap, as on Docker.

**What a snapshot keeps, compared with Docker** (``docker commit`` keeps the container's whole file system):

- kept: every file under ``/workspace`` and ``/home/sandbox`` (the apps' settings, the shell history, the browser
  profile, the desktop's autostart list), with their modes and times; owners become the sandbox user;
- lost: files anywhere else (``/tmp``, ``/var``, anything installed system-wide: the sandbox user cannot write there
  anyway, except ``/tmp``), running processes and their memory (as on Docker), open windows' contents (the desktop's
  programs start again, with fresh windows: as on Docker); on a browser sandbox, Chromium is already running when
  the profile is unpacked, so the cookies and sessions of the snapshot apply once Chromium starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import BackendSnapshot
from sandbox.backends.kubernetes.manifests import ARCHIVE_PREFIX
from sandbox.errors import BackendError, InvalidArgument, NotFound, SandboxError

ARCHIVED = ("workspace", "home/sandbox/.")
"""The writable paths a snapshot keeps, relative to /. ``/.``: in the desktop image ``/home/sandbox`` is a link to
``/home/user``; tar follows it so, and unpacks through the same link."""
CHUNK = 16 * 1024 * 1024
"""Bytes per agent read or write (the agent serves at most 128 MiB at a time)."""
TAR_TIMEOUT_S = 900.0
AUTOSTART_FILE = "/home/sandbox/.config/sandbox/autostart"
"""Where a desktop snapshot records its programs (sandbox.service.autostart, which this layer may not import)."""
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")

# Starts each recorded program as images/common/lib.sh's run_autostart does at boot.
_AUTOSTART = f"""
file={AUTOSTART_FILE}
[ -f "$file" ] || exit 0
mkdir -p /tmp/sandbox-logs
i=0
while IFS= read -r line; do
    [ -n "$line" ] || continue
    i=$((i + 1))
    setsid bash -c "exec $line" >>"/tmp/sandbox-logs/autostart-$i.log" 2>&1 </dev/null &
done <"$file"
echo "$i"
"""


class ArchiveStore:
    """Snapshot archives in a directory of the control plane. Blocking file I/O runs in worker threads."""

    def __init__(self, root: str) -> None:
        self.root = root

    @staticmethod
    def safe_name(name: str) -> str:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip(".-_")[:200]
        if not _SAFE.match(safe):
            raise InvalidArgument(f"snapshot name {name!r} leaves nothing usable as a file name")
        return safe

    def name_of(self, ref: str) -> str:
        """The archive's name in an ``archive:<name>`` reference."""
        name = ref.removeprefix(ARCHIVE_PREFIX)
        if not ref.startswith(ARCHIVE_PREFIX) or not _SAFE.match(name):
            raise InvalidArgument(f"{ref!r} is not a snapshot archive reference (archive:<name>)")
        return name

    def archive_path(self, name: str) -> str:
        return os.path.join(self.root, f"{name}.tar.gz")

    def record_path(self, name: str) -> str:
        return os.path.join(self.root, f"{name}.json")

    async def require(self, name: str) -> None:
        if not await asyncio.to_thread(os.path.isfile, self.archive_path(name)):
            raise NotFound(f"no snapshot archive {name!r} in {self.root}")

    async def save(
        self, name: str, chunks: AsyncIterator[bytes], record: dict[str, Any] | None, *, sha256: str | None = None
    ) -> int:
        """Write the archive from ``chunks``, then its record: a reader sees the old pair or the new one. With
        ``sha256``, a copy whose digest differs is refused (and the old pair stays)."""
        await asyncio.to_thread(os.makedirs, self.root, 0o750, True)
        part = f"{self.archive_path(name)}.{secrets.token_hex(4)}.part"
        digest, size = hashlib.sha256(), 0
        f = await asyncio.to_thread(open, part, "wb")
        try:
            async for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                await asyncio.to_thread(f.write, chunk)
            await asyncio.to_thread(_sync_close, f)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise BackendError(f"the copy of snapshot {name} is corrupt ({size} bytes, SHA-256 differs)")
            await asyncio.to_thread(os.replace, part, self.archive_path(name))
        except BaseException:
            await asyncio.to_thread(f.close)
            with contextlib.suppress(OSError):
                await asyncio.to_thread(os.unlink, part)
            raise
        meta = {"ref": ARCHIVE_PREFIX + name, "bytes": size, "sha256": digest.hexdigest(), "created_at": time.time()}
        await asyncio.to_thread(_write_json, self.record_path(name), {**meta, "record": record})
        return size

    async def chunks(self, name: str) -> AsyncIterator[bytes]:
        await self.require(name)
        f = await asyncio.to_thread(open, self.archive_path(name), "rb")
        try:
            while chunk := await asyncio.to_thread(f.read, CHUNK):
                yield chunk
        finally:
            await asyncio.to_thread(f.close)

    async def entries(self) -> list[BackendSnapshot]:
        return await asyncio.to_thread(self._entries)

    def _entries(self) -> list[BackendSnapshot]:
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        found = []
        for entry in names:
            name = entry.removesuffix(".json")
            if not entry.endswith(".json") or not os.path.isfile(self.archive_path(name)):
                continue
            try:
                with open(self.record_path(name)) as f:
                    meta = json.load(f)
            except (OSError, ValueError):
                meta = {}
            record = meta.get("record") if isinstance(meta, dict) else None
            record = record if isinstance(record, dict) else None
            found.append(BackendSnapshot(ref=ARCHIVE_PREFIX + name, record=record))
        return found

    async def collect(self, *, keep: set[str], only: set[str] | None = None, min_age_s: float = 0.0) -> list[str]:
        """Remove every archive whose reference is not in ``keep`` (of ``only``, when given, and at least
        ``min_age_s`` old); returns the removed references."""
        removed = []
        now = time.time()
        for snapshot in await self.entries():
            if snapshot.ref in keep or (only is not None and snapshot.ref not in only):
                continue
            name = self.name_of(snapshot.ref)
            with contextlib.suppress(FileNotFoundError):
                if now - await asyncio.to_thread(os.path.getmtime, self.archive_path(name)) < min_age_s:
                    continue
            for path in (self.record_path(name), self.archive_path(name)):
                with contextlib.suppress(FileNotFoundError):
                    await asyncio.to_thread(os.unlink, path)
            removed.append(snapshot.ref)
        return removed


def _sync_close(f: Any) -> None:
    f.flush()
    os.fsync(f.fileno())
    f.close()


def _write_json(path: str, doc: dict[str, Any]) -> None:
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)


async def take_archive(agent: AgentClient, store: ArchiveStore, name: str, *, record: dict[str, Any] | None) -> int:
    """Pack the sandbox's writable paths inside it and copy the archive to ``store``; returns its size."""
    inside = f"/tmp/.sandbox-snapshot-{secrets.token_hex(6)}.tar.gz"
    tar = ["tar", "--create", "--gzip", f"--file={inside}", "--one-file-system", "--ignore-failed-read"]
    tar += ["--warning=no-file-changed", "--warning=no-file-removed", "--warning=no-file-ignored", "-C", "/"]
    # tar exit 1: a file changed while it was read (the sandbox keeps running); the digest checks the copy
    # each archived path as it resolves: an image may make /home/sandbox a link (to /home/user), and tar would pack
    # the link alone
    resolve = "for p in " + " ".join(ARCHIVED) + '; do r=$(readlink -f "/$p") || r="/$p"; set -- "$@" "${r#/}"; done; '
    script = resolve + 'tar "$@"; rc=$?; [ "$rc" -le 1 ] && sha256sum -- "$0"; exit $((rc > 1 ? rc : 0))'
    try:
        result = await agent.exec(["sh", "-c", script, inside, *tar[1:]], timeout=TAR_TIMEOUT_S)
        if result.exit_code != 0 or not result.stdout.strip():
            why = f"tar exit {result.exit_code}: {result.stderr[-500:]}"
            raise BackendError(f"packing the sandbox's files failed ({why})")
        digest = result.stdout.split()[0]

        async def chunks() -> AsyncIterator[bytes]:
            offset = 0
            while True:
                data = await agent.read_file(inside, offset=offset, length=CHUNK)
                if data:
                    yield data
                if len(data) < CHUNK:
                    return
                offset += len(data)

        return await store.save(name, chunks(), record, sha256=digest)
    finally:
        with contextlib.suppress(SandboxError):
            await asyncio.shield(agent.delete(inside))


async def restore_archive(agent: AgentClient, store: ArchiveStore, name: str, *, restart_programs: bool) -> None:
    """Unpack a snapshot archive over the sandbox's writable paths; with ``restart_programs`` (a desktop), start the
    programs the snapshot recorded."""
    inside = f"/tmp/.sandbox-restore-{secrets.token_hex(6)}.tar.gz"
    try:
        first = True
        async for chunk in store.chunks(name):
            await agent.write_file(inside, chunk, mode=0o600, append=not first)
            first = False
        # --keep-directory-symlink: an archive of a directory restored where the image has a link to one
        tar = [
            "tar",
            "--extract",
            "--gzip",
            f"--file={inside}",
            "-C",
            "/",
            "--no-same-owner",
            "--keep-directory-symlink",
        ]
        result = await agent.exec(tar, timeout=TAR_TIMEOUT_S)
        if result.exit_code != 0:
            why = f"tar exit {result.exit_code}: {result.stderr[-500:]}"
            raise BackendError(f"unpacking snapshot {name} failed ({why})")
    finally:
        with contextlib.suppress(SandboxError):
            await asyncio.shield(agent.delete(inside))
    if restart_programs:
        result = await agent.exec(["bash", "-c", _AUTOSTART], timeout=30, keep_background=True)
        if result.exit_code != 0:
            raise BackendError(f"starting the snapshot's programs failed: {result.stderr[-500:]}")
