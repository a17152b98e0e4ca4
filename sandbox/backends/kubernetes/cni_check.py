"""Are sandboxes isolated by NetworkPolicies? A self-check at start, run once in the background.

NetworkPolicies are only objects: the CNI plugin enforces them, and some do not (kubenet, Flannel alone, some
managed clusters' defaults). On such a cluster every sandbox reaches every other and the internet whatever its
network, and nothing else says so. So at its first connection the backend checks (``check_network_policies``):

1. two probe pods start, labelled as sandboxes of network ``none`` are (``sandbox.platform.io/network=none``, this
   owner's labels) plus ``sandbox.platform.io/probe=cni``: a listener and a client, of the terminal image, whose
   agents serve only peers presenting the pod's own token. The sandbox namespace's baseline policies (the chart's
   ``sandboxes.networkPolicy``: a default deny, ingress from the control plane) apply to them as to any sandbox;
2. the control plane reaches both agents (the baseline lets it in): the listener listens;
3. through its agent, the client tries a TCP connection to the listener's agent port (``bash``'s ``/dev/tcp``, 3 s),
   which the baseline denies twice over (the client's egress, the listener's ingress). Refused or timed out:
   **enforced**. Connected three times over 4 s (a CNI may program a new pod's rules a moment late): **not
   enforced**, which means the CNI enforces no NetworkPolicy or the namespace has no default deny: either way a
   sandbox of network ``none`` is not isolated;
4. the pods (and their Secrets) are deleted.

Probing pods labelled exactly as sandboxes checks what matters, the isolation sandboxes get, and needs no right
beyond those on pods and secrets (no policy of its own to make and remove). The result (``PolicyCheck``: enforced,
not_enforced, unknown with why, or off) goes to the control plane's log (an ERROR when not enforced) and stays on the
backend (``KubernetesBackend.network_policy_check``). It never blocks the start; an error (no image, no room, a
control plane outside the cluster that the baseline keeps out) makes it ``unknown``, saying why. The probe pods carry
no ``sandbox.instance``: the service never sees them as instances.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.aio import settled
from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import LABEL_INSTANCE
from sandbox.backends.kubernetes import manifests, startup, status
from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.backends.kubernetes.teardown import Teardown
from sandbox.errors import SandboxError, Unavailable
from sandbox.models import SandboxSpec

LABEL_PROBE = "sandbox.platform.io/probe"
CONNECT_TRIES = 3
CONNECT_SPACING_S = 2.0


class Enforcement(enum.StrEnum):
    PENDING = "pending"
    ENFORCED = "enforced"
    NOT_ENFORCED = "not_enforced"
    UNKNOWN = "unknown"
    OFF = "off"


@dataclass(frozen=True)
class PolicyCheck:
    state: Enforcement
    detail: str
    checked_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state.value, "detail": self.detail, "checked_at": self.checked_at}


Connect = Callable[[str, str], AgentClient]
"""An agent client for (pod IP, token)."""


def probe_pod(config: KubernetesConfig, role: str, run: str) -> dict[str, Any]:
    """A probe pod: a sandbox pod of the terminal image (network none), labelled as a probe and not an instance."""
    instance = f"cni-check-{run}-{role}"
    spec = SandboxSpec(kind="terminal")
    pod = manifests.pod_manifest(
        config, instance_id=instance, spec=spec, image=manifests.kind_image(config, "terminal")
    )
    labels = pod["metadata"]["labels"]
    del labels[LABEL_INSTANCE]
    labels[LABEL_PROBE] = "cni"
    pod["metadata"]["annotations"] = {}
    return pod


class CniCheck:
    def __init__(self, config: KubernetesConfig, connect: Connect, *, logger: logging.Logger) -> None:
        self._config = config
        self._connect = connect
        self._log = logger
        self._teardown = Teardown(config, logger=logger)
        self.result = PolicyCheck(
            Enforcement.PENDING if config.check_network_policies else Enforcement.OFF,
            "not checked yet" if config.check_network_policies else "check_network_policies is off",
        )

    async def run(self, api: KubeApi) -> PolicyCheck:
        """Check once; the result is also kept in ``result`` and logged. Never raises but for a cancellation."""
        try:
            state, detail = await self._check(api)
        except SandboxError as e:
            state, detail = Enforcement.UNKNOWN, f"the check failed: {e.message}"
        self.result = PolicyCheck(state, detail, time.time())
        level = logging.ERROR if state is Enforcement.NOT_ENFORCED else logging.INFO
        if state is Enforcement.UNKNOWN:
            level = logging.WARNING
        self._log.log(level, "NetworkPolicy enforcement: %s: %s", state.value, detail)
        return self.result

    async def _check(self, api: KubeApi) -> tuple[Enforcement, str]:
        config, run = self._config, secrets.token_hex(4)
        pods = [probe_pod(config, role, run) for role in ("listener", "client")]
        try:
            started = await asyncio.gather(*(self._start(api, pod) for pod in pods), return_exceptions=True)
            failed = [e for e in started if isinstance(e, BaseException)]
            if failed:
                await asyncio.gather(*(s[1].close() for s in started if not isinstance(s, BaseException)))
                raise failed[0]
            listener, client = (s for s in started if not isinstance(s, BaseException))
            return await self._probe(listener, client)
        finally:
            await asyncio.shield(self._clean_up(api, [p["metadata"]["name"] for p in pods]))

    async def _start(self, api: KubeApi, pod: dict[str, Any]) -> tuple[str, AgentClient]:
        """The probe pod running, its agent answering: (its IP, its agent)."""
        config, name, token = self._config, pod["metadata"]["name"], secrets.token_urlsafe(32)
        secret = manifests.secret_manifest(config, instance_id=name, token=token)
        secret["metadata"]["name"] = manifests.secret_name(name)
        del secret["metadata"]["labels"][LABEL_INSTANCE]
        secret["metadata"]["labels"][LABEL_PROBE] = "cni"
        await settled(api.create(core_path(config.namespace, "secrets"), secret, what=f"create {name}'s secret"))
        made = await settled(api.create(core_path(config.namespace, "pods"), pod, what=f"create probe pod {name}"))
        running, ready_by = await startup.wait_running(
            api,
            made,
            namespace=config.namespace,
            schedule_timeout_s=config.schedule_timeout_s,
            ready_timeout_s=config.ready_timeout_s,
            logger=self._log,
            instance=name,
        )
        ip = str(status.pod_ip(running))
        agent = self._connect(ip, token)
        try:
            await agent.wait_ready(max(1.0, ready_by - asyncio.get_running_loop().time()))
        except SandboxError as e:
            await agent.close()
            raise Unavailable(
                f"the control plane cannot reach probe pod {name}'s agent ({e.message}): the sandbox namespace's "
                "baseline lets in only the control plane's pods; is it running outside the cluster?"
            ) from e
        return ip, agent

    async def _probe(
        self, listener: tuple[str, AgentClient], client: tuple[str, AgentClient]
    ) -> tuple[Enforcement, str]:
        (ip, listening), (_, connecting) = listener, client
        port = self._config.agent_port
        script = f"timeout 3 bash -c 'exec 3<>/dev/tcp/{ip}/{port}' 2>/dev/null; echo $?"
        try:
            for attempt in range(CONNECT_TRIES):
                if attempt:
                    await asyncio.sleep(CONNECT_SPACING_S)
                result = await connecting.exec(["bash", "-c", script], timeout=10)
                code = result.stdout.strip()
                if code != "0":
                    how = "timed out" if code == "124" else f"refused (exit {code})"
                    return (
                        Enforcement.ENFORCED,
                        f"a probe pod labelled as a sandbox of network none could not connect to another ({how}): "
                        "the CNI enforces the sandbox namespace's NetworkPolicies",
                    )
        finally:
            await asyncio.gather(listening.close(), connecting.close(), return_exceptions=True)
        return (
            Enforcement.NOT_ENFORCED,
            f"a probe pod labelled as a sandbox of network none connected to another, {CONNECT_TRIES} times over "
            f"{(CONNECT_TRIES - 1) * CONNECT_SPACING_S:g} s: sandboxes are NOT isolated. Either the cluster's CNI does "
            "not enforce NetworkPolicies (use one that does: Calico, Cilium, Antrea, or the cloud's network policy "
            "option) or the sandbox namespace has no default deny (the chart's sandboxes.networkPolicy.enabled)",
        )

    async def _clean_up(self, api: KubeApi, pods: list[str]) -> None:
        with contextlib.suppress(SandboxError):
            await asyncio.gather(*(self._teardown.delete_pod(api, name) for name in pods))
