"""The one service layer behind gRPC, REST, the operator, the lifecycle, the CLI and the SDK: a facade over parts,
each a class of one concept given its collaborators by keyword (kopf's ``operator(*, lifecycle=..., registry=...)``
is the model). No part inherits from another, and no two define a method the facade has: each call of the facade goes
to the one part that owns it, and the calls that span parts are spelled out here
(tests/unit/service/test_service_structure.py checks both).

    part            concept                                                      module
    records         a sandbox's record: read, find, compare-and-set, swap lock   core.py
    provisioner     an instance for a sandbox (warm or admitted), its image,     provisioning.py
                    the host's size and reservations, readiness
    failures        mark failed, recover (restart in place or replace), expire   failures.py
    leases          create, get, list, delete, renew, reset; fleet gauges        leases.py
    acting          actions, observe, exec, files, health, logs, tunnels         acting.py
    snapshots       snapshots and their warm instances                           snapshots.py
    recorder        episodes' steps and screens into trajectories; reading them  trajectory_ops.py
    task_snapshots  tasks' post-setup snapshots: taken once, removed unused      task_snapshots.py
    episodes        reset to a task, steps counted to the episode's end, reward  episodes.py
    step_batches    steps in many sandboxes in one call, all at once             step_batches.py
    lanes           direct lanes: opened, their ledgers read, revoked            lanes.py
    activity        this process's recent actions, touch times, output tails     activity.py
    pools, instances, admission: warm pools, instances' bookkeeping, capacity    pools.py, instances.py,
                                                                                 sandbox.capacity

Who calls whom (an arrow: holds and calls):

    API skins, operator, lifecycle, CLI demo, bench
        │ the methods below
        ▼
    SandboxService ─ step:      records.find, then episodes.advance in an episode,
        │                       else episodes.primitives and acting.act
        │            reset:     lanes.close_lanes, recorder.end_recording, leases.reset,
        │                       episodes.abandon (with a task: lanes.close_lanes, episodes.reset_to_task)
        │            delete:    lanes.close_lanes, leases.delete
        │            step_many: step_batches, which calls step back for each order
        │            start:     records.mark_epoch, provisioner.learn_host, provisioner.count_reservations
        │            close:     lanes.stop, leases.drain, pools.close, instances.drain, backend.close
        │            the rest:  the one part that owns the method (waiting, capacity: the admission)
        ▼
    episodes ──────▶ leases, acting, recorder, task_snapshots, failures, provisioner
    task_snapshots ▶ snapshots, pools, instances
    snapshots ─────▶ admission, pools, instances
    acting ────────▶ failures, activity
    lanes ─────────▶ acting, failures, activity
    leases ────────▶ provisioner, admission, pools, instances, activity
    failures ──────▶ provisioner, instances
    provisioner ───▶ admission, pools, instances
    pools ─────────▶ instances ──▶ admission
    records ◀─────── every part above but the provisioner; records ──▶ store, backend

State lives in the store, so another replica, or this one after a restart, serves the same sandboxes.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, overload

from sandbox.backends.base import Backend
from sandbox.capacity.admission import Admission
from sandbox.capacity.model import CapacityModel
from sandbox.capacity.pressure import MemoryPressure
from sandbox.capacity.quotas import QuotaBook
from sandbox.capacity.report import CapacityReport, WaitingCall
from sandbox.capacity.settings import CapacitySettings
from sandbox.errors import InvalidArgument, SandboxError
from sandbox.models import (
    Action,
    Exec,
    ExecResult,
    FileInfo,
    Health,
    LaneInfo,
    Observation,
    SandboxInfo,
    SandboxSpec,
    Screenshot,
    SnapshotInfo,
)
from sandbox.observability.metrics import FailureCause, Metrics
from sandbox.service.acting import Acting
from sandbox.service.activity import Activity
from sandbox.service.auth import Principal
from sandbox.service.core import Records, timed
from sandbox.service.episodes import Episodes
from sandbox.service.failures import Failures
from sandbox.service.instances import Instances
from sandbox.service.lanes import Lanes
from sandbox.service.leases import Leases
from sandbox.service.output_tail import OutputTails
from sandbox.service.pools import Pools
from sandbox.service.provisioning import Provisioner
from sandbox.service.records import LeaseEnd, SandboxRecord
from sandbox.service.snapshots import Snapshots
from sandbox.service.step_batches import StepBatches, StepOrder
from sandbox.service.task_config import TaskSettings
from sandbox.service.task_snapshots import TaskSnapshots
from sandbox.service.trajectory_ops import Recorder
from sandbox.store import Store
from sandbox.tasks.model import Task
from sandbox.tasks.runtime import Fixtures
from sandbox.trajectories import MediaRef, Trajectory, TrajectoryInfo, TrajectoryStore


class SandboxService:
    """Everything the API skins call; see the module docstring for the parts and where each call goes."""

    def __init__(
        self,
        backend: Backend,
        store: Store,
        *,
        logger: logging.Logger,
        replica: str | None = None,
        metrics: Metrics | None = None,
        capacity: CapacitySettings | None = None,
        quotas: QuotaBook | None = None,
        tasks: TaskSettings | None = None,
        trajectories: TrajectoryStore | None = None,
    ) -> None:
        self.backend = backend
        self.store = store
        self.replica = replica or secrets.token_hex(4)
        """This control-plane process among the others sharing the store."""
        self.metrics = metrics or Metrics()
        settings = capacity or CapacitySettings()
        self.admission = Admission(
            CapacityModel(settings, host=None),  # the host's size is asked of the backend in start()
            quotas,
            pressure=MemoryPressure(high=settings.memory_pressure_pct, low=settings.memory_pressure_clear_pct),
            logger=logger,
            on_refusal=self.metrics.refused,
        )
        self.instances = Instances(backend, store, replica=self.replica, logger=logger, admission=self.admission)
        self.pools = Pools(self.instances, store, logger=logger)
        self.activity = Activity()
        self.records = Records(backend=backend, store=store, replica=self.replica, logger=logger)
        self.provisioner = Provisioner(
            backend=backend,
            store=store,
            admission=self.admission,
            instances=self.instances,
            pools=self.pools,
            metrics=self.metrics,
        )
        self.failures = Failures(
            backend=backend,
            records=self.records,
            provisioner=self.provisioner,
            instances=self.instances,
            metrics=self.metrics,
            logger=logger,
        )
        self.leases = Leases(
            store=store,
            records=self.records,
            provisioner=self.provisioner,
            admission=self.admission,
            instances=self.instances,
            pools=self.pools,
            activity=self.activity,
            metrics=self.metrics,
            logger=logger,
        )
        self.acting = Acting(
            backend=backend, records=self.records, failures=self.failures, activity=self.activity, metrics=self.metrics
        )
        self.snapshots = Snapshots(
            backend=backend,
            store=store,
            records=self.records,
            admission=self.admission,
            pools=self.pools,
            instances=self.instances,
            metrics=self.metrics,
        )
        self.recorder = Recorder(trajectories=trajectories, records=self.records, metrics=self.metrics, logger=logger)
        task_settings = tasks or TaskSettings()
        self.task_snapshots = TaskSnapshots(
            backend=backend,
            store=store,
            replica=self.replica,
            records=self.records,
            snapshots=self.snapshots,
            pools=self.pools,
            instances=self.instances,
            settings=task_settings,
            metrics=self.metrics,
            logger=logger,
        )
        self.episodes = Episodes(
            store=store,
            records=self.records,
            provisioner=self.provisioner,
            leases=self.leases,
            acting=self.acting,
            failures=self.failures,
            recorder=self.recorder,
            task_snapshots=self.task_snapshots,
            settings=task_settings,
            metrics=self.metrics,
            logger=logger,
        )
        self.step_batches = StepBatches(step=self.step)
        self.lanes = Lanes(
            backend=backend,
            records=self.records,
            failures=self.failures,
            acting=self.acting,
            activity=self.activity,
            metrics=self.metrics,
            logger=logger,
        )

    # ------------------------------------------------------------------ state the parts keep, as it was reached

    @property
    def epoch(self) -> str | None:
        """The store's epoch as this replica last saw it (``Records.epoch``); adoption sets it."""
        return self.records.epoch

    @epoch.setter
    def epoch(self, epoch: str | None) -> None:
        self.records.epoch = epoch

    @property
    def trajectories(self) -> TrajectoryStore | None:
        """Where episodes are recorded (``Recorder.trajectories``); None: nowhere."""
        return self.recorder.trajectories

    @trajectories.setter
    def trajectories(self, trajectories: TrajectoryStore | None) -> None:
        self.recorder.trajectories = trajectories

    @property
    def output(self) -> OutputTails:
        """The tail of each sandbox's recent command output (the web view's terminal cards): ``Activity.output``."""
        return self.activity.output

    @property
    def events(self) -> deque[dict[str, Any]]:
        """What happened to sandboxes lately (failed, restarted, replaced, expired), newest last:
        ``Failures.events``."""
        return self.failures.events

    @property
    def task_settings(self) -> TaskSettings:
        return self.episodes.settings

    @property
    def fixtures(self) -> Fixtures:
        return self.episodes.fixtures

    @property
    def setups_run(self) -> int:
        return self.episodes.setups_run

    @property
    def task_snapshots_taken(self) -> int:
        return self.episodes.task_snapshots_taken

    # ------------------------------------------------------------------ start, stop, readiness and capacity

    async def start(self) -> None:
        """Mark a new store with an epoch (a store that later lacks it has lost its data); learn the host's size
        and count what the store's instances already reserve."""
        await self.records.mark_epoch()
        await self.provisioner.learn_host()
        await self.provisioner.count_reservations()

    async def close(self) -> None:
        """Stop serving. Sandboxes live on in the store and the engine for the next start; instances this
        replica was starting for its pools are removed (none is left that nobody holds)."""
        await self.lanes.stop()
        await self.leases.drain()
        await self.pools.close()
        await self.instances.drain()
        await self.backend.close()

    async def readiness(self, *, timeout_s: float = 2.0) -> dict[str, str | None]:
        return await self.provisioner.readiness(timeout_s=timeout_s)

    async def count_reservations(self) -> None:
        await self.provisioner.count_reservations()

    def waiting(self, principal: Principal) -> list[WaitingCall]:
        """The caller's calls queued for capacity (every tenant's to an admin), in serving order."""
        return self.admission.waiting(None if principal.admin else principal.tenant)

    def capacity(self, principal: Principal) -> CapacityReport:
        return self.admission.report(principal.tenant, admin=principal.admin)

    # ------------------------------------------------------------------ the calls that span parts

    @timed("step")
    async def step(
        self, principal: Principal, sandbox_id: str, action: Action, *, screenshot: bool = False
    ) -> Observation:
        """One action. In an episode: counted, recorded, and the episode's end reported (``done``, ``info``)."""
        record = await self.records.find(principal, sandbox_id)
        if record.episode is not None:
            return await self.episodes.advance(record, record.episode, action, screenshot=screenshot)
        actions = self.episodes.primitives(record, action)
        return await self.acting.act(record, actions, screenshot=screenshot, shown=action)

    @overload
    async def reset(self, principal: Principal, sandbox_id: str, *, snapshot: str | None = None) -> SandboxInfo: ...

    @overload
    async def reset(
        self, principal: Principal, sandbox_id: str, *, snapshot: str | None = None, task: Task
    ) -> Observation: ...

    async def reset(
        self, principal: Principal, sandbox_id: str, *, snapshot: str | None = None, task: Task | None = None
    ) -> SandboxInfo | Observation:
        """Without ``task``: back to the initial state (``Leases.reset``), ending any episode. With one: the start
        of an episode of it, and its first observation (``Episodes.reset_to_task``)."""
        if task is None:
            before = await self.records.find(principal, sandbox_id)
            await self.lanes.close_lanes(before)
            await self.recorder.end_recording(before)
            info = await self.leases.reset(principal, sandbox_id, snapshot=snapshot)
            await self.episodes.abandon(before)
            return info
        if snapshot is not None:
            raise InvalidArgument("reset to a task or to a snapshot, not both")
        return (await self.reset_to_task(principal, sandbox_id, task))[1]

    async def step_many(self, principal: Principal, orders: Sequence[StepOrder]) -> list[Observation | SandboxError]:
        return await self.step_batches.step_many(principal, orders)

    # ------------------------------------------------------------------ leases

    async def create(self, principal: Principal, spec: SandboxSpec, *, wait_s: float = 0.0) -> SandboxInfo:
        return await self.leases.create(principal, spec, wait_s=wait_s)

    async def create_group(
        self, principal: Principal, spec: SandboxSpec, count: int, *, wait_s: float = 0.0
    ) -> list[SandboxInfo]:
        return await self.leases.create_group(principal, spec, count, wait_s=wait_s)

    async def create_each(
        self, principal: Principal, spec: SandboxSpec, count: int, *, wait_s: float = 0.0
    ) -> list[SandboxInfo | SandboxError]:
        return await self.leases.create_each(principal, spec, count, wait_s=wait_s)

    async def get(self, principal: Principal, sandbox_id: str) -> SandboxInfo:
        return await self.leases.get(principal, sandbox_id)

    async def list_sandboxes(self, principal: Principal) -> list[SandboxInfo]:
        return await self.leases.list_sandboxes(principal)

    async def delete(self, principal: Principal, sandbox_id: str) -> None:
        await self._close_lanes(principal, sandbox_id)
        await self.leases.delete(principal, sandbox_id)

    async def open_lane(self, principal: Principal, sandbox_id: str) -> LaneInfo:
        return await self.lanes.open_lane(principal, sandbox_id)

    async def _close_lanes(self, principal: Principal, sandbox_id: str) -> None:
        """Revoke the sandbox's lanes (their steps counted first), if this replica opened any."""
        if self.lanes.has_lanes(sandbox_id):
            await self.lanes.close_lanes(await self.records.find(principal, sandbox_id, allow_expired=True))

    async def renew(self, principal: Principal, sandbox_id: str, *, ttl_s: float | None = None) -> SandboxInfo:
        return await self.leases.renew(principal, sandbox_id, ttl_s=ttl_s)

    async def refresh_metrics(self) -> None:
        await self.leases.refresh_metrics()

    # ------------------------------------------------------------------ acting

    async def observe(
        self, principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Observation:
        return await self.acting.observe(principal, sandbox_id, format=format, quality=quality)

    async def screenshot(
        self, principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Screenshot:
        return await self.acting.screenshot(principal, sandbox_id, format=format, quality=quality)

    async def exec(self, principal: Principal, sandbox_id: str, request: Exec) -> ExecResult:
        return await self.acting.exec(principal, sandbox_id, request)

    async def read_file(
        self, principal: Principal, sandbox_id: str, path: str, *, offset: int = 0, length: int | None = None
    ) -> bytes:
        return await self.acting.read_file(principal, sandbox_id, path, offset=offset, length=length)

    async def write_file(
        self, principal: Principal, sandbox_id: str, path: str, data: bytes, *, mode: int = 0o644, append: bool = False
    ) -> int:
        return await self.acting.write_file(principal, sandbox_id, path, data, mode=mode, append=append)

    async def list_files(self, principal: Principal, sandbox_id: str, path: str) -> list[FileInfo]:
        return await self.acting.list_files(principal, sandbox_id, path)

    async def delete_file(self, principal: Principal, sandbox_id: str, path: str, *, recursive: bool = False) -> None:
        await self.acting.delete_file(principal, sandbox_id, path, recursive=recursive)

    async def health(self, principal: Principal, sandbox_id: str) -> Health:
        return await self.acting.health(principal, sandbox_id)

    async def logs(self, principal: Principal, sandbox_id: str, *, tail: int = 200) -> str:
        return await self.acting.logs(principal, sandbox_id, tail=tail)

    async def open_tunnel(
        self, principal: Principal, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await self.acting.open_tunnel(principal, sandbox_id, port)

    async def open_port(
        self, principal: Principal, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await self.acting.open_port(principal, sandbox_id, port)

    async def ports(self, principal: Principal, sandbox_id: str, *, touch: bool = True) -> list[dict[str, Any]]:
        return await self.acting.ports(principal, sandbox_id, touch=touch)

    async def recent_actions(self, principal: Principal, sandbox_id: str) -> list[dict[str, Any]]:
        return await self.acting.recent_actions(principal, sandbox_id)

    async def output_tail(self, principal: Principal, sandbox_id: str, *, lines: int = 200) -> list[str]:
        return await self.acting.output_tail(principal, sandbox_id, lines=lines)

    # ------------------------------------------------------------------ failures

    async def mark_failed(self, record: SandboxRecord, why: str, *, cause: FailureCause) -> None:
        await self.failures.mark_failed(record, why, cause=cause)

    async def recover(self, sandbox_id: str, failed: str, why: str) -> None:
        await self.failures.recover(sandbox_id, failed, why)

    async def expire(self, record: SandboxRecord, ended: LeaseEnd) -> None:
        await self.failures.expire(record, ended)

    # ------------------------------------------------------------------ snapshots

    async def snapshot(self, principal: Principal, sandbox_id: str, name: str, *, warm: int = 0) -> SnapshotInfo:
        return await self.snapshots.snapshot(principal, sandbox_id, name, warm=warm)

    async def list_snapshots(self, principal: Principal) -> list[SnapshotInfo]:
        return await self.snapshots.list_snapshots(principal)

    async def delete_snapshot(self, principal: Principal, name: str) -> None:
        await self.snapshots.delete_snapshot(principal, name)

    async def sync_snapshot_pools(self) -> None:
        await self.snapshots.sync_snapshot_pools()

    async def collect_snapshot_images(self, *, only: set[str] | None = None, min_age_s: float = 0.0) -> list[str]:
        return await self.snapshots.collect_snapshot_images(only=only, min_age_s=min_age_s)

    async def collect_task_snapshots(self, *, now: float | None = None) -> list[str]:
        return await self.task_snapshots.collect_task_snapshots(now=now)

    # ------------------------------------------------------------------ episodes and trajectories

    def load_task(self, data: Any, *, fixtures: Mapping[str, bytes] | None = None) -> Task:
        return self.episodes.load_task(data, fixtures=fixtures)

    def task_fixtures(self, sent: Mapping[str, bytes] | None = None) -> Fixtures:
        return self.episodes.task_fixtures(sent)

    async def reset_to_task(
        self, principal: Principal, sandbox_id: str, task: Task, *, record_screen: bool = False
    ) -> tuple[SandboxInfo, Observation]:
        """An episode's steps never take a lane: the sandbox's lanes are revoked before it starts."""
        await self._close_lanes(principal, sandbox_id)
        return await self.episodes.reset_to_task(principal, sandbox_id, task, record_screen=record_screen)

    async def evaluate(self, principal: Principal, sandbox_id: str) -> float:
        return await self.episodes.evaluate(principal, sandbox_id)

    async def list_trajectories(self, principal: Principal, *, task_id: str | None = None) -> list[TrajectoryInfo]:
        return await self.recorder.list_trajectories(principal, task_id=task_id)

    async def get_trajectory(self, principal: Principal, trajectory_id: str) -> Trajectory:
        return await self.recorder.get_trajectory(principal, trajectory_id)

    async def trajectory_frame(self, principal: Principal, trajectory_id: str, sha256: str) -> Screenshot:
        return await self.recorder.trajectory_frame(principal, trajectory_id, sha256)

    async def trajectory_media(
        self, principal: Principal, trajectory_id: str, sha256: str, *, offset: int = 0, length: int | None = None
    ) -> tuple[MediaRef, bytes]:
        return await self.recorder.trajectory_media(principal, trajectory_id, sha256, offset=offset, length=length)

    async def delete_trajectory(self, principal: Principal, trajectory_id: str) -> None:
        await self.recorder.delete_trajectory(principal, trajectory_id)
