"""Fixtures of the Kubernetes backend's tests: the fake API server (sandbox.testing.fake_kube) in its two modes, and
the backend talking to it through a kubeconfig, over real HTTP, with the real kubernetes_asyncio client.

Import the fixtures a module uses from here (``from tests.k8s.fake_api_fixtures import kube, backend``). Realized
pods are containers labelled ``sandbox.owner=<K8S_OWNER>`` (this run's owner, suffixed): teardown fails the test
when one is left, or when a pod or secret the backend made is still in the fake API."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator

import docker
import pytest
import pytest_asyncio

from sandbox.backends.base import LABEL_OWNER
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.testing.fake_kube import FakeKube
from tests.conftest import OWNER, require_image
from tests.k8s import harness

K8S_OWNER = f"{OWNER}-k8s".lower()
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""What Pod Security "restricted" asks of a container: a hand-made pod in the suite's namespaces needs it (the fake
enforces the level there, as the chart's namespace labels do on a cluster)."""
NAMESPACE = "sandboxes"
CONTROL_PLANE_NAMESPACE = "sandbox-system"
IMAGE = "sandbox/terminal:latest"


def k8s_config(kube: FakeKube, **overrides: object) -> KubernetesConfig:
    """A backend config for the fake server: its kubeconfig, this run's owner, snapshots in the harness's folder."""
    fields: dict[str, object] = {
        "kubeconfig": kube.kubeconfig,
        "owner": K8S_OWNER,
        "namespace": NAMESPACE,
        "ready_timeout_s": 60,
        "snapshot_dir": os.path.join(kube.workdir, "snapshots"),
        "control_plane_namespace": "sandbox-system",
        "check_network_policies": False,  # probe pods would show in every test; test_backend_cni_check runs it
        **overrides,
    }
    return KubernetesConfig.model_validate(fields)


def owned_containers(client: docker.DockerClient) -> list[str]:
    summaries = client.api.containers(all=True, filters={"label": f"{LABEL_OWNER}={K8S_OWNER}"})
    return [str(s["Names"][0]).lstrip("/") for s in summaries]


@pytest.fixture(scope="module")
def docker_engine() -> Iterator[docker.DockerClient]:
    """The real engine, for realized pods; missing, the test fails (never skips)."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as e:
        pytest.fail(f"no Docker engine answers ({e}); run `make setup`", pytrace=False)
    require_image(client, "terminal")
    yield client
    client.close()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def kube(docker_engine: docker.DockerClient) -> AsyncIterator[FakeKube]:
    """The fake API server realizing pods as containers, for a whole module."""
    fake = FakeKube(mode="realize", owner=K8S_OWNER, namespaces=(NAMESPACE, "sandbox-system"), restart_backoff_s=0.5)
    await asyncio.to_thread(fake.start)
    try:
        yield fake
    finally:
        left = await asyncio.to_thread(fake.close)
        stray = await asyncio.to_thread(owned_containers, docker_engine)
        assert not left, f"realized pods nobody deleted: {left}"
        assert not stray, f"containers of owner {K8S_OWNER} left: {stray}"


@pytest_asyncio.fixture(loop_scope="session")
async def backend(kube: FakeKube) -> AsyncIterator[KubernetesBackend]:
    """A backend on the realizing fake server; every pod and secret it made must be gone at the end."""
    made = KubernetesBackend(k8s_config(kube))
    try:
        yield made
    finally:
        left = await made.list_instances()
        for instance in left:
            await made.destroy(instance.id)
        await made.close()
        assert not left, f"the test left instances: {[i.id for i in left]}"
        pods = await kube.pods(NAMESPACE)
        store = kube.store
        assert store is not None
        secrets, _ = await kube.call(store.list, "secrets", NAMESPACE)
        assert not pods, f"pods left in the fake API: {[p['metadata']['name'] for p in pods]}"
        assert not secrets, f"secrets left in the fake API: {[s['metadata']['name'] for s in secrets]}"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def sim_kube() -> AsyncIterator[FakeKube]:
    """The fake API server in mode "simulate": 4 nodes, pods never realized (no Docker needed)."""
    fake = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), nodes=4)
    await asyncio.to_thread(fake.start)
    try:
        yield fake
    finally:
        await asyncio.to_thread(fake.close)


@pytest_asyncio.fixture(loop_scope="session")
async def operator_kube() -> AsyncIterator[FakeKube]:
    """The fake API server in mode "simulate" for a whole control plane (backend, lifecycle, operator): 2 nodes
    with simulated agents, the sandbox and control-plane namespaces, the chart's CRDs installed, custom objects
    validated against them."""
    fake = FakeKube(
        mode="simulate",
        owner=K8S_OWNER,
        namespaces=(NAMESPACE, CONTROL_PLANE_NAMESPACE),
        nodes=2,
        agents=True,
        validate=harness.validate_custom,
    )
    await asyncio.to_thread(fake.start)
    await fake.install_crds(harness.crd_docs())
    try:
        yield fake
    finally:
        await asyncio.to_thread(fake.close)
