"""The operator across a change of leader, on the fake API server in mode "simulate" (pods never realized; the
simulated agent answers for them, so creates, claims and health probes run the backend's real TCP path): two control
planes share one store; only the leader writes; a ``kubectl delete sandbox`` made while nobody leads is carried out
by the next leader (the finalizer keeps it), which takes the other objects over without writing them again; a lost
node shows in the statuses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio

from sandbox.backends.agent_client import AgentClient
from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import NotFound, Unauthenticated, Unavailable
from sandbox.models import Exec, SandboxSpec
from sandbox.operator import resources as res
from sandbox.operator.operator import Operator
from sandbox.operator.settings import OperatorSettings
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.store import EmbeddedStore, Store
from sandbox.testing.fake_kube import FakeKube
from tests.k8s import harness
from tests.k8s.fake_api_fixtures import K8S_OWNER, NAMESPACE, k8s_config
from tests.k8s.test_operator_fake_api import crd_docs
from tests.polling import eventually

LOGGER = logging.getLogger("sandbox.test.k8s.simulated")
ALICE = Principal("alice")
SETTINGS = LifecycleSettings(tick_s=0.1, health_interval_s=0.5, leader_ttl_s=1.0)


@dataclass
class Replica:
    service: SandboxService
    lifecycle: Lifecycle
    operator: Operator
    loops: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self.loops = [asyncio.create_task(self.lifecycle.run()), asyncio.create_task(self.operator.run())]

    async def stop(self) -> None:
        for task in self.loops:
            task.cancel()
        await asyncio.gather(*self.loops, return_exceptions=True)
        await self.operator.close()
        await self.lifecycle.stop()


def _replica(kube: FakeKube, store: Store) -> Replica:
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port, manage_network_policies=False))
    service = SandboxService(backend, store, logger=LOGGER)
    lifecycle = Lifecycle(service, SETTINGS, logger=LOGGER)
    operator = Operator(service, lifecycle, backend, settings=OperatorSettings(interval_s=0.1), logger=LOGGER)
    return Replica(service, lifecycle, operator)


@pytest_asyncio.fixture(loop_scope="session")
async def cluster() -> AsyncIterator[tuple[FakeKube, Store, KubeApi]]:
    kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), nodes=3, agents=True,
                    validate=harness.validate_custom)  # fmt: skip
    await asyncio.to_thread(kube.start)
    await kube.install_crds(crd_docs())
    store = await EmbeddedStore.open(None, logger=LOGGER)
    api = await KubeApi.connect(k8s_config(kube))
    try:
        yield kube, store, api
    finally:
        await api.close()
        await store.close()
        await asyncio.to_thread(kube.close)


async def _obj(api: KubeApi, name: str) -> dict[str, Any] | None:
    with contextlib.suppress(NotFound):
        return await api.get(res.path(NAMESPACE, res.SANDBOXES, name), what="kubectl get")
    return None


async def _status(api: KubeApi, name: str, key: str) -> Any:
    return ((await _obj(api, name)) or {}).get("status", {}).get(key)


async def test_the_next_leader_ends_a_sandbox_deleted_while_nobody_led(
    cluster: tuple[FakeKube, Store, KubeApi],
) -> None:
    kube, store, api = cluster
    first, second = _replica(kube, store), _replica(kube, store)
    await first.service.start()
    await second.service.start()
    first.start()
    try:
        await eventually(lambda: first.operator.running, 10, "the first replica leading")
        made = [await first.service.create(ALICE, SandboxSpec(kind="terminal")) for _ in range(3)]
        doomed, kept = made[0].id, [m.id for m in made[1:]]
        for info in made:
            await eventually(lambda i=info.id: _status(api, i, "health"), 10, f"{info.id} mirrored")  # type: ignore[misc]
        assert all([await _status(api, i, "health") == "Healthy" for i in (doomed, *kept)])
        await first.stop()  # nobody leads now
        await api.delete(res.path(NAMESPACE, res.SANDBOXES, doomed), what="kubectl delete sandbox")
        await asyncio.sleep(0.5)
        held = await _obj(api, doomed)
        assert held is not None and held["metadata"]["deletionTimestamp"]  # Terminating, waiting for a leader
        assert await store.get("sandboxes", doomed) is not None

        second.start()
        await eventually(lambda: _gone(api, doomed), 15, "the next leader ending the sandbox and its object")
        with pytest.raises(NotFound):
            await second.service.get(ALICE, doomed)
        await asyncio.sleep(0.5)  # a few passes
        writes = second.operator.mirror.writes
        assert writes["create"] == writes["spec"] == writes["status"] == 0, writes  # the others taken over as they are
        assert writes["finalizer"] == 1

        victim = kept[0]
        node = await _status(api, victim, "node")
        assert await kube.lose_node(node) >= 1

        async def marked() -> bool:
            return await _status(api, victim, "state") == "unhealthy"

        await eventually(marked, 15, "the sandbox on the lost node marked unhealthy in its object")
        obj = await _obj(api, victim)
        assert obj is not None and obj["status"]["health"] == "Failing"
        assert "its node was lost" in obj["status"]["message"]
        assert kube.store is not None and kube.store.refused == []
    finally:
        for replica in (first, second):
            await replica.stop()
        for doc in (await store.all("sandboxes")).values():
            await second.service.delete(ALICE, doc["id"])
        for replica in (first, second):
            await replica.service.instances.drain()
            await replica.service.close()


async def _gone(api: KubeApi, name: str) -> bool:
    return await _obj(api, name) is None


async def test_the_simulated_agent_answers_only_a_pods_own_token(cluster: tuple[FakeKube, Store, KubeApi]) -> None:
    kube, store, _ = cluster
    replica = _replica(kube, store)
    await replica.service.start()
    info = await replica.service.create(ALICE, SandboxSpec(kind="terminal"))
    try:
        backend = replica.service.backend
        assert isinstance(backend, KubernetesBackend)
        instance = (await replica.service.records.read(info.id) or pytest.fail("no record")).instance
        ip, token = await backend.resolve(instance)
        good = AgentClient.tcp(ip, kube.agent_port, token=token, label="sim")
        assert (await good.health()).ok
        assert (await replica.service.health(ALICE, info.id)).ok
        with pytest.raises(Unavailable, match="simulated pod runs no sandbox"):
            await replica.service.exec(ALICE, info.id, Exec(cmd="true"))
        bad = AgentClient.tcp(ip, kube.agent_port, token="not-" + token, label="intruder")
        with pytest.raises(Unauthenticated):
            await bad.ping()
        for client in (good, bad):
            await client.close()
    finally:
        await replica.service.delete(ALICE, info.id)
        await replica.service.instances.drain()
        await replica.service.close()
