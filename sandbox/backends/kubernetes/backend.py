"""Instances as pods on a Kubernetes cluster, through kubernetes_asyncio (nothing blocks the event loop).

An instance is a Pod and a Secret holding its agent's token (manifests.py says what the pod spec does and why).
``create`` makes the Secret, the Pod, then waits, through a watch, for the scheduler to place the pod (waiting for
capacity up to ``schedule_timeout_s``, then CapacityExhausted: startup.py), for it to run with an IP, and for the
agent to answer healthy over TCP with the token; a spec whose image is ``archive:<name>`` is then restored from
that snapshot archive (snapshots.py). Every call that makes something on the cluster runs to its end even when its
caller is cancelled, and a failed or cancelled create deletes what it made: no pod or secret is left behind.

The agent is reached at the pod's IP on ``agent_port``; every connection first presents the token. The token is
kept in memory for the pods this process created and read from the Secret otherwise (never logged).

What differs from Docker, by design:

- ``restart`` is refused: the API cannot start a pod's container again; the kubelet already restarts a crashed
  one in place (restartPolicy Always), and since the new container starts from the image, the backend reports a
  restarted container as failed (status.py). The service then replaces the instance (``auto_recover``) or marks the
  sandbox unhealthy with the reason: a holder sees a replacement or a clear error, never lost files in silence.
- an evicted pod or one on a lost node is EXITED with the scheduler's or the node controller's reason.
- capacity is the scheduler's: the backend sizes no host (``host_facts`` is None); a pod it cannot place is waited
  for, and a create the namespace's ResourceQuota refuses is CapacityExhausted (errors.py), as is one that finds no
  room before ``schedule_timeout_s``.
- snapshots are archives of the writable paths (snapshots.py), not images.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
from functools import partial
from typing import Any

from sandbox.aio import raise_if_cancelled, settled
from sandbox.backends import android
from sandbox.backends.agent_client import AgentClient, _TcpTransport
from sandbox.backends.base import (
    LABEL_INSTANCE,
    Backend,
    BackendInstance,
    BackendSnapshot,
    HostFacts,
    RuntimeState,
)
from sandbox.backends.kubernetes import manifests, startup, status
from sandbox.backends.kubernetes.api import KubeApi, core_path, policy_path
from sandbox.backends.kubernetes.claims import claim_patch, read_claims
from sandbox.backends.kubernetes.cni_check import CniCheck, PolicyCheck
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.backends.kubernetes.lease import LeaseElector
from sandbox.backends.kubernetes.manifests import ANNOTATION_IMAGE, ARCHIVE_PREFIX, TOKEN_KEY
from sandbox.backends.kubernetes.netpolicy import TenantPolicies, remove_legacy
from sandbox.backends.kubernetes.pod_cache import PodCache
from sandbox.backends.kubernetes.snapshots import ArchiveStore, restore_archive, take_archive
from sandbox.backends.kubernetes.teardown import Teardown
from sandbox.backends.kubernetes.volumes import ensure_volume
from sandbox.errors import FailedPrecondition, InvalidArgument, NotFound, SandboxError, Unavailable
from sandbox.models import NetworkPolicy, SandboxKind, SandboxSpec

SUPPORTED_KINDS = (SandboxKind.TERMINAL, SandboxKind.DESKTOP, SandboxKind.BROWSER, SandboxKind.ANDROID)
_log = logging.getLogger(__name__)


class KubernetesBackend(Backend):
    name = "kubernetes"
    can_restart = False
    status_lag_s = 5.0  # the kubelet's relist (1 s) and its status update to the API server, with room to spare

    def __init__(self, config: KubernetesConfig) -> None:
        super().__init__()
        self.config = config
        self.archives = ArchiveStore(config.snapshot_dir)
        self._api: KubeApi | None = None
        self._connecting: asyncio.Lock | None = None
        self.policies = TenantPolicies(config)
        self._teardown = Teardown(config, logger=_log)
        self.cni = CniCheck(config, self._probe_agent, logger=_log)
        self._background: set[asyncio.Task[Any]] = set()
        """What the first connection starts: the CNI self-check, the removal of an earlier version's policies."""
        self._endpoints: dict[str, tuple[str, str]] = {}
        """Instance -> (pod IP, agent token): known for the pods this process created or reached once."""
        self._reported: dict[str, str] = {}
        self.pod_cache = PodCache(self.api, self._pods(), selector=manifests.owner_selector(config), logger=_log)
        """The owner's pods, listed once and then watched: what the listings below read (pod_cache.py)."""

    # ------------------------------------------------------------------ names, API

    def pod_name(self, instance_id: str) -> str:
        return manifests.pod_name(self.config.owner, instance_id)

    def image_for(self, spec: SandboxSpec) -> str:
        return spec.image or manifests.kind_image(self.config, spec.kind.value)

    def _pods(self, name: str | None = None, sub: str | None = None) -> str:
        return core_path(self.config.namespace, "pods", name, sub)

    def _secret(self, instance_id: str) -> str:
        return core_path(self.config.namespace, "secrets", manifests.secret_name(self.pod_name(instance_id)))

    async def api(self) -> KubeApi:
        """The API client, configured on first use (from the kubeconfig, or the pod's ServiceAccount)."""
        if self._api is None:
            self._connecting = self._connecting or asyncio.Lock()
            async with self._connecting:
                if self._api is None:
                    self._api = await KubeApi.connect(self.config)
                    self._after_connect(self._api)
        return self._api

    def _after_connect(self, api: KubeApi) -> None:
        """In the background (never holding up the start): the CNI self-check, and the owner-wide NetworkPolicies
        of an earlier version removed (netpolicy.LEGACY)."""
        if self.config.check_network_policies:
            self._background.add(asyncio.create_task(self.cni.run(api)))
        if self.config.manage_network_policies:
            delete = partial(self._delete_policy, api)
            self._background.add(asyncio.create_task(remove_legacy(self.config, delete, _log)))

    async def _delete_policy(self, api: KubeApi, name: str) -> None:
        await api.delete(policy_path(self.config.namespace, name), what=f"delete NetworkPolicy {name}")

    @property
    def network_policy_check(self) -> PolicyCheck:
        """Whether the cluster enforces NetworkPolicies, as the start's self-check found (cni_check.py)."""
        return self.cni.result

    def isolation(self) -> tuple[str, str] | None:
        result = self.cni.result
        return result.state.value, result.detail

    def _probe_agent(self, ip: str, token: str) -> AgentClient:
        return AgentClient.tcp(ip, self.config.agent_port, token=token, label="network policy probe")

    async def host_facts(
        self, *, memory_mb: float | None = None, cpus: float | None = None, pids: int | None = None
    ) -> HostFacts | None:
        """None, whatever is configured: the pods share no one host; the scheduler places them (startup.py)."""
        return None

    def leader_elector(self, identity: str, ttl_s: float) -> LeaseElector:
        """The Lifecycle's elector on Kubernetes: a Lease in the sandbox namespace (lease.py)."""
        return LeaseElector(self.api, self.config.namespace, identity, duration_s=ttl_s)

    async def ping(self) -> None:
        api = await self.api()
        await api.call("GET", self._pods(), what="list pods", query={"limit": 1})

    # ------------------------------------------------------------------ lifecycle

    async def create(
        self,
        instance_id: str,
        spec: SandboxSpec,
        *,
        pool: str | None = None,
        ready_timeout: float | None = None,
        tenant: str | None = None,
    ) -> BackendInstance:
        """``tenant`` scopes the pod: its label ``sandbox.tenant-hash``, its internal network (the tenant's
        NetworkPolicy, made at its first internal pod: netpolicy.py) and its shared volumes (the tenant's claims:
        volumes.py)."""
        if spec.kind not in SUPPORTED_KINDS:
            raise FailedPrecondition(f"the kubernetes backend cannot run {spec.kind.value} sandboxes")
        timeout = ready_timeout or android.ready_timeout(spec, self.config.ready_timeout_s)
        archive = self.archives.name_of(spec.image or "") if (spec.image or "").startswith(ARCHIVE_PREFIX) else None
        image = manifests.kind_image(self.config, spec.kind.value) if archive else self.image_for(spec)
        name, token = self.pod_name(instance_id), secrets.token_urlsafe(32)
        pod_manifest = manifests.pod_manifest(
            self.config, instance_id=instance_id, spec=spec, image=image, pool=pool, tenant=tenant
        )
        try:
            if archive is not None:
                await self.archives.require(archive)
            api = await self.api()
            if spec.network is NetworkPolicy.INTERNAL and self.config.manage_network_policies:
                await self.policies.ensure(tenant, partial(self._create_policy, api))
            for mount in spec.volumes:
                await ensure_volume(api, self.config, mount.name, tenant)
            secret = manifests.secret_manifest(self.config, instance_id=instance_id, token=token)
            # settled: a request cut off by a cancellation may still make its object; wait for the answer, so the
            # clean-up below finds whatever was made.
            secrets_path = core_path(self.config.namespace, "secrets")
            await settled(api.create(secrets_path, secret, what=f"create {name}'s secret"))
            pod = await settled(api.create(self._pods(), pod_manifest, what=f"create pod {name}"))
            patch = manifests.owned_by_pod(pod)
            await api.merge_patch(self._secret(instance_id), patch, what=f"attach {name}'s secret to it")
            pod, ready_by = await self._wait_running(api, pod, instance_id, timeout)
            self._endpoints[instance_id] = (str(status.pod_ip(pod)), token)
            await self._wait_ready(instance_id, max(1.0, ready_by - asyncio.get_running_loop().time()))
            if archive is not None:
                await restore_archive(
                    self.agent(instance_id), self.archives, archive, restart_programs=spec.kind is SandboxKind.DESKTOP
                )
            raise_if_cancelled()
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.destroy(instance_id))
            raise
        return status.describe(pod)

    async def _wait_running(
        self, api: KubeApi, pod: dict[str, Any], instance_id: str, ready_timeout: float
    ) -> tuple[dict[str, Any], float]:
        """The pod once it runs with an IP (waiting for capacity first while the scheduler cannot place it), and the
        deadline of its readiness (startup.py)."""
        return await startup.wait_running(
            api,
            pod,
            namespace=self.config.namespace,
            schedule_timeout_s=self.config.schedule_timeout_s,
            ready_timeout_s=ready_timeout,
            logger=_log,
            instance=instance_id,
        )

    async def _wait_ready(self, instance_id: str, timeout: float) -> None:
        try:
            await self.agent(instance_id).wait_ready(timeout)
        except SandboxError as e:
            logs = await self.logs(instance_id, tail=30)
            raise Unavailable(
                f"instance {instance_id} did not become ready: {e.message}\n--- its logs ---\n{logs}"
            ) from e

    async def restart(self, instance_id: str, *, ready_timeout: float | None = None) -> BackendInstance:
        raise FailedPrecondition(
            f"pod {self.pod_name(instance_id)} cannot be started again in place (the API has no such call, and a "
            "container the kubelet restarts starts from its image, without the sandbox's files); replace it"
        )

    async def destroy(self, instance_id: str) -> None:
        """Delete the pod gracefully (``delete_grace_s``, never forced) and its Secret, then wait until the API
        server says the pod is gone (teardown.py); a pod still terminating after ``delete_wait_s`` (its node
        unreachable) stays listed, being deleted, and is not waited for again by this process."""
        await self._forget_agent(instance_id)
        self._endpoints.pop(instance_id, None)
        self._reported.pop(instance_id, None)
        name = self.pod_name(instance_id)
        await self._teardown.delete_pod(await self.api(), name)
        if name not in self._teardown.lingering:
            await self.pod_cache.wait_gone(name)  # the listings that follow (snapshots in use) see it gone

    async def inspect(self, instance_id: str) -> BackendInstance:
        api, name = await self.api(), self.pod_name(instance_id)
        try:
            pod = await api.get(self._pods(name), what=f"read pod {name}")
        except NotFound:
            detail = f"pod {name} is not on the API server (deleted, or its namespace was)"
            return BackendInstance(
                id=instance_id, kind=SandboxKind.TERMINAL, ref="", state=RuntimeState.MISSING, detail=detail
            )
        return self._described(pod)

    async def list_instances(self) -> list[BackendInstance]:
        pods = await self._owned_pods()
        found = [self._described(p) for p in pods if LABEL_INSTANCE in (p["metadata"].get("labels") or {})]
        present = {i.id for i in found}  # forget what other replicas removed meanwhile
        self._reported = {k: v for k, v in self._reported.items() if k in present}
        self._endpoints = {k: v for k, v in self._endpoints.items() if k in present}
        return found

    async def _owned_pods(self) -> list[dict[str, Any]]:
        return await self.pod_cache.pods()

    def _described(self, pod: dict[str, Any]) -> BackendInstance:
        """The pod as an instance (``detail`` says why it is not running); the first time a pod is seen failed, say
        why in the log too."""
        instance = status.describe(pod)
        detail = instance.detail
        if instance.state is RuntimeState.EXITED and detail and self._reported.get(instance.id) != detail:
            self._reported[instance.id] = detail
            _log.warning("%s", detail, extra={"instance": instance.id})
        return instance

    async def logs(self, instance_id: str, *, tail: int = 200) -> str:
        api, name = await self.api(), self.pod_name(instance_id)
        query = {"container": manifests.CONTAINER, "tailLines": tail}
        try:
            return await api.text(self._pods(name, "log"), what=f"logs of pod {name}", query=query)
        except (NotFound, InvalidArgument):  # no such pod, or its container has not started yet
            return ""

    # ------------------------------------------------------------------ namespace objects

    async def _create_policy(self, api: KubeApi, policy: dict[str, Any]) -> None:
        what = f"create NetworkPolicy {policy['metadata']['name']}"
        await settled(api.create(policy_path(self.config.namespace), policy, what=what))

    # ------------------------------------------------------------------ claims

    async def set_claim(self, instance_id: str, claim: dict[str, Any]) -> None:
        api, name = await self.api(), self.pod_name(instance_id)
        await api.merge_patch(self._pods(name), claim_patch(claim), what=f"attach the claim to pod {name}")

    async def claims(self) -> dict[str, dict[str, Any]]:
        return read_claims(await self._owned_pods())

    # ------------------------------------------------------------------ snapshots

    async def snapshot(self, instance_id: str, name: str, *, record: dict[str, Any] | None = None) -> str:
        engine = await self.inspect(instance_id)
        if engine.state is not RuntimeState.RUNNING:
            raise FailedPrecondition(f"instance {instance_id} is {engine.state.value}: nothing to snapshot")
        archive = self.archives.safe_name(name)
        await take_archive(self.agent(instance_id), self.archives, archive, record=record)
        return ARCHIVE_PREFIX + archive

    async def list_snapshots(self) -> list[BackendSnapshot]:
        return await self.archives.entries()

    async def collect_snapshots(
        self, *, keep: set[str], only: set[str] | None = None, min_age_s: float = 0.0
    ) -> list[str]:
        in_use = {(p["metadata"].get("annotations") or {}).get(ANNOTATION_IMAGE, "") for p in await self._owned_pods()}
        return await self.archives.collect(keep=keep | in_use, only=only, min_age_s=min_age_s)

    # ------------------------------------------------------------------ the agent

    def _connect_agent(self, instance_id: str) -> AgentClient:
        label = f"instance {instance_id}"
        known = self._endpoints.get(instance_id)
        if known is not None:
            return AgentClient.tcp(known[0], self.config.agent_port, token=known[1], label=label)
        return AgentClient(label=label, transport=_PodTransport(self, instance_id))

    async def lane_address(self, instance_id: str) -> str | None:
        """The pod's agent on its TCP port: a lane's hello there presents its ticket, not the pod's token, and the
        connection serves lane steps only. It reaches a client inside the cluster's pod network."""
        ip, _ = await self.resolve(instance_id)
        host = f"[{ip}]" if ":" in ip else ip
        return f"tcp:{host}:{self.config.agent_port}"

    async def resolve(self, instance_id: str) -> tuple[str, str]:
        """The pod's IP and its agent's token, read from the API server (then kept)."""
        known = self._endpoints.get(instance_id)
        if known is not None:
            return known
        api, name = await self.api(), self.pod_name(instance_id)
        try:
            pod = await api.get(self._pods(name), what=f"read pod {name}")
            secret = await api.get(self._secret(instance_id), what=f"read {name}'s secret")
        except NotFound as e:
            raise Unavailable(f"the agent of instance {instance_id} cannot be reached: {e.message}") from e
        ip = status.pod_ip(pod)
        encoded = (secret.get("data") or {}).get(TOKEN_KEY)
        if ip is None or not encoded:
            _, _, detail = status.judge(pod)
            raise Unavailable(f"the agent of instance {instance_id} cannot be reached: {detail}")
        found = (ip, base64.b64decode(encoded).decode())
        self._endpoints[instance_id] = found
        return found

    async def close(self) -> None:
        for task in self._background:
            task.cancel()  # the CNI check's clean-up (pods, policy) runs to its end first
        await asyncio.gather(*self._background, return_exceptions=True)
        await super().close()
        await self.pod_cache.close()
        if self._api is not None:
            api, self._api = self._api, None
            await api.close()


class _PodTransport(_TcpTransport):
    """TCP to a pod whose IP and token are looked up on the first connection (a pod another replica, or an earlier
    run of this one, created)."""

    def __init__(self, backend: KubernetesBackend, instance_id: str) -> None:
        super().__init__(backend.pod_name(instance_id), backend.config.agent_port, "unresolved")
        self._backend = backend
        self._instance = instance_id
        self._resolved = False

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if not self._resolved:
            self._host, self._token = await self._backend.resolve(self._instance)
            self.address = f"{self._host}:{self._port}"
            self._resolved = True
        return await super().connect()
