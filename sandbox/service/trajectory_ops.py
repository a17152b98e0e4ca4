"""Trajectories through the service: recording an episode's steps (and, asked for, its screen), and listing,
reading and deleting them.

The store (``sandbox.trajectories``) is optional: a service made without one records nothing, and its
trajectory calls say so. A failure to record is logged, never the caller's error: the episode goes on.

Screen recordings (``reset(task, record=True)``, android sandboxes only): the agent's ``record_start`` (``adb shell
screenrecord``) once the task is set up, before the first observation; its ``record_stop`` (the MP4) at the
episode's end (DONE, FAIL, a limit) or at the reset that replaces it, kept with the trajectory as a medium
(``TrajectoryInfo.media``). ``screenrecord`` stops by itself after 180 s, so a step that comes 150 s or more
after its segment began stops it and starts the next (a gap when no step comes before the 180 s are up). A
recording that fails to start or is lost at its stop is a warning in the trajectory and the log, and
``sandbox_recordings_total{outcome="failed"}``; the episode goes on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from sandbox.errors import FailedPrecondition, InvalidArgument, NotFound, SandboxError, Unavailable
from sandbox.models import Action, Observation, SandboxKind, Screenshot
from sandbox.observability.metrics import Metrics
from sandbox.service.auth import Principal
from sandbox.service.core import Records, _ids
from sandbox.service.records import EpisodeRecord, SandboxRecord
from sandbox.trajectories import MediaRef, Trajectory, TrajectoryInfo, TrajectoryStep, TrajectoryStore

RECORDING_KINDS = (SandboxKind.ANDROID,)
"""The kinds whose agent records the screen (android: ``screenrecord``)."""
SCREENRECORD_LIMIT_S = 180.0
"""``screenrecord`` stops by itself after this long (its own maximum)."""
RECORD_SEGMENT_S = 150.0
"""A step this long after the running segment began stops it and starts the next."""
RECORD_NEEDS_A_TASK = "record is for a reset to a task: its screen recording is kept with the episode's trajectory"
RECORD_START_S = 30.0
RECORD_STOP_S = 150.0
"""The agent's record_stop: screenrecord's exit (10 s at most), then the MP4 copied off the device (120 s at most)."""


class Recorder:
    def __init__(
        self, *, trajectories: TrajectoryStore | None, records: Records, metrics: Metrics, logger: logging.Logger
    ) -> None:
        self.trajectories = trajectories
        """Where episodes are recorded; None: nowhere."""
        self.records = records
        self.metrics = metrics
        self._log = logger

    # ------------------------------------------------------------------ recording

    async def start_trajectory(
        self, record: SandboxRecord, episode: EpisodeRecord, image: str, *, warnings: list[str] | None = None
    ) -> None:
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
            warnings=warnings or [],
        )
        try:
            await self.trajectories.create(info)
        except (OSError, SandboxError) as e:
            self._log.warning("cannot record trajectory %s: %s", info.id, e, extra=_ids(record))

    async def record_step(
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

    async def note_trajectory(self, record: SandboxRecord, episode: EpisodeRecord, changes: dict[str, Any]) -> None:
        if self.trajectories is None:
            return
        try:
            await self.trajectories.update(record.tenant, episode.trajectory_id, changes)
        except (OSError, SandboxError) as e:
            self._log.warning("cannot update trajectory %s: %s", episode.trajectory_id, e, extra=_ids(record))

    # ------------------------------------------------------------------ screen recordings

    def check_recording(self, record: SandboxRecord) -> None:
        """Refuse ``record`` where it cannot be kept: another kind than android, or no trajectory store."""
        if record.spec.kind not in RECORDING_KINDS:
            kinds = ", ".join(k.value for k in RECORDING_KINDS)
            raise FailedPrecondition(
                f"screen recording (record) is for {kinds} sandboxes only; sandbox {record.id} is "
                f"{record.spec.kind.value}: reset it without record"
            )
        if self.trajectories is None:
            raise FailedPrecondition(
                "screen recordings are kept with trajectories, and this control plane records none "
                "(trajectories.enabled is false)"
            )

    async def start_recording(self, record: SandboxRecord) -> tuple[float | None, list[str]]:
        """Start the screen recording: when it began, or None and a warning saying why it did not."""
        agent = self.records.agent(record)
        try:
            try:
                await agent.request("android", {"op": "record_start"}, deadline=RECORD_START_S)
            except InvalidArgument as e:  # one left running (an episode ended without its stop): drop it
                if "already running" not in e.message:
                    raise
                await agent.request("android", {"op": "record_stop"}, deadline=RECORD_STOP_S)
                await agent.request("android", {"op": "record_start"}, deadline=RECORD_START_S)
        except SandboxError as e:
            self.metrics.recording(record.spec.kind, "failed")
            self._log.warning("sandbox %s: the screen recording did not start: %s", record.id, e, extra=_ids(record))
            return None, [f"the screen recording did not start: {e.message}"]
        return time.time(), []

    async def _stop_recording(self, record: SandboxRecord, episode: EpisodeRecord) -> None:
        """Stop the running segment and keep its MP4 with the trajectory (a warning when it is lost)."""
        since = episode.recording_since
        if since is None or self.trajectories is None:
            return
        offset = max(0, round(since - episode.started_at))
        try:
            _, data = await self.records.agent(record).request("android", {"op": "record_stop"}, deadline=RECORD_STOP_S)
            if data[4:8] != b"ftyp":  # every MP4 starts with its ftyp box
                raise Unavailable(f"record_stop returned no MP4 ({len(data)} bytes: {data[:60]!r})")
            ref = await self.trajectories.attach_media(
                record.tenant,
                episode.trajectory_id,
                data,
                content_type="video/mp4",
                name=f"screen-{offset:04d}.mp4",
                started_at=since,
                ended_at=min(time.time(), since + SCREENRECORD_LIMIT_S),
            )
        except (OSError, SandboxError) as e:
            self.metrics.recording(record.spec.kind, "failed")
            message = e.message if isinstance(e, SandboxError) else str(e)
            warning = f"the screen recording from {offset} s into the episode was lost: {message}"
            self._log.warning("sandbox %s: %s", record.id, warning, extra=_ids(record))
            with contextlib.suppress(OSError, SandboxError):
                await self.trajectories.warn(record.tenant, episode.trajectory_id, warning)
            return
        self.metrics.recording(record.spec.kind, "kept")
        self._log.info(
            "sandbox %s: kept a screen recording (%d bytes) with trajectory %s",
            record.id,
            ref.size,
            episode.trajectory_id,
            extra=_ids(record),
        )

    async def end_recording(self, record: SandboxRecord) -> None:
        """Before a reset replaces ``record``'s episode: keep what its screen recording has (the emulator's reset
        would lose it), and mark it stopped."""
        episode = record.episode
        if episode is None or episode.done or episode.recording_since is None:
            return
        await self._stop_recording(record, episode)
        await self._set_recording(record, episode, None)

    async def recording_after_step(self, record: SandboxRecord, episode: EpisodeRecord) -> None:
        """At the episode's end, its last segment kept; before screenrecord's limit, the next segment started."""
        since = episode.recording_since
        if since is None:
            return
        if episode.done:
            await self._stop_recording(record, episode)
        elif time.time() - since >= RECORD_SEGMENT_S:
            await self._stop_recording(record, episode)
            since, problems = await self.start_recording(record)
            for problem in problems:
                with contextlib.suppress(OSError, SandboxError):
                    await self._trajectory_store().warn(record.tenant, episode.trajectory_id, problem)
            await self._set_recording(record, episode, since)

    async def _set_recording(self, record: SandboxRecord, episode: EpisodeRecord, since: float | None) -> None:
        trajectory = episode.trajectory_id

        def note(fresh: SandboxRecord) -> bool:
            if fresh.episode is None or fresh.episode.trajectory_id != trajectory or fresh.episode.done:
                return False
            fresh.episode.recording_since = since
            return True

        await self.records.update(record.id, note)

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

    async def trajectory_media(
        self, principal: Principal, trajectory_id: str, sha256: str, *, offset: int = 0, length: int | None = None
    ) -> tuple[MediaRef, bytes]:
        """A medium of a trajectory (a screen recording), by the hash its summary names (``info.media[].sha256``):
        its ref, and ``length`` bytes from ``offset`` (to the end when None)."""
        found = await self._trajectory_store().media(
            trajectory_id, sha256, tenant=_tenant(principal), offset=offset, length=length
        )
        if found is None:
            raise NotFound(f"no medium {sha256!r} in trajectory {trajectory_id!r}")
        return found

    async def delete_trajectory(self, principal: Principal, trajectory_id: str) -> None:
        if not await self._trajectory_store().delete(trajectory_id, tenant=_tenant(principal)):
            raise NotFound(f"no trajectory {trajectory_id!r}")


def _tenant(principal: Principal) -> str | None:
    """The tenant whose trajectories the caller reaches: its own, or every tenant's (None) for an admin."""
    return None if principal.admin else principal.tenant
