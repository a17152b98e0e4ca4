"""The in-package fake backend, able to snapshot, for the tests of task snapshots: a snapshot image is a copy of the
instance's workspace under a name made from the snapshot's (so taking one again replaces it, as ``docker commit``
moves a tag), and an instance of it starts with a copy of that. Every commit is counted; a test can hold commits at
an event. Collection removes an image only when no instance runs it, as the engine does."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sandbox.backends.base import BackendInstance, BackendSnapshot
from sandbox.models import SandboxSpec
from sandbox.service import SandboxService
from sandbox.service.records import SNAPSHOTS, SnapshotRecord
from sandbox.service.task_config import TaskSettings
from sandbox.store import Store
from sandbox.testing.fake_backend import FakeBackend, FakeConfig

LOGGER = logging.getLogger("sandbox.test.task_snapshots")
IMAGE_PREFIX = "fake-snapshot/"


class SnapshottingFake(FakeBackend):
    name = "fake-snapshotting"
    can_snapshot = True

    def __init__(self, config: FakeConfig, images_dir: str) -> None:
        super().__init__(config)
        self.images_dir = images_dir
        self.images: dict[str, tuple[float, dict[str, Any] | None]] = {}
        """Image reference -> when it was committed, and the record it carries."""
        self.commits: list[str] = []
        self.committing = asyncio.Event()
        """Set when a commit begins."""
        self.hold_commits: asyncio.Event | None = None
        """When set to an event, a commit waits for it before it copies anything."""

    def _image_dir(self, ref: str) -> str:
        return os.path.join(self.images_dir, ref.removeprefix(IMAGE_PREFIX))

    async def create(
        self,
        instance_id: str,
        spec: SandboxSpec,
        *,
        pool: str | None = None,
        ready_timeout: float | None = None,
        tenant: str | None = None,
    ) -> BackendInstance:
        if spec.image is not None and spec.image.startswith(IMAGE_PREFIX):
            if spec.image not in self.images:
                raise AssertionError(f"an instance started from the missing image {spec.image}")
            workspace = os.path.join(self._dir(instance_id), "workspace")
            await asyncio.to_thread(shutil.copytree, self._image_dir(spec.image), workspace)
        return await super().create(instance_id, spec, pool=pool, ready_timeout=ready_timeout, tenant=tenant)

    async def snapshot(self, instance_id: str, name: str, *, record: dict[str, Any] | None = None) -> str:
        self.committing.set()
        if self.hold_commits is not None:
            await self.hold_commits.wait()
        ref = f"{IMAGE_PREFIX}{name}"
        target = self._image_dir(ref)
        await asyncio.to_thread(shutil.rmtree, target, True)
        await asyncio.to_thread(shutil.copytree, os.path.join(self._dir(instance_id), "workspace"), target)
        self.images[ref] = (time.time(), record)
        self.commits.append(ref)
        return ref

    async def list_snapshots(self) -> list[BackendSnapshot]:
        return [BackendSnapshot(ref=ref, record=record) for ref, (_, record) in self.images.items()]

    def running_images(self) -> set[str]:
        return {str(proc.spec.image) for proc in self._procs.values()}

    async def collect_snapshots(
        self, *, keep: set[str], only: set[str] | None = None, min_age_s: float = 0.0
    ) -> list[str]:
        removed = []
        for ref, (created_at, _) in list(self.images.items()):
            if ref in keep or ref in self.running_images() or (only is not None and ref not in only):
                continue
            if time.time() - created_at < min_age_s:
                continue
            del self.images[ref]
            await asyncio.to_thread(shutil.rmtree, self._image_dir(ref), True)
            removed.append(ref)
        return removed


@asynccontextmanager
async def running(
    backend: SnapshottingFake, store: Store, *, replica: str, tasks: TaskSettings | None = None
) -> AsyncIterator[SandboxService]:
    """A service (a control-plane replica) over ``backend`` and ``store``, closed at the end without closing them."""
    service = SandboxService(backend, store, logger=LOGGER, replica=replica, tasks=tasks or TaskSettings())
    await service.start()
    try:
        yield service
    finally:
        await service.pools.close()
        await service.instances.drain()


async def task_snapshots(store: Store) -> dict[str, SnapshotRecord]:
    """Every task snapshot's record, by its key."""
    docs = await store.all(SNAPSHOTS)
    records = {key: SnapshotRecord.model_validate(doc) for key, doc in docs.items()}
    return {key: snap for key, snap in records.items() if snap.task}


async def assert_every_record_has_its_image(store: Store, backend: SnapshottingFake) -> None:
    for key, snap in (await task_snapshots(store)).items():
        assert snap.image in backend.images, f"the record {key} names the missing image {snap.image}"
