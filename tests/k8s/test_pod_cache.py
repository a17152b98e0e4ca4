"""The leader's health rounds and reconciliation read the backend's pod cache (one informer: list once, then watch),
not a LIST of every pod each round; on the fake API server in mode "simulate" with the simulated agent, through the
real client. The request log of the fake server is the witness: after the warm-up, rounds make no LIST of the pods.
Also: the cache strips managedFields, follows changes made behind its back, relists when its watch history expired
(410 Gone), and bookmarks spare it that relist."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import pytest_asyncio

from sandbox.backends.base import RuntimeState
from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.informer import Informer
from sandbox.models import SandboxSpec
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import SandboxRecord
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_kube import SUITE, FakeKube, Realism
from tests.k8s.fake_api_fixtures import K8S_OWNER, NAMESPACE, k8s_config
from tests.polling import eventually

LOGGER = logging.getLogger("sandbox.test.k8s.pod_cache")
ALICE = Principal("alice")
PODS = core_path(NAMESPACE, "pods")


def pod_lists(requests: list[tuple[str, str]]) -> list[str]:
    """The LISTs of pods among the requests (a GET of the collection that is no watch)."""
    found = []
    for method, target in requests:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        if method == "GET" and parts.path == PODS and query.get("watch") != ["true"] and query.get("limit") != ["1"]:
            found.append(target)
    return found


@pytest_asyncio.fixture(loop_scope="session")
async def kube() -> AsyncIterator[FakeKube]:
    fake = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), nodes=2, agents=True)
    await asyncio.to_thread(fake.start)
    try:
        yield fake
    finally:
        await asyncio.to_thread(fake.close)


async def test_health_rounds_and_reconcile_make_no_list_after_warm_up(kube: FakeKube) -> None:
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port, manage_network_policies=False))
    store = await EmbeddedStore.open(None, logger=LOGGER)
    service = SandboxService(backend, store, logger=LOGGER)
    await service.start()
    lifecycle = Lifecycle(service, LifecycleSettings(), logger=LOGGER)
    try:
        sandboxes = [await service.create(ALICE, SandboxSpec(kind="terminal")) for _ in range(3)]
        await lifecycle.tick()
        assert lifecycle.is_leader
        await lifecycle.check_health()  # warm-up: the cache's one listing
        await lifecycle.reconcile()
        before = await kube.requests()
        for _ in range(3):
            await lifecycle.check_health()
        await lifecycle.reconcile()
        after = await kube.requests()
        rounds = after[len(before) :]
        assert pod_lists(rounds) == [], f"LISTs of pods during the rounds: {pod_lists(rounds)}"
        assert pod_lists(before), "the warm-up listed the pods once (the informer's listing)"

        victim = await service.get(ALICE, sandboxes[0].id)
        record = await service.records.read(victim.id)
        assert record is not None
        await kube.evict(backend.pod_name(record.instance))  # behind the backend's back: the watch tells it

        async def marked() -> bool:
            await lifecycle.check_health()
            return (await service.get(ALICE, victim.id)).state.value == "unhealthy"

        await eventually(marked, 10, "the evicted sandbox's pod judged from the cache")
        assert pod_lists((await kube.requests())[len(after) :]) == []
        assert backend.pod_cache.fallbacks == 0
        for sandbox in sandboxes:
            await service.delete(ALICE, sandbox.id)
    finally:
        await lifecycle.stop()
        await service.close()
        await store.close()


async def test_the_cache_strips_managed_fields_and_follows_the_server(kube: FakeKube) -> None:
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port, manage_network_policies=False))
    try:
        await backend.create("in-term-0000000c0c01", SandboxSpec(kind="terminal"))
        api = await backend.api()
        served = await api.get(core_path(NAMESPACE, "pods", backend.pod_name("in-term-0000000c0c01")), what="get")
        assert served["metadata"]["managedFields"], "the API server records who wrote what"
        pods = await backend.pod_cache.pods()
        assert pods and all("managedFields" not in p["metadata"] for p in pods)
        await kube.delete_pod(backend.pod_name("in-term-0000000c0c01"))

        async def gone() -> bool:
            return [i.id for i in await backend.list_instances()] == []

        await eventually(gone, 5, "the pod deleted behind the backend's back gone from its listing")
        await backend.destroy("in-term-0000000c0c01")
    finally:
        await backend.close()


async def _informer_relists(bookmark_s: float | None) -> int:
    """An informer of pods whose watches end each second, while other objects change and the history is kept
    0.3 s: how many times it listed again within 3 s."""
    kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), nodes=1,
                    realism=Realism(history_s=0.3, bookmark_s=bookmark_s, pod_security=SUITE.pod_security))  # fmt: skip
    await asyncio.to_thread(kube.start)
    api = await KubeApi.connect(k8s_config(kube))
    informer = Informer(api, PODS, what="pods", logger=LOGGER, watch_timeout_s=1)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        secrets = core_path(NAMESPACE, "secrets")
        for i in range(30):  # the history moves on, none of it about pods
            await api.create(secrets, {"metadata": {"name": f"churn-{i}"}}, what="create")
            await asyncio.sleep(0.1)
        assert informer.fresh
        return informer.relists
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
        await asyncio.to_thread(kube.close)


async def test_an_expired_watch_relists_and_bookmarks_spare_it() -> None:
    assert await _informer_relists(bookmark_s=None) >= 1  # resumed from a compacted version: 410, listed again
    assert await _informer_relists(bookmark_s=60) == 0  # the bookmark before each watch's end moved its version on


async def test_a_pod_listing_survives_the_informer_failing(kube: FakeKube) -> None:
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port, manage_network_policies=False))
    try:
        await backend.create("in-term-0000000c0c02", SandboxSpec(kind="terminal"))
        informer = await backend.pod_cache.start()
        informer.fresh = False  # as after a failed watch, before the next listing
        listed = await backend.list_instances()
        assert [i.id for i in listed] == ["in-term-0000000c0c02"] and listed[0].state is RuntimeState.RUNNING
        assert backend.pod_cache.fallbacks == 1
        await backend.destroy("in-term-0000000c0c02")
    finally:
        await backend.close()


async def test_a_big_fleet_is_probed_in_turn(kube: FakeKube) -> None:
    """``probes_per_round`` 2 with 3 running sandboxes: each round probes 2 agents, and every sandbox's turn comes
    (``terminal_deep_probe_s`` 0: every terminal is due every round, as a sandbox with a display always is)."""
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port, manage_network_policies=False))
    store = await EmbeddedStore.open(None, logger=LOGGER)
    service = SandboxService(backend, store, logger=LOGGER)
    await service.start()
    lifecycle = Lifecycle(service, LifecycleSettings(probes_per_round=2, terminal_deep_probe_s=0), logger=LOGGER)
    probed: list[str] = []
    probe = lifecycle._probe

    async def spy(record: SandboxRecord, semaphore: asyncio.Semaphore) -> None:
        probed.append(record.id)
        await probe(record, semaphore)

    lifecycle._probe = spy  # type: ignore[method-assign]
    try:
        sandboxes = [await service.create(ALICE, SandboxSpec(kind="terminal")) for _ in range(3)]
        await lifecycle.tick()
        await lifecycle._end_round()  # the tick's own round: not counted
        probed.clear()
        for _ in range(3):
            await lifecycle.check_health()
        assert len(probed) == 6 and set(probed) == {s.id for s in sandboxes}
        assert [(await service.get(ALICE, s.id)).state.value for s in sandboxes] == ["running"] * 3
        for sandbox in sandboxes:
            await service.delete(ALICE, sandbox.id)
    finally:
        await lifecycle.stop()
        await service.close()
        await store.close()
