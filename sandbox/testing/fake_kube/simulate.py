"""The fake kubelets of mode "simulate": pods are not realized, only scheduled and reported running.

Each created pod is bound round-robin to one of N simulated nodes (``spec.nodeName``; a lost node gets no new pods;
with limited allocatable, the fake scheduler binds it instead: scheduler.py)
and becomes Running at once with an address from its node's range (10.128.0.0/9, 4096 per node), a running
container status and Ready conditions, so that thousands of pods cost only memory. ``lose_node`` does what the node
lifecycle controller does once a node stops reporting: its pods stay as the kubelet last reported them (phase
Running, containers running: nobody can say otherwise) but their ``Ready`` condition turns False; after
``eviction_s`` (the ``node.kubernetes.io/unreachable`` NoExecute taint's toleration, 300 s on a real cluster) the
taint eviction controller deletes them: a ``DisruptionTarget`` condition (reason DeletionByTaintManager) and a
deletionTimestamp, and, ``eviction_s`` later, the pod is gone (as the pod garbage collector force-deletes the pods of
a node that was removed). ``lose_node(phase=...)`` instead makes the legacy verdict at once: phase Failed (or
Unknown) with reason NodeLost. ``evict`` is the kubelet's (reason Evicted). Nothing answers on those addresses: a
client that reaches for a pod's agent gets no answer, as from a lost node; unless ``address`` is given (the
simulated agent's, sim_agent.py): every pod then has that IP, and the simulated agent answers for it (while Ready).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from typing import Any

from sandbox.testing.fake_kube.objects import ApiError, ObjectStore, now_rfc3339
from sandbox.testing.fake_kube.realize import running_status

_BASE = int(ipaddress.IPv4Address("10.128.0.0"))


class Simulator:
    def __init__(
        self, store: ObjectStore, *, nodes: int, address: str | None = None, eviction_s: float = 300.0
    ) -> None:
        if nodes < 1:
            raise ValueError("a simulated cluster needs at least one node")
        self.store = store
        self.nodes = [f"sim-node-{i}" for i in range(nodes)]
        self.address = address
        self.eviction_s = eviction_s
        self.lost: set[str] = set()
        self._evictions: set[asyncio.TimerHandle] = set()
        self._next = 0
        self._addresses = [0] * nodes

    def start(self) -> None:
        self.store.pod_hooks.append(self.on_pod)

    def on_pod(self, event: str, pod: dict[str, Any]) -> None:
        if event == "ADDED":
            meta = pod["metadata"]
            node = (pod.get("spec") or {}).get("nodeName")
            asyncio.get_running_loop().call_soon(self._run, meta["namespace"], meta["name"], node)

    def _run(self, namespace: str, name: str, node: str | None = None) -> None:
        """Run the pod on ``node`` (where the scheduler bound it: scheduler.py), else on the next node round-robin."""
        if node in self.nodes:
            index = self.nodes.index(node)
        else:
            for _ in self.nodes:  # round-robin over the nodes still there
                index = self._next % len(self.nodes)
                self._next += 1
                if self.nodes[index] not in self.lost:
                    break
        self._addresses[index] += 1
        ip = self.address or str(ipaddress.IPv4Address(_BASE + index * 4096 + self._addresses[index] % 4096))

        def running(pod: dict[str, Any]) -> None:
            container = pod["spec"]["containers"][0]
            pod["spec"]["nodeName"] = self.nodes[index]
            pod["status"] = running_status(ip, container["image"], f"sim-{pod['metadata']['uid']}", 0, {})
            pod["status"]["containerStatuses"][0]["name"] = container["name"]

        with contextlib.suppress(ApiError):  # deleted before it was scheduled
            self.store.update("pods", namespace, name, running)

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        items, _ = self.store.list("pods", None, fields=f"spec.nodeName={node}")
        return items

    def lose_node(self, node: str, *, phase: str | None = None) -> int:
        """The node stops answering: its pods not Ready now, deleted by the taint eviction after ``eviction_s`` (or,
        with ``phase``, failed at once with reason NodeLost, the legacy verdict); returns how many pods."""
        self.lost.add(node)
        pods = self.pods_on(node)
        for pod in pods:
            meta = pod["metadata"]
            if phase is not None:
                message = f"Node {node} which was running pod {meta['name']} is unresponsive"
                self._fail(meta["namespace"], meta["name"], phase=phase, reason="NodeLost", message=message)
                continue
            with contextlib.suppress(ApiError):
                self.store.update("pods", meta["namespace"], meta["name"], _not_ready)
            self._later(self.eviction_s, self._taint_evict, meta["namespace"], meta["name"], meta["uid"])
        return len(pods)

    def _later(self, delay: float, fn: Any, *args: Any) -> None:
        def run() -> None:
            self._evictions.discard(handle)
            fn(*args)

        handle: asyncio.TimerHandle = asyncio.get_running_loop().call_later(delay, run)
        self._evictions.add(handle)

    def _taint_evict(self, namespace: str, name: str, uid: str) -> None:
        """The taint eviction controller: a DisruptionTarget condition and a deletion that the lost kubelet never
        confirms; the pod garbage collector removes the pod ``eviction_s`` later."""
        found = self.store.objects.get(("pods", namespace, name))
        if found is None or found["metadata"]["uid"] != uid:
            return

        def evicted(pod: dict[str, Any]) -> None:
            disruption = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                          "message": "Taint manager: deleting due to NoExecute taint",
                          "lastTransitionTime": now_rfc3339()}  # fmt: skip
            pod["status"]["conditions"] = [*(pod["status"].get("conditions") or []), disruption]
            pod["metadata"].update(deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=30)

        self.store.update("pods", namespace, name, evicted)
        self._later(self.eviction_s, self._collect, namespace, name, uid)

    def _collect(self, namespace: str, name: str, uid: str) -> None:
        found = self.store.objects.get(("pods", namespace, name))
        if found is not None and found["metadata"]["uid"] == uid:
            self.store.delete("pods", namespace, name)

    def evict(self, namespace: str, name: str, *, reason: str = "Evicted", message: str = "") -> None:
        message = message or "The node was low on resource: memory."
        self._fail(namespace, name, phase="Failed", reason=reason, message=message)

    def _fail(self, namespace: str, name: str, *, phase: str, reason: str, message: str) -> None:
        def failed(pod: dict[str, Any]) -> None:
            pod["status"].update(phase=phase, reason=reason, message=message)
            for status in pod["status"].get("containerStatuses") or []:
                terminated = {"exitCode": 137, "reason": reason, "finishedAt": now_rfc3339()}
                status.update(ready=False, state={"terminated": terminated})

        self.store.update("pods", namespace, name, failed)

    async def delete_pod(self, namespace: str, name: str, grace: int | None) -> dict[str, Any]:
        return self.store.delete("pods", namespace, name)

    async def logs(self, namespace: str, name: str, tail: int | None) -> str:
        self.store.get("pods", namespace, name)
        return ""

    async def close(self) -> None:
        for handle in self._evictions:
            handle.cancel()
        self._evictions.clear()


def _not_ready(pod: dict[str, Any]) -> None:
    """What the node lifecycle controller writes on the pods of a node that stopped reporting (MarkPodsNotReady)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            condition.update(status="False", lastTransitionTime=now_rfc3339())
