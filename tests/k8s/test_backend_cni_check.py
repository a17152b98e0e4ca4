"""The start's self-check of NetworkPolicy enforcement (sandbox/backends/kubernetes/cni_check.py), on the fake API
server: realized, the fake's pods share one Docker network and nothing enforces the probe's policy, so the check must
find "not enforced" (a real run of the probe: two pods, their agents over TCP, a connection from one to the other);
simulated, nothing runs in a pod, so it must say "unknown" and why. Either way the start is not held up, the probe
pods never show as instances, and the pods and secrets are gone afterwards."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.cni_check import LABEL_PROBE, Enforcement, probe_pod
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.testing.fake_kube import FakeKube
from tests.k8s.fake_api_fixtures import K8S_OWNER, NAMESPACE, docker_engine, k8s_config, kube
from tests.polling import eventually

__all__ = ["docker_engine", "kube"]

LOGGER = "sandbox.backends.kubernetes.backend"


async def _left(kube: FakeKube) -> list[str]:
    assert kube.store is not None
    left = []
    for resource in ("pods", "secrets", "networkpolicies"):
        items, _ = await kube.call(kube.store.list, resource, NAMESPACE)
        left += [f"{resource}/{i['metadata']['name']}" for i in items]
    return left


async def _checked(backend: KubernetesBackend) -> bool:
    return backend.network_policy_check.state not in (Enforcement.PENDING,)


async def test_a_cluster_that_does_not_enforce_policies_is_reported(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    backend = KubernetesBackend(k8s_config(kube, check_network_policies=True))
    caplog.set_level(logging.INFO, logger=LOGGER)
    try:
        assert backend.network_policy_check.state is Enforcement.PENDING
        await backend.ping()  # the first connection starts the check, in the background
        assert await backend.list_instances() == []  # the probe pods are no instances, even while they run
        await eventually(lambda: _checked(backend), 90, "the self-check's result")
        result = backend.network_policy_check
        assert result.state is Enforcement.NOT_ENFORCED, result.detail
        assert "sandboxes are NOT isolated" in result.detail and result.checked_at is not None
        assert backend.isolation() == ("not_enforced", result.detail)  # what the metrics report
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert any("NetworkPolicy enforcement: not_enforced" in r.getMessage() for r in errors)
        await eventually(lambda: _nothing_left(kube), 30, "the probe's pods and secrets removed")
    finally:
        await backend.close()
    assert await _left(kube) == []


async def _nothing_left(kube: FakeKube) -> bool:
    return await _left(kube) == []


async def test_a_check_that_cannot_run_says_unknown_and_why() -> None:
    kube = FakeKube(mode="simulate", owner=K8S_OWNER, namespaces=(NAMESPACE,), nodes=1, agents=True)
    await asyncio.to_thread(kube.start)
    backend = KubernetesBackend(k8s_config(kube, agent_port=kube.agent_port, check_network_policies=True))
    try:
        await backend.ping()
        await eventually(lambda: _checked(backend), 30, "the self-check's result")
        result = backend.network_policy_check
        assert result.state is Enforcement.UNKNOWN and result.detail.startswith("the check failed: ")
        await eventually(lambda: _nothing_left(kube), 30, "the probe's objects removed")
    finally:
        await backend.close()
        await asyncio.to_thread(kube.close)


def test_the_check_is_off_when_configured_and_probes_look_like_sandboxes_of_network_none() -> None:
    off = KubernetesBackend(KubernetesConfig(check_network_policies=False))
    assert off.network_policy_check.state is Enforcement.OFF
    labels = probe_pod(KubernetesConfig(owner="prod"), "client", "0a1b")["metadata"]["labels"]
    assert labels["sandbox.platform.io/network"] == "none" and labels[LABEL_PROBE] == "cni"
    assert labels["sandbox.owner"] == "prod" and "sandbox.instance" not in labels
