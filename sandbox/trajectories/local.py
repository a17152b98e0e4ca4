"""The default trajectory store: a local directory (or a shared volume), one directory per trajectory.

    <root>/<tenant>/<trajectory id>/meta.json        the summary (TrajectoryInfo)
                                    steps.jsonl      one TrajectoryStep a line, in order
                                    frames/<sha256>.png|jpg   each distinct screenshot once
                                    media/<sha256>.mp4|bin    each medium (screen recording) once, listed in meta.json

Frames are named by the SHA-256 of their encoded bytes, so a screen that did not change between steps is kept
once. A ``zstd`` screenshot (the screen's raw pixels, compressed) is kept as the PNG of the same pixels, so every
frame of a trajectory is an image any viewer shows; the last conversion is remembered, for a screen that did not
change between steps. The summary is rewritten atomically (a temporary file, then a rename); steps are appended a
line at a time. One lock serialises the writes of this process; several control planes writing one trajectory at
once (a trajectory's steps served by different replicas on a shared volume) is not supported.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import io
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandbox.errors import InvalidArgument, NotFound
from sandbox.models import Screenshot
from sandbox.models.images import to_png
from sandbox.trajectories.base import TrajectoryStore
from sandbox.trajectories.models import (
    MAX_MEDIA_BYTES,
    MEDIA_TYPE,
    SHA256,
    TRAJECTORY_ID,
    FrameRef,
    MediaRef,
    Trajectory,
    TrajectoryInfo,
    TrajectoryStep,
)

META = "meta.json"
STEPS = "steps.jsonl"
FRAMES = "frames"
MEDIA = "media"
_MEDIA_EXTENSIONS = {"video/mp4": "mp4", "video/webm": "webm"}
_EXTENSIONS = {"png": "png", "jpeg": "jpg"}
_FORMATS = {ext: fmt for fmt, ext in _EXTENSIONS.items()}
_SAFE_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def tenant_dir(tenant: str) -> str:
    """A tenant's directory name: the tenant itself when it is a safe file name, else a hash of it."""
    if _SAFE_TENANT.match(tenant):
        return tenant
    return "t-" + hashlib.sha256(tenant.encode()).hexdigest()[:24]


def frame_hash(data: bytes) -> str:
    """A frame's name: the SHA-256 of its encoded bytes."""
    return hashlib.sha256(data).hexdigest()


def frame_name(sha256: str, format: str) -> str:
    return f"{sha256}.{_EXTENSIONS[format]}"


def media_file(ref: MediaRef) -> str:
    """A medium's file name in its trajectory's ``media/``: its hash, and an extension for its type."""
    return f"{ref.sha256}.{_MEDIA_EXTENSIONS.get(ref.content_type, 'bin')}"


def check_media(data: bytes, content_type: str) -> None:
    """``InvalidArgument`` for a medium no trajectory keeps: over ``MAX_MEDIA_BYTES``, or of no media type."""
    if len(data) > MAX_MEDIA_BYTES:
        raise InvalidArgument(
            f"a medium of {len(data) / 2**20:.1f} MiB is over the {MAX_MEDIA_BYTES >> 20} MiB a trajectory keeps"
        )
    if not MEDIA_TYPE.match(content_type):
        raise InvalidArgument(f"{content_type!r} is not a media type (such as video/mp4)")


def _check_id(trajectory_id: str) -> None:
    if not TRAJECTORY_ID.match(trajectory_id):
        raise InvalidArgument(f"{trajectory_id!r} is not a trajectory id (tr-<16 hex digits>)")


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class LocalTrajectoryStore(TrajectoryStore):
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.expanduser(root)).resolve()
        self._lock = threading.Lock()
        self._converted: tuple[bytes, Screenshot] | None = None  # the last zstd frame kept, and its PNG

    # ------------------------------------------------------------------ paths

    def _dir(self, tenant: str, trajectory_id: str) -> Path:
        _check_id(trajectory_id)
        return self.root / tenant_dir(tenant) / trajectory_id

    def _find(self, trajectory_id: str, tenant: str | None) -> Path | None:
        """The trajectory's directory, if it exists and is ``tenant``'s (any tenant's for None)."""
        _check_id(trajectory_id)
        if tenant is not None:
            candidates = [self.root / tenant_dir(tenant) / trajectory_id]
        else:
            candidates = sorted(self.root.glob(f"*/{trajectory_id}"))
        for path in candidates:
            meta = self._read_meta(path)
            if meta is not None and (tenant is None or meta.tenant == tenant):
                return path
        return None

    @staticmethod
    def _read_meta(path: Path) -> TrajectoryInfo | None:
        try:
            return TrajectoryInfo.model_validate_json((path / META).read_bytes())
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ writing

    async def create(self, info: TrajectoryInfo) -> None:
        await asyncio.to_thread(self._create, info)

    def _create(self, info: TrajectoryInfo) -> None:
        path = self._dir(info.tenant, info.id)
        (path / FRAMES).mkdir(parents=True, exist_ok=True)
        with self._lock:
            _write_atomic(path / META, info.model_dump_json(indent=1).encode())
            (path / STEPS).touch()

    async def append(
        self,
        tenant: str,
        trajectory_id: str,
        step: TrajectoryStep,
        frame: Screenshot | None = None,
        *,
        changes: Mapping[str, Any] | None = None,
    ) -> None:
        await asyncio.to_thread(self._append, tenant, trajectory_id, step, frame, dict(changes or {}))

    def _append(
        self, tenant: str, trajectory_id: str, step: TrajectoryStep, frame: Screenshot | None, changes: dict[str, Any]
    ) -> None:
        path = self._dir(tenant, trajectory_id)
        new_frame = False
        if frame is not None:
            frame = self._as_image(frame)
            ref = FrameRef(sha256=frame_hash(frame.data), format=frame.format, width=frame.width, height=frame.height)
            step = step.model_copy(update={"frame": ref})
            target = path / FRAMES / frame_name(ref.sha256, ref.format)
            if not target.exists():
                _write_atomic(target, frame.data)
                new_frame = True
        line = step.model_dump_json() + "\n"
        with self._lock:
            with open(path / STEPS, "a", encoding="utf-8") as f:
                f.write(line)
            meta = self._read_meta(path)
            if meta is not None:
                if new_frame:
                    changes["frames"] = meta.frames + 1
                self._write_meta(path, meta, changes)

    def _as_image(self, frame: Screenshot) -> Screenshot:
        """``frame`` as a PNG when it is ``zstd``: trajectories keep images (a thread's work, about 10 ms at
        1280x800)."""
        if frame.format != "zstd":
            return frame
        converted = self._converted
        if converted is not None and converted[0] == frame.data:
            return converted[1]
        png = frame.model_copy(update={"data": to_png(frame.data, frame.width, frame.height), "format": "png"})
        self._converted = (frame.data, png)
        return png

    async def attach_media(
        self,
        tenant: str,
        trajectory_id: str,
        data: bytes,
        *,
        content_type: str,
        name: str,
        started_at: float,
        ended_at: float | None = None,
    ) -> MediaRef:
        check_media(data, content_type)
        ref = MediaRef(
            sha256=frame_hash(data),
            content_type=content_type,
            size=len(data),
            name=name,
            started_at=started_at,
            ended_at=ended_at,
        )
        return await asyncio.to_thread(self._attach_media, tenant, trajectory_id, ref, data)

    def _attach_media(self, tenant: str, trajectory_id: str, ref: MediaRef, data: bytes) -> MediaRef:
        path = self._dir(tenant, trajectory_id)
        meta = self._read_meta(path)
        if meta is None or meta.tenant != tenant:
            raise NotFound(f"no trajectory {trajectory_id!r}")
        (path / MEDIA).mkdir(exist_ok=True)
        target = path / MEDIA / media_file(ref)
        if not target.exists():
            _write_atomic(target, data)
        with self._lock:
            meta = self._read_meta(path)
            if meta is None:
                raise NotFound(f"no trajectory {trajectory_id!r}")
            for kept in meta.media:
                if kept.sha256 == ref.sha256:
                    return kept
            self._write_meta(path, meta, {"media": [*meta.media, ref]})
        return ref

    async def warn(self, tenant: str, trajectory_id: str, message: str) -> None:
        await asyncio.to_thread(self._warn, tenant, trajectory_id, message)

    def _warn(self, tenant: str, trajectory_id: str, message: str) -> None:
        path = self._dir(tenant, trajectory_id)
        with self._lock:
            meta = self._read_meta(path)
            if meta is not None:
                self._write_meta(path, meta, {"warnings": [*meta.warnings, message]})

    async def update(self, tenant: str, trajectory_id: str, changes: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self._update, tenant, trajectory_id, dict(changes))

    def _update(self, tenant: str, trajectory_id: str, changes: dict[str, Any]) -> None:
        path = self._dir(tenant, trajectory_id)
        with self._lock:
            meta = self._read_meta(path)
            if meta is not None:
                self._write_meta(path, meta, changes)

    @staticmethod
    def _write_meta(path: Path, meta: TrajectoryInfo, changes: dict[str, Any]) -> None:
        if not changes:
            return
        updated = TrajectoryInfo.model_validate({**meta.model_dump(), **changes})
        _write_atomic(path / META, updated.model_dump_json(indent=1).encode())

    # ------------------------------------------------------------------ reading

    async def list(self, *, tenant: str | None, task_id: str | None = None) -> builtins.list[TrajectoryInfo]:
        return await asyncio.to_thread(self._list, tenant, task_id)

    def _list(self, tenant: str | None, task_id: str | None) -> builtins.list[TrajectoryInfo]:
        pattern = f"{tenant_dir(tenant)}/tr-*" if tenant is not None else "*/tr-*"
        found = []
        for path in self.root.glob(pattern):
            meta = self._read_meta(path)
            if meta is None or (tenant is not None and meta.tenant != tenant):
                continue
            if task_id is None or meta.task_id == task_id:
                found.append(meta)
        return sorted(found, key=lambda m: (m.started_at, m.id))

    async def get(self, trajectory_id: str, *, tenant: str | None) -> Trajectory | None:
        return await asyncio.to_thread(self._get, trajectory_id, tenant)

    def _get(self, trajectory_id: str, tenant: str | None) -> Trajectory | None:
        path = self._find(trajectory_id, tenant)
        if path is None:
            return None
        meta = self._read_meta(path)
        if meta is None:
            return None
        steps = []
        with contextlib.suppress(FileNotFoundError), open(path / STEPS, encoding="utf-8") as f:
            for line in f:
                with contextlib.suppress(ValueError):  # a line torn by a crash mid-write
                    steps.append(TrajectoryStep.model_validate_json(line))
        return Trajectory(info=meta, steps=steps)

    async def frame(self, trajectory_id: str, sha256: str, *, tenant: str | None) -> Screenshot | None:
        if not SHA256.match(sha256):
            raise InvalidArgument(f"{sha256!r} is not a frame's SHA-256 (64 lowercase hex digits)")
        return await asyncio.to_thread(self._frame, trajectory_id, sha256, tenant)

    def _frame(self, trajectory_id: str, sha256: str, tenant: str | None) -> Screenshot | None:
        path = self._find(trajectory_id, tenant)
        if path is None:
            return None
        for ext, fmt in _FORMATS.items():
            with contextlib.suppress(FileNotFoundError):
                data = (path / FRAMES / f"{sha256}.{ext}").read_bytes()
                width, height = _image_size(data)
                return Screenshot.model_validate({"data": data, "width": width, "height": height, "format": fmt})
        return None

    async def media(
        self, trajectory_id: str, sha256: str, *, tenant: str | None, offset: int = 0, length: int | None = None
    ) -> tuple[MediaRef, bytes] | None:
        if not SHA256.match(sha256):
            raise InvalidArgument(f"{sha256!r} is not a medium's SHA-256 (64 lowercase hex digits)")
        if offset < 0 or (length is not None and length < 0):
            raise InvalidArgument("offset and length must be >= 0")
        return await asyncio.to_thread(self._media, trajectory_id, sha256, tenant, offset, length)

    def _media(
        self, trajectory_id: str, sha256: str, tenant: str | None, offset: int, length: int | None
    ) -> tuple[MediaRef, bytes] | None:
        path = self._find(trajectory_id, tenant)
        meta = None if path is None else self._read_meta(path)
        ref = next((m for m in meta.media if m.sha256 == sha256), None) if meta is not None else None
        if path is None or ref is None:
            return None
        try:
            with open(path / MEDIA / media_file(ref), "rb") as f:
                f.seek(offset)
                return ref, f.read(-1 if length is None else length)
        except FileNotFoundError:
            return None

    async def delete(self, trajectory_id: str, *, tenant: str | None) -> bool:
        return await asyncio.to_thread(self._delete, trajectory_id, tenant)

    def _delete(self, trajectory_id: str, tenant: str | None) -> bool:
        path = self._find(trajectory_id, tenant)
        if path is None:
            return False
        with self._lock:
            shutil.rmtree(path, ignore_errors=True)
        return True


def _image_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
    return int(width), int(height)
