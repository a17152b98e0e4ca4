"""Leader election with a coordination.k8s.io/v1 Lease (sandbox/backends/kubernetes/lease.py) on the fake API server,
over the real kubernetes_asyncio client: one of two electors wins; the other takes over once the Lease has not been
renewed for its duration (by its own clock, a fake one here, so no test sleeps); a stale leader's renewal fails on
the resourceVersion conflict instead of overwriting the new leader; a released Lease is taken at once; and the
Lifecycle leads through the Lease on Kubernetes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.lease import LeaseElector
from sandbox.service import SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_kube import FakeKube
from tests.k8s.fake_api_fixtures import NAMESPACE, k8s_config, sim_kube

__all__ = ["sim_kube"]
LOGGER = logging.getLogger("sandbox.test.k8s.lease")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture(loop_scope="session")
async def api(sim_kube: FakeKube) -> AsyncIterator[KubeApi]:
    made = await KubeApi.connect(k8s_config(sim_kube))
    try:
        yield made
    finally:
        await made.close()


def _electors(api: KubeApi, name: str) -> tuple[LeaseElector, LeaseElector, Clock, Clock]:
    async def connect() -> KubeApi:
        return api

    a_clock, b_clock = Clock(), Clock()
    a = LeaseElector(connect, NAMESPACE, "replica-a", duration_s=15, name=name, clock=a_clock)
    b = LeaseElector(connect, NAMESPACE, "replica-b", duration_s=15, name=name, clock=b_clock)
    return a, b, a_clock, b_clock


async def _lease(api: KubeApi, name: str) -> dict[str, Any]:
    return await api.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}", what="read")


async def test_one_wins_the_other_takes_over_after_expiry(api: KubeApi) -> None:
    a, b, a_clock, b_clock = _electors(api, "lease-takeover")
    assert await a.acquire() is True
    assert await b.acquire() is False  # a holds it, and b has just seen it
    spec = (await _lease(api, "lease-takeover"))["spec"]
    assert spec["holderIdentity"] == "replica-a" and spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0 and spec["renewTime"].endswith("Z")

    a_clock.now += 6  # a renews (a third of the duration went by)
    assert await a.acquire() is True
    b_clock.now += 14  # b saw the record change less than 15 s ago (its own clock): still a's
    assert await b.acquire() is False
    assert await b.holder() == "replica-a"

    b_clock.now += 16  # a stopped renewing: 16 s without a change, as b's clock counts
    assert await b.acquire() is True
    spec = (await _lease(api, "lease-takeover"))["spec"]
    assert spec["holderIdentity"] == "replica-b" and spec["leaseTransitions"] == 1


async def test_a_stale_leaders_renewal_fails_on_the_conflict(api: KubeApi) -> None:
    a, b, a_clock, b_clock = _electors(api, "lease-fencing")
    assert await a.acquire() is True
    assert await b.acquire() is False
    b_clock.now += 16  # a is paused (a long GC, a partition): b takes over
    assert await b.acquire() is True
    version = (await _lease(api, "lease-fencing"))["metadata"]["resourceVersion"]

    a_clock.now += 6  # a wakes and renews with the version it wrote last: 409, so it does not lead
    assert await a.acquire() is False
    assert not a.leading
    lease = await _lease(api, "lease-fencing")
    assert lease["spec"]["holderIdentity"] == "replica-b"
    assert lease["metadata"]["resourceVersion"] == version  # a wrote nothing
    b_clock.now += 6
    assert await b.acquire() is True


async def test_a_released_lease_is_taken_at_once(api: KubeApi) -> None:
    a, b, _, _ = _electors(api, "lease-release")
    assert await a.acquire() is True
    assert await b.acquire() is False
    await a.release()
    assert await b.acquire() is True  # no holder: no need to wait out the duration
    assert (await _lease(api, "lease-release"))["spec"]["holderIdentity"] == "replica-b"


async def test_the_lifecycle_leads_through_the_lease_on_kubernetes(sim_kube: FakeKube, api: KubeApi) -> None:
    backend = KubernetesBackend(k8s_config(sim_kube, manage_network_policies=False))
    store = await EmbeddedStore.open(None, logger=LOGGER)
    service = SandboxService(backend, store, logger=LOGGER)
    await service.start()
    lifecycle = Lifecycle(service, LifecycleSettings(), logger=LOGGER)
    try:
        assert isinstance(lifecycle.elector, LeaseElector)
        await lifecycle.tick()
        assert lifecycle.is_leader
        assert (await _lease(api, "sandbox-leader"))["spec"]["holderIdentity"] == service.replica
        assert await store.holder("leader") is None  # not the store's lock
        await lifecycle.stop()
        assert not lifecycle.is_leader
        assert (await _lease(api, "sandbox-leader"))["spec"].get("holderIdentity") is None
    finally:
        await lifecycle.stop()
        await service.close()
        await store.close()
