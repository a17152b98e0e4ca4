"""Trajectories through the service: recording an episode's steps, and listing, reading and deleting them.

The store (``sandbox.trajectories``) is optional: a service made without one records nothing, and its
trajectory calls say so. A failure to record is logged, never the caller's error: the episode goes on.
"""

from __future__ import annotations

import time
from typing import Any

from sandbox.errors import FailedPrecondition, NotFound, SandboxError
from sandbox.models import Action, Observation, Screenshot
from sandbox.service.auth import Principal
from sandbox.service.core import _ids
from sandbox.service.records import EpisodeRecord, SandboxRecord
from sandbox.service.snapshots import SnapshotOps
from sandbox.trajectories import Trajectory, TrajectoryInfo, TrajectoryStep, TrajectoryStore


class TrajectoryOps(SnapshotOps):
    trajectories: TrajectoryStore | None = None
    """Where episodes are recorded; None: nowhere."""

    # ------------------------------------------------------------------ recording

    async def _start_trajectory(self, record: SandboxRecord, episode: EpisodeRecord, image: str) -> None:
        if self.trajectories is None:
            return
        info = TrajectoryInfo(
            id=episode.trajectory_id,
            tenant=record.tenant,
            sandbox_id=record.id,
            kind=record.spec.kind,
            instance=record.instance,
            image=image,
            task_id=episode.task_id,
            task_digest=episode.digest,
            started_at=episode.started_at,
        )
        try:
            await self.trajectories.create(info)
        except (OSError, SandboxError) as e:
            self._log.warning("cannot record trajectory %s: %s", info.id, e, extra=_ids(record))

    async def _record_step(
        self,
        record: SandboxRecord,
        episode: EpisodeRecord,
        index: int,
        action: Action | None,
        obs: Observation,
        *,
        changes: dict[str, Any] | None = None,
    ) -> None:
        """Keep one step: the action, the observation without its image, and the image once per content."""
        if self.trajectories is None:
            return
        step = TrajectoryStep(
            index=index,
            at=time.time(),
            action=None if action is None else action.model_dump(mode="json"),
            observation=obs.model_copy(update={"screenshot": None}),
        )
        try:
            await self.trajectories.append(record.tenant, episode.trajectory_id, step, obs.screenshot, changes=changes)
        except (OSError, SandboxError) as e:
            self._log.warning(
                "cannot record step %d of trajectory %s: %s", index, episode.trajectory_id, e, extra=_ids(record)
            )

    async def _note_trajectory(self, record: SandboxRecord, episode: EpisodeRecord, changes: dict[str, Any]) -> None:
        if self.trajectories is None:
            return
        try:
            await self.trajectories.update(record.tenant, episode.trajectory_id, changes)
        except (OSError, SandboxError) as e:
            self._log.warning("cannot update trajectory %s: %s", episode.trajectory_id, e, extra=_ids(record))

    # ------------------------------------------------------------------ the API

    def _trajectory_store(self) -> TrajectoryStore:
        if self.trajectories is None:
            raise FailedPrecondition("this control plane records no trajectories (trajectories.enabled is false)")
        return self.trajectories

    async def list_trajectories(self, principal: Principal, *, task_id: str | None = None) -> list[TrajectoryInfo]:
        """The caller's trajectories (every tenant's for an admin), of ``task_id`` if given, oldest first."""
        return await self._trajectory_store().list(tenant=_tenant(principal), task_id=task_id)

    async def get_trajectory(self, principal: Principal, trajectory_id: str) -> Trajectory:
        found = await self._trajectory_store().get(trajectory_id, tenant=_tenant(principal))
        if found is None:
            raise NotFound(f"no trajectory {trajectory_id!r}")
        return found

    async def trajectory_frame(self, principal: Principal, trajectory_id: str, sha256: str) -> Screenshot:
        """One screenshot of a trajectory, by the hash its steps name (``TrajectoryStep.frame.sha256``)."""
        found = await self._trajectory_store().frame(trajectory_id, sha256, tenant=_tenant(principal))
        if found is None:
            raise NotFound(f"no frame {sha256!r} in trajectory {trajectory_id!r}")
        return found

    async def delete_trajectory(self, principal: Principal, trajectory_id: str) -> None:
        if not await self._trajectory_store().delete(trajectory_id, tenant=_tenant(principal)):
            raise NotFound(f"no trajectory {trajectory_id!r}")


def _tenant(principal: Principal) -> str | None:
    """The tenant whose trajectories the caller reaches: its own, or every tenant's (None) for an admin."""
    return None if principal.admin else principal.tenant
