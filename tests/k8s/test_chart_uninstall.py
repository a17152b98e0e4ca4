"""`helm uninstall` leaves nothing Terminating: the chart's pre-delete hook (rendered with real helm) and the module it
runs, ``python -m sandbox.operator.uninstall``, against the fake API server after a real control plane made
sandboxes whose Sandbox objects hold the finalizer ``sandbox.platform.io/end-sandbox``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
from typing import Any

import pytest
from aiohttp import web

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.errors import NotFound
from sandbox.models import SandboxSpec
from sandbox.operator import resources as res
from sandbox.operator import uninstall
from sandbox.operator.operator import Operator
from sandbox.operator.settings import OperatorSettings
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_kube import FakeKube
from tests.k8s import harness, rbac
from tests.k8s.fake_api_fixtures import CONTROL_PLANE_NAMESPACE, K8S_OWNER, NAMESPACE, k8s_config
from tests.k8s.fake_api_fixtures import operator_kube as kube
from tests.k8s.test_chart import one, validate_all
from tests.polling import eventually

__all__ = ["kube"]  # a fixture: the fake API server with the CRDs, for a whole control plane

LOGGER = logging.getLogger("sandbox.test.k8s.uninstall")
ALICE = Principal("alice")
CP_NAMESPACE = CONTROL_PLANE_NAMESPACE
HOOK = "sandbox-uninstall"


def is_uninstall_hook(obj: dict[str, Any]) -> bool:
    return (obj["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"


def hook_docs(*sets: str) -> list[dict[str, Any]]:
    return [d for d in harness.render_chart(sets=sets) if is_uninstall_hook(d)]


def test_the_pre_delete_hook_is_a_job_of_the_control_plane_image_with_its_own_account() -> None:
    docs = harness.render_chart()
    validate_all(docs)
    hooks = [d for d in docs if is_uninstall_hook(d)]
    assert {harness.kn(d) for d in hooks} == {
        f"ServiceAccount/{CP_NAMESPACE}/{HOOK}",
        f"Role/{CP_NAMESPACE}/{HOOK}",
        f"Role/{NAMESPACE}/{HOOK}",
        f"RoleBinding/{CP_NAMESPACE}/{HOOK}",
        f"RoleBinding/{NAMESPACE}/{HOOK}",
        f"Job/{CP_NAMESPACE}/{HOOK}",
    }
    for d in hooks:
        annotations = d["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    weight = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks}
    assert weight["ServiceAccount"] < weight["Job"] and weight["Role"] < weight["Job"], "its rights exist first"
    job = one(tuple(hooks), "Job")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    control_plane = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == control_plane["image"] == "sandbox/controlplane:0.1.0"
    assert container["command"] == ["python", "-m", "sandbox.operator.uninstall"]
    assert f"--namespace={NAMESPACE}" in container["args"] and "--owner=sandbox" in container["args"]
    assert pod["serviceAccountName"] == HOOK and pod["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] == 120
    for binding in (d for d in hooks if d["kind"] == "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": HOOK, "namespace": CP_NAMESPACE}]
        assert binding["roleRef"]["name"] == HOOK
    scale = [r for r in hooks if r["kind"] == "Role" and r["metadata"]["namespace"] == CP_NAMESPACE]
    assert {
        "apiGroups": ["apps"],
        "resources": ["deployments/scale"],
        "resourceNames": ["sandbox"],
        "verbs": ["patch"],
    } in scale[0]["rules"], "it may scale the control plane's Deployment, no other"


def test_the_hook_can_be_turned_off() -> None:
    assert hook_docs("uninstallHook.enabled=false") == []


async def _mirrored_fleet(kube: FakeKube, count: int) -> list[str]:
    """A control plane (service, lifecycle, operator) makes ``count`` sandboxes, their Sandbox objects mirrored with
    the finalizer, then goes away as `helm uninstall` would take it: without ending them."""
    store = await EmbeddedStore.open(None, logger=LOGGER)
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port))
    service = SandboxService(backend, store, logger=LOGGER)
    settings = LifecycleSettings(tick_s=0.1, health_interval_s=0.5, leader_ttl_s=1.0)
    lifecycle = Lifecycle(service, settings, logger=LOGGER)
    operator = Operator(service, lifecycle, backend, settings=OperatorSettings(interval_s=0.1), logger=LOGGER)
    await service.start()
    loops = [asyncio.create_task(lifecycle.run()), asyncio.create_task(operator.run())]
    try:
        await eventually(lambda: operator.running, 10, "the replica leading")
        made = [(await service.create(ALICE, SandboxSpec(kind="terminal"))).id for _ in range(count)]
        for name in made:
            await eventually(lambda n=name: _finalized(kube, n), 15, f"{name} mirrored with the finalizer")  # type: ignore[misc]
            await eventually(lambda n=name: _owned_pod(kube, n), 15, f"{name}'s pod owned by its Sandbox")  # type: ignore[misc]
        return made
    finally:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await operator.close()
        await lifecycle.stop()
        await service.close()
        await store.close()


async def _get(kube: FakeKube, resource: str, name: str) -> dict[str, Any] | None:
    assert kube.store is not None
    with contextlib.suppress(NotFound, Exception):
        obj: dict[str, Any] = await kube.call(kube.store.get, resource, NAMESPACE, name)
        return obj
    return None


async def _finalized(kube: FakeKube, name: str) -> bool:
    obj = await _get(kube, res.SANDBOXES, name)
    return bool(obj and res.FINALIZER in (obj["metadata"].get("finalizers") or []))


async def _owned_pod(kube: FakeKube, name: str) -> dict[str, Any] | None:
    """The pod whose controller is the Sandbox ``name`` (the operator's ownerReference), if there is one yet."""
    for pod in await _list(kube, "pods", f"sandbox.owner={K8S_OWNER}"):
        if any(
            r.get("kind") == "Sandbox" and r.get("name") == name for r in pod["metadata"].get("ownerReferences") or []
        ):
            return pod
    return None


async def _list(kube: FakeKube, resource: str, labels: str = "") -> list[dict[str, Any]]:
    assert kube.store is not None
    items, _ = await kube.call(kube.store.list, resource, NAMESPACE, labels=labels)
    return list(items)


def _hook_args(kube: FakeKube) -> list[str]:
    """The Job's arguments as the chart renders them, this run's owner and the fake's kubeconfig instead."""
    (job,) = [d for d in hook_docs() if d["kind"] == "Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = [a for a in container["args"] if not a.startswith("--owner=")]
    return [*container["command"][1:], *args, f"--owner={K8S_OWNER}", f"--kubeconfig={kube.kubeconfig}"]


@pytest.mark.timeout(120)
async def test_uninstall_releases_every_sandbox_so_nothing_hangs_terminating(kube: FakeKube) -> None:
    assert kube.store is not None and kube.api is not None
    made = await _mirrored_fleet(kube, 3)
    selector = f"sandbox.owner={K8S_OWNER}"
    assert len(await _list(kube, "pods", selector)) == 3 and len(await _list(kube, "secrets", selector)) == 3
    # one already deleted by kubectl while no control plane ran: Terminating, held by the finalizer
    await kube.call(kube.store.delete, res.SANDBOXES, NAMESPACE, made[0])
    held = await _get(kube, res.SANDBOXES, made[0])
    assert held is not None and held["metadata"]["deletionTimestamp"]
    # a pod the operator had not made its Sandbox's dependent yet when the control plane went (its patch comes a pass
    # after the mirror): deleting the Sandbox does not take it, the hook deletes it; the others go with their Sandbox
    unowned = await _owned_pod(kube, made[2])
    assert unowned is not None
    await kube.call(
        kube.store.patch,
        "pods",
        NAMESPACE,
        unowned["metadata"]["name"],
        {"metadata": {"ownerReferences": None}},
        strategic=False,
    )
    # another release's object in the same namespace, with the same finalizer: not ours to release
    other = {
        "apiVersion": res.API_VERSION,
        "kind": "Sandbox",
        "metadata": {
            "name": "sb-other",
            "labels": {"sandbox.managed-by": "sandbox", "sandbox.owner": "other"},
            "finalizers": [res.FINALIZER],
        },
        "spec": {"kind": "terminal", "tenant": "bob"},
    }
    await kube.call(kube.store.create, res.SANDBOXES, NAMESPACE, other)

    logged = len(kube.api.requests)
    env = {**os.environ, "PYTHONPATH": str(harness.ROOT)}
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, *_hook_args(kube)], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the Terminating object goes as its finalizer does; the pods the Sandboxes own go with them, the secrets with
    # their pods (ownerReferences); the one unowned pod is the hook's to delete
    assert "finalizers removed=3, Sandbox objects deleted=2, pods deleted=1" in proc.stderr, proc.stderr

    ours = await _list(kube, res.SANDBOXES, selector)
    assert ours == [], [o["metadata"] for o in ours]
    assert await _list(kube, "pods", selector) == []
    assert await _list(kube, "secrets", selector) == []
    # nothing of this release holds a finalizer: deleting the namespace would not wait on anything of ours
    left = await _list(kube, res.SANDBOXES)
    assert [o["metadata"]["name"] for o in left] == ["sb-other"]
    assert left[0]["metadata"]["finalizers"] == [res.FINALIZER] and not left[0]["metadata"].get("deletionTimestamp")

    # every call the hook made is allowed by the hook's own Roles, and it needs no more than they grant
    roles = [d for d in hook_docs() if d["kind"] == "Role"]
    granted = set().union(*(rbac.grants(r) for r in roles))  # sandbox-system and sandboxes, as the fake has them
    calls = {c for m, p in list(kube.api.requests)[logged:] if (c := rbac.to_call(m, p)) is not None}
    assert calls, "the hook made no request"
    refused = sorted(str(c) for c in calls if rbac.allowed_by(c, granted) is None)
    assert not refused, f"calls the hook's Roles (templates/uninstall-hook.yaml) do not allow: {refused}"
    used = {rbac.allowed_by(c, granted) for c in calls}
    # listing the control plane's pods follows a successful scale to 0; the fake serves no Deployments (404: the
    # control plane counts as stopped), so that call is not made here
    unused = sorted(g for g in granted - used if g[1:4] != ("", "pods", "list") or g[0] != CP_NAMESPACE)
    assert not unused, f"hook rules no call used: {unused}"

    await kube.call(kube.store.delete, res.SANDBOXES, NAMESPACE, "sb-other")
    await kube.call(
        kube.store.patch, res.SANDBOXES, NAMESPACE, "sb-other", {"metadata": {"finalizers": None}}, strategic=False
    )


class _DeploymentServer:
    """The two calls the stop makes, served as a Deployment controller answers them: a merge patch of
    ``deployments/<name>/scale`` (its pods go ``pods_left_after`` listings later), and a LIST of the pods."""

    def __init__(self, pods_left_after: int | None) -> None:
        self.pods_left_after = pods_left_after
        self.patches: list[tuple[str, Any]] = []
        self.listings: list[str] = []

    async def scale(self, request: web.Request) -> web.Response:
        if request.match_info["name"] != "sandbox":
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
        assert request.content_type == "application/merge-patch+json"
        self.patches.append((request.path, await request.json()))
        return web.json_response({"kind": "Scale", "spec": {"replicas": 0}})

    async def pods(self, request: web.Request) -> web.Response:
        self.listings.append(request.query.get("labelSelector", ""))
        running = self.pods_left_after is None or len(self.listings) <= self.pods_left_after
        items = [{"metadata": {"name": "sandbox-7d9-x1"}}] if self.patches and running else []
        return web.json_response({"kind": "PodList", "items": items, "metadata": {}})


async def _serve(server: _DeploymentServer, tmp: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_patch("/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale", server.scale)
    app.router.add_get("/api/v1/namespaces/{ns}/pods", server.pods)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "t",
                "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "t", "user": {"token": "t"}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
            }
        )
    )
    return runner, str(kubeconfig)


@pytest.mark.parametrize(("left_after", "stopped"), [(2, True), (None, False)])
async def test_the_control_plane_is_stopped_first_and_waited_for(
    tmp_path: Any, left_after: int | None, stopped: bool
) -> None:
    """Scaled to 0 through its Deployment's scale subresource, then its pods listed until none is left; pods that
    never go fail the clean-up by the deadline (the Job fails, Helm reports it) rather than racing the control plane."""
    server = _DeploymentServer(left_after)
    runner, kubeconfig = await _serve(server, tmp_path)
    config = KubernetesConfig.model_validate({"kubeconfig": kubeconfig, "owner": "x", "namespace": NAMESPACE})
    api = await KubeApi.connect(config)
    selector = "app.kubernetes.io/component=control-plane"
    try:
        if stopped:
            assert await uninstall.stop_control_plane(api, CP_NAMESPACE, "sandbox", selector, timeout_s=5, poll_s=0.05)
            assert len(server.listings) == 3 and set(server.listings) == {selector}
        else:
            with pytest.raises(TimeoutError, match="control-plane pods still running after 1 s: sandbox-7d9-x1"):
                await uninstall.stop_control_plane(api, CP_NAMESPACE, "sandbox", selector, timeout_s=1, poll_s=0.05)
        assert server.patches == [
            (f"/apis/apps/v1/namespaces/{CP_NAMESPACE}/deployments/sandbox/scale", {"spec": {"replicas": 0}})
        ]
        # no such Deployment: nothing runs, nothing to wait for
        assert not await uninstall.stop_control_plane(api, CP_NAMESPACE, "gone", selector, timeout_s=1)
    finally:
        await api.close()
        await runner.cleanup()
