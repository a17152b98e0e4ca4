"""Deleting a sandbox's pod: gracefully, and gone only when the API server says so.

A delete asks for ``delete_grace_s`` seconds of grace (the kubelet sends SIGTERM, then SIGKILL, then tells the API
server, which removes the object), never 0. A forced delete (``gracePeriodSeconds=0``) removes the object at once,
whatever the kubelet did: on a node the control plane cannot reach (a partition) the container runs on, and a sandbox
of network ``egress`` keeps its internet access with nothing left on the API server to say it exists.

So after the DELETE the backend follows the pod (one watch on it) until the API server reports it gone (the watch's
DELETED, or a 404), for at most the grace period plus ``delete_wait_s``. A pod still there by then (its kubelet
silent) is left terminating: it stays listed (``status.judge``: EXITED, "being deleted"), so the service and
``kubectl get pods`` still see it, and the node controller, or an operator who knows the node is gone
(``kubectl delete pod --force``), ends it. This process does not wait for that pod again.

The trade-off: a destroy takes as long as the container needs to stop (usually well under a second; at most the
grace period), where a forced one returned at once; and a pod on a lost node keeps its name until someone settles
it, so a new instance never reuses it (instance ids are unique anyway).

The Secret holding the agent's token is deleted at once (the pod, already running, keeps its mounted copy); it is
also owned by the pod, so the garbage collector removes it with the pod should this delete be cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sandbox.backends.kubernetes import manifests
from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.errors import NotFound, Unavailable


class Teardown:
    def __init__(self, config: KubernetesConfig, *, logger: logging.Logger) -> None:
        self._config = config
        self._log = logger
        self.lingering: set[str] = set()
        """Pods whose delete was not confirmed in time: not waited for again (a partitioned node's)."""

    async def delete_pod(self, api: KubeApi, name: str) -> None:
        """Delete pod ``name`` and its Secret; return once the pod is gone, or once waiting longer is pointless."""
        namespace, grace = self._config.namespace, self._config.delete_grace_s
        pod: dict[str, Any] | None = None
        with contextlib.suppress(NotFound):
            pod = await api.delete(core_path(namespace, "pods", name), what=f"delete pod {name}", grace_s=grace)
        secret = core_path(namespace, "secrets", manifests.secret_name(name))
        with contextlib.suppress(NotFound):
            await api.delete(secret, what=f"delete {name}'s secret")
        if pod is None or name in self.lingering:
            return
        if await self.wait_gone(api, pod, timeout_s=grace + self._config.delete_wait_s):
            return
        self.lingering.add(name)
        self._log.warning(
            "pod %s is still terminating %g s after its delete: its node does not confirm (unreachable?); it stays "
            "listed as being deleted until the node controller or an operator (kubectl delete pod --force, once the "
            "node is known gone) removes it",
            name,
            grace + self._config.delete_wait_s,
        )

    async def wait_gone(self, api: KubeApi, pod: dict[str, Any], *, timeout_s: float) -> bool:
        """Whether the API server removed ``pod`` (as its DELETE answered it) within ``timeout_s``: read it, then
        watch it from that version until DELETED (read again when the watch breaks)."""
        namespace, name = self._config.namespace, pod["metadata"]["name"]
        if pod.get("kind") == "Status" or not pod.get("metadata", {}).get("deletionTimestamp"):
            return True  # removed at once (no kubelet had it: never scheduled, or already stopped)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                found = await api.get(core_path(namespace, "pods", name), what=f"read pod {name}")
            except NotFound:
                return True
            if found["metadata"].get("uid") != pod["metadata"].get("uid"):
                return True  # another pod of that name: ours went
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            events = api.watch(
                core_path(namespace, "pods"),
                what=f"watch pod {name} go",
                resource_version=str(found["metadata"].get("resourceVersion", "")),
                timeout_s=remaining,
                fields=f"metadata.name={name}",
            )
            try:
                async with asyncio.timeout(remaining + 1), contextlib.aclosing(events):
                    async for kind, _ in events:
                        if kind == "DELETED":
                            return True
            except TimeoutError:
                return False
            except Unavailable:  # the watch broke, or its version expired: read it again
                await asyncio.sleep(0.2)
