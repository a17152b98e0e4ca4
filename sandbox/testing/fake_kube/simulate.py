"""The fake kubelets of mode "simulate": pods are not realized, only scheduled and reported running.

Each created pod is bound round-robin to one of N simulated nodes (``spec.nodeName``; a lost node gets no new pods;
with limited allocatable, the fake scheduler binds it instead: scheduler.py)
and becomes Running at once with an address from its node's range (10.128.0.0/9, 4096 per node), a running
container status and Ready conditions, so that thousands of pods cost only memory. ``lose_node`` makes the node
controller's verdict on every pod of a node: phase Failed with reason NodeLost (or phase Unknown); ``evict`` the
kubelet's (reason Evicted). Nothing answers on those addresses: a client that reaches for a pod's agent gets no
answer, as from a lost node; unless ``address`` is given (the simulated agent's, sim_agent.py): every pod then has
that IP, and the simulated agent answers for it.
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
    def __init__(self, store: ObjectStore, *, nodes: int, address: str | None = None) -> None:
        if nodes < 1:
            raise ValueError("a simulated cluster needs at least one node")
        self.store = store
        self.nodes = [f"sim-node-{i}" for i in range(nodes)]
        self.address = address
        self.lost: set[str] = set()
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

    def lose_node(self, node: str, *, phase: str = "Failed") -> int:
        """Every pod on ``node`` as the node controller reports it once the node stops answering; returns how many."""
        self.lost.add(node)
        pods = self.pods_on(node)
        for pod in pods:
            meta = pod["metadata"]
            message = f"Node {node} which was running pod {meta['name']} is unresponsive"
            self._fail(meta["namespace"], meta["name"], phase=phase, reason="NodeLost", message=message)
        return len(pods)

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
        pass
