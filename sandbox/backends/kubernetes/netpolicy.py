"""Network ``internal`` on Kubernetes: one NetworkPolicy per tenant, made by the backend at the tenant's first internal
pod.

**Who owns what.** The baseline policies are the chart's (``sandboxes.networkPolicy``): a default deny for every pod
of the sandbox namespace with ingress from the control plane only, and egress to the internet minus the denied
ranges for pods labelled ``sandbox.platform.io/network=egress``. The backend makes no baseline policy; it labels each
pod with its network and its tenant's scope (``sandbox.tenant-hash``: ``base.tenant_hash``, or ``none``), and makes
the one thing the chart cannot render ahead of time: for each tenant T with internal sandboxes, the policy
``sbx-<owner>-internal-<scope of T>`` selecting pods with network=internal AND tenant=T, and letting them receive
from and send to only pods with network=internal AND tenant=T (plus the cluster DNS when ``internal_dns`` says so).
A policy cannot say "pods with my own label value", hence one per tenant. Policies add up: the control plane's
ingress comes from the chart's baseline; nothing here opens anything to another tenant's pods.

**Once per tenant per process.** :class:`TenantPolicies` remembers the tenants whose policy it made (or found: a 409
AlreadyExists is success) and keeps one create in flight per tenant, so a burst of 300 internal creates of one
tenant makes one POST; a failed ensure is forgotten, and the next create of that tenant tries again.

**Never deleted by the backend.** A tenant's policy stays after its last internal pod goes: it is a few hundred bytes,
selects no pod then (the CNI programs nothing for it), and removing it would race with another replica's create of
the same tenant that already counts it as made (its new pod would then start without its policy: cut off from its
peers, as the chart's default deny leaves it). ``kubectl delete networkpolicy -l sandbox.tenant-hash=<scope>`` removes
one by hand; each replica makes it again at its next start for that tenant's next internal pod.

**Upgrades.** The owner-wide ``sbx-<owner>-internal`` and ``sbx-<owner>-egress`` of earlier versions would keep
opening what the chart and these policies now decide; the first connection removes them (``remove_legacy``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.backends.kubernetes.manifests import LABEL_NETWORK, LABEL_TENANT, owner_labels, tenant_scope
from sandbox.errors import FailedPrecondition, NotFound, SandboxError
from sandbox.models import NetworkPolicy

Create = Callable[[dict[str, Any]], Awaitable[object]]
"""POSTs one NetworkPolicy (``KubeApi.create`` on the namespace's networkpolicies); raises FailedPrecondition on 409."""


def policy_name(config: KubernetesConfig, scope: str) -> str:
    return f"sbx-{config.owner}-internal-{scope}"


def internal_selector(config: KubernetesConfig, scope: str) -> dict[str, str]:
    """The labels of one tenant's internal pods of this owner."""
    return {**owner_labels(config), LABEL_NETWORK: NetworkPolicy.INTERNAL.value, LABEL_TENANT: scope}


def internal_policy(config: KubernetesConfig, tenant: str | None) -> dict[str, Any]:
    """The NetworkPolicy of ``tenant``'s internal sandboxes: each other, and nothing else (see the module)."""
    scope = tenant_scope(tenant)
    peers = {"podSelector": {"matchLabels": internal_selector(config, scope)}}
    egress: list[dict[str, Any]] = [{"to": [peers]}]
    if config.internal_dns:
        dns = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": config.dns_namespace}},
            "podSelector": {"matchLabels": dict(config.dns_pod_labels)},
        }
        egress.append({"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": policy_name(config, scope),
            "namespace": config.namespace,
            "labels": {**owner_labels(config), LABEL_TENANT: scope},
        },
        "spec": {
            "podSelector": peers["podSelector"],
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [peers]}],
            "egress": egress,
        },
    }


class TenantPolicies:
    """The per-tenant internal policies this process has made or found: each ensured once, one POST at a time."""

    def __init__(self, config: KubernetesConfig) -> None:
        self._config = config
        self._made: set[str] = set()
        self._inflight: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Future[None]] = set()
        self.posts = 0
        """POSTs sent (for tests and the bench: a burst of one tenant costs one)."""

    def made(self, tenant: str | None) -> bool:
        return tenant_scope(tenant) in self._made

    async def ensure(self, tenant: str | None, create: Create) -> None:
        """``tenant``'s internal policy exists (made now, by an earlier call, or by another replica)."""
        scope = tenant_scope(tenant)
        if scope in self._made:
            return
        pending = self._inflight.get(scope)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._inflight[scope] = pending
            task = asyncio.ensure_future(self._make(scope, tenant, create, pending))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # shield: one caller cancelled does not cancel the POST the others wait on
        await asyncio.shield(pending)

    async def _make(self, scope: str, tenant: str | None, create: Create, done: asyncio.Future[None]) -> None:
        try:
            self.posts += 1
            with contextlib.suppress(FailedPrecondition):  # 409 AlreadyExists: another replica, or an earlier run
                await create(internal_policy(self._config, tenant))
            self._made.add(scope)
            done.set_result(None)
        except asyncio.CancelledError:
            done.cancel()
            raise
        except Exception as e:  # every waiter gets it; the next ensure of this tenant tries again
            done.set_exception(e)
            done.exception()  # retrieved: no "never retrieved" warning when nobody waits any more
        finally:
            self._inflight.pop(scope, None)


LEGACY = ("internal", "egress")
"""The owner-wide policies earlier versions made, ``sbx-<owner>-<what>``, that open what the chart and the per-tenant
policies now decide: ``internal`` let every internal pod of the owner reach every other, whatever its tenant;
``egress`` added its own ranges beside the chart's ``deniedCIDRs``. Removed at start. The third, ``isolation``, only
denied (ingress from the control plane alone, no egress): it is left, harmless beside the chart's default deny, and
an operator deletes it once that baseline is installed."""


async def remove_legacy(
    config: KubernetesConfig, delete: Callable[[str], Awaitable[object]], logger: logging.Logger
) -> None:
    """Delete the owner-wide policies of earlier versions (``LEGACY``) that exist; errors are logged, not raised."""
    for what in LEGACY:
        name = f"sbx-{config.owner}-{what}"
        try:
            await delete(name)
        except NotFound:
            continue
        except SandboxError as e:
            logger.warning("the owner-wide NetworkPolicy %s of an earlier version could not be removed: %s", name, e)
            continue
        logger.info(
            "removed the owner-wide NetworkPolicy %s of an earlier version (now per tenant, or the chart's)", name
        )
