"""The trajectory store's interface: where the service records every step of every episode.

A store keeps each trajectory's summary, its steps in order, its frames (screenshots) once per distinct content,
and its media (screen recordings: ``TrajectoryInfo.media``) up to ``MAX_MEDIA_BYTES`` each. Every call names the
tenant it acts for; ``tenant=None`` (an admin) reaches every tenant's. The local directory store
(:mod:`sandbox.trajectories.local`) is the default; another (object storage, a database) only has to implement
this class.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Mapping
from typing import Any

from sandbox.models import Screenshot
from sandbox.trajectories.models import MediaRef, Trajectory, TrajectoryInfo, TrajectoryStep


class TrajectoryStore(abc.ABC):
    @abc.abstractmethod
    async def create(self, info: TrajectoryInfo) -> None:
        """Start a trajectory (its id is new)."""

    @abc.abstractmethod
    async def append(
        self,
        tenant: str,
        trajectory_id: str,
        step: TrajectoryStep,
        frame: Screenshot | None = None,
        *,
        changes: Mapping[str, Any] | None = None,
    ) -> None:
        """Add ``step`` to the trajectory with its screenshot ``frame`` (kept once per content, named in the step's
        ``frame`` by its SHA-256), and apply ``changes`` to the summary (steps, done, reason, ...)."""

    @abc.abstractmethod
    async def update(self, tenant: str, trajectory_id: str, changes: Mapping[str, Any]) -> None:
        """Change fields of the summary (the reward after an evaluation, the end)."""

    @abc.abstractmethod
    async def list(self, *, tenant: str | None, task_id: str | None = None) -> builtins.list[TrajectoryInfo]:
        """The summaries of ``tenant``'s trajectories (every tenant's for None), of ``task_id`` if given, oldest
        first."""

    @abc.abstractmethod
    async def get(self, trajectory_id: str, *, tenant: str | None) -> Trajectory | None:
        """A trajectory with its steps; None when there is none of that id (or not ``tenant``'s)."""

    @abc.abstractmethod
    async def frame(self, trajectory_id: str, sha256: str, *, tenant: str | None) -> Screenshot | None:
        """One frame of a trajectory by its content hash; None when there is none."""

    @abc.abstractmethod
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
        """Keep ``data`` with the trajectory (once per content) and list it in the summary's ``media``; the ref.
        ``InvalidArgument`` when it is larger than ``MAX_MEDIA_BYTES``, ``NotFound`` when there is no such
        trajectory of ``tenant``."""

    @abc.abstractmethod
    async def warn(self, tenant: str, trajectory_id: str, message: str) -> None:
        """Add ``message`` to the summary's ``warnings`` (something lost while recording; the episode went on)."""

    @abc.abstractmethod
    async def media(
        self, trajectory_id: str, sha256: str, *, tenant: str | None, offset: int = 0, length: int | None = None
    ) -> tuple[MediaRef, bytes] | None:
        """A medium of a trajectory by its hash: its ref and its bytes from ``offset`` (``length`` of them, or to the
        end); None when there is none (or not ``tenant``'s)."""

    @abc.abstractmethod
    async def delete(self, trajectory_id: str, *, tenant: str | None) -> bool:
        """Remove a trajectory, its frames and its media; False when there was none."""

    async def close(self) -> None:  # noqa: B027 - nothing to release unless a store holds connections
        """Release what the store holds."""
