"""The live suite: the scenarios of the fake-API-server tests, against a real cluster.

Runs when ``KUBECONFIG`` names a cluster (kind, k3s, any) and ``SANDBOX_LIVE_IMAGE_PREFIX`` names where the sandbox
images were pushed (``make push REGISTRY=...``: e.g. ``127.0.0.1:5000/sandbox``); otherwise every test here is
skipped with the reason (shown by ``pytest -ra``, never counted as passed). docs/kubernetes.md says how to run it.

The control plane runs in this process (service, lifecycle, operator over the Kubernetes backend), as in the other
tests here, so this machine must reach the pods' IPs on the agent port: true on a k3s node itself; on kind, add a
route to the pod network through the kind node (docs/kubernetes.md). The suite makes a namespace of its own
(``sbx-live-<run id>``), installs the chart's CRDs when the cluster lacks them (and leaves them), and deletes the
namespace at the end. NetworkPolicies are off unless ``SANDBOX_LIVE_NETWORK_POLICIES=1``: they admit only the
control plane's pods, and this process is not one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.errors import NotFound
from sandbox.models import Exec, SandboxSpec, SandboxState
from sandbox.operator import resources as res
from sandbox.service import Principal
from sandbox.service.records import SANDBOXES, pool_key
from tests.conftest import RUN_ID
from tests.k8s.conftest import Plane, control_plane
from tests.k8s.test_operator_fake_api import CRD_PATH, crd_docs
from tests.polling import eventually

KUBECONFIG = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
PREFIX = os.environ.get("SANDBOX_LIVE_IMAGE_PREFIX", "")
HOW = (
    "live suite against a real cluster: set KUBECONFIG (kind or k3s) and SANDBOX_LIVE_IMAGE_PREFIX (where "
    "`make push REGISTRY=host:port` put the images, e.g. 127.0.0.1:5000/sandbox); see docs/kubernetes.md"
)
pytestmark = pytest.mark.skipif(not (KUBECONFIG and PREFIX), reason=HOW)

LOGGER = logging.getLogger("sandbox.test.k8s.live")
ALICE = Principal("alice")
NAMESPACE = f"sbx-live-{RUN_ID}".lower()
TERMINAL = SandboxSpec(kind="terminal", labels={"sandbox.test": "live"})
TIMEOUT_S = 300.0
"""A real cluster pulls images and schedules pods: generous bounds."""


async def _ensure_crds(api: KubeApi) -> None:
    for crd in crd_docs():
        try:
            await api.get(f"{CRD_PATH}/{crd['metadata']['name']}", what="read a CRD")
        except NotFound:
            await api.create(CRD_PATH, crd, what="install a CRD")
    await asyncio.sleep(2)  # the API server serves a new CRD's kind within moments


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def live() -> AsyncIterator[Plane]:
    config = KubernetesConfig.model_validate({
        "kubeconfig": KUBECONFIG, "context": os.environ.get("SANDBOX_LIVE_CONTEXT") or None, "namespace": NAMESPACE,
        "owner": f"live-{RUN_ID}".lower(), "image_prefix": PREFIX, "ready_timeout_s": TIMEOUT_S,
        "image_pull_policy": os.environ.get("SANDBOX_LIVE_PULL_POLICY", "IfNotPresent"),
        "snapshot_dir": tempfile.mkdtemp(prefix="sbx-live-snapshots-"),
        "manage_network_policies": os.environ.get("SANDBOX_LIVE_NETWORK_POLICIES") == "1",
    })  # fmt: skip
    api = await KubeApi.connect(config)
    await api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}, what="create the test namespace")
    await _ensure_crds(api)
    backend = KubernetesBackend(config)
    plane = control_plane(backend, api, NAMESPACE, LOGGER, tick_s=0.5, health_interval_s=2, leading_within_s=60)
    try:
        async with plane as running:
            yield running
    finally:
        with contextlib.suppress(NotFound):
            await api.delete(f"/api/v1/namespaces/{NAMESPACE}", what="delete the test namespace")
        await api.close()


async def _sh(live: Plane, sandbox_id: str, cmd: str) -> str:
    result = await live.service.exec(ALICE, sandbox_id, Exec(cmd=cmd))
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def test_create_step_observe_and_reset_to_a_snapshot(live: Plane) -> None:
    info = await live.service.create(ALICE, TERMINAL)
    observation = await live.service.step(ALICE, info.id, Exec(cmd="echo v1 > /workspace/state; cat /workspace/state"))
    assert observation.exec is not None and observation.exec.stdout == "v1\n"
    await live.service.snapshot(ALICE, info.id, "live-1")
    await _sh(live, info.id, "echo v2 > /workspace/state")
    await live.service.reset(ALICE, info.id, snapshot="live-1")
    assert await _sh(live, info.id, "cat /workspace/state") == "v1\n"
    await live.service.delete(ALICE, info.id)
    await live.service.delete_snapshot(ALICE, "live-1")
    desktop = await live.service.create(ALICE, SandboxSpec(kind="desktop"))
    shot = (await live.service.observe(ALICE, desktop.id)).screenshot
    assert shot is not None and shot.data.startswith(b"\x89PNG")
    await live.service.delete(ALICE, desktop.id)


async def test_a_sandbox_pool_object_fills_and_serves_a_claim(live: Plane) -> None:
    spec = SandboxSpec(kind="terminal")
    key = pool_key(spec, live.backend.image_for(spec))
    body = {"apiVersion": res.API_VERSION, "kind": "SandboxPool", "metadata": {"name": "live-terminal"},
            "spec": {"kind": "terminal", "min": 1, "max": 2}}  # fmt: skip
    await live.api.create(res.path(NAMESPACE, res.POOLS), body, what="kubectl apply")
    await eventually(lambda: _queued(live, key, 1), TIMEOUT_S, "a warm pod in the pool")
    (warm,) = await live.service.store.items(key)
    info = await live.service.create(ALICE, spec)
    assert await live.instance(info.id) == warm
    await live.service.delete(ALICE, info.id)
    await live.api.delete(res.path(NAMESPACE, res.POOLS, "live-terminal"), what="kubectl delete sandboxpool")
    await eventually(lambda: _queued(live, key, 0), 60, "the pool drained")


async def _queued(live: Plane, key: str, n: int) -> bool:
    return len(await live.service.store.items(key)) == n


async def test_a_killed_pod_is_replaced(live: Plane) -> None:
    info = await live.service.create(ALICE, TERMINAL.model_copy(update={"auto_recover": True}))
    before = await live.instance(info.id)
    pod = core_path(NAMESPACE, "pods", live.backend.pod_name(before))
    await live.api.delete(pod, what="kubectl delete pod", grace_s=0)

    async def replaced() -> bool:
        record = await live.service.records.read(info.id)
        return record is not None and record.instance != before and record.state is SandboxState.RUNNING

    await eventually(replaced, TIMEOUT_S, "the sandbox recovered onto a new pod")
    assert await _sh(live, info.id, "echo ok") == "ok\n"
    await live.service.delete(ALICE, info.id)


async def test_sandbox_objects_are_mirrored_and_deleting_one_ends_its_sandbox(live: Plane) -> None:
    info = await live.service.create(ALICE, TERMINAL)

    async def healthy() -> bool:
        obj = await live.obj(res.SANDBOXES, info.id)
        return bool(obj and (obj.get("status") or {}).get("health") == "Healthy")

    await eventually(healthy, 60, "the sandbox mirrored, healthy")
    obj = await live.obj(res.SANDBOXES, info.id)
    assert obj is not None and obj["status"]["pod"] == live.backend.pod_name(await live.instance(info.id))
    assert obj["status"].get("node")  # the node the scheduler chose
    await live.api.delete(res.path(NAMESPACE, res.SANDBOXES, info.id), what="kubectl delete sandbox")
    await eventually(lambda: _ended(live, info.id), 120, "the sandbox ended and its object gone")


async def _ended(live: Plane, sandbox_id: str) -> bool:
    gone = await live.service.store.get(SANDBOXES, sandbox_id) is None
    return gone and await live.obj(res.SANDBOXES, sandbox_id) is None
