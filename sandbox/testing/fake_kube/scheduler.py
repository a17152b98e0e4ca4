"""The fake scheduler of a cluster whose nodes have limited allocatable CPU, memory and pods
(``FakeKube(allocatable=...)``); without it (the default) every pod is placed at once, as before.

It stands between the object store and the fake kubelet (realize.py or simulate.py): the kubelet sees a pod only
once it is bound to a node. What kube-scheduler's resource fit does, kept as it shows through the API:

- a new pod goes on the first node (of the ones not lost) where the requests of the pods already there plus its own
  stay within the allocatable (requests: the containers' requests, or their limits when they state none); binding
  sets ``spec.nodeName`` and the condition PodScheduled True;
- a pod that fits nowhere stays Pending with the condition PodScheduled False, reason Unschedulable, and a Warning
  Event ``FailedScheduling`` from ``default-scheduler`` naming it (``involvedObject``), both with the scheduler's
  message: "0/3 nodes are available: 1 Insufficient cpu, 3 Insufficient memory." (one "N reason" per reason, sorted;
  a lost node counts as "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"); a later attempt with the
  same message counts up the Event rather than writing a new one;
- waiting pods are tried again, in the order they came, whenever room may have freed: a pod deleted, or one that
  ended (Succeeded, Failed: evicted, its node lost).

Not kept: priorities and preemption, affinity, taints other than a lost node's, topology spread, volume binding.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from fractions import Fraction
from typing import Any

from sandbox.testing.fake_kube.objects import ApiError, Event, Hook, ObjectStore, now_rfc3339
from sandbox.testing.fake_kube.quantities import ZERO, parse, pod_resources

SCHEDULER = "default-scheduler"
UNREACHABLE = "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"
FITTED = ("cpu", "memory")
ENDED = ("Succeeded", "Failed")


class Scheduler:
    def __init__(
        self, store: ObjectStore, *, nodes: list[str], allocatable: dict[str, str], lost: set[str] | None = None
    ) -> None:
        """``allocatable``: each node's, e.g. {"cpu": "4", "memory": "8Gi", "pods": "110"}; what it leaves out is
        unlimited (pods: 110, the kubelet's default). ``lost``: the names of nodes that are gone (shared with the
        kubelet that loses them)."""
        unknown = set(allocatable) - {*FITTED, "pods"}
        if unknown:
            raise ValueError(f"the fake scheduler fits cpu, memory and pods, not {sorted(unknown)}")
        self.store = store
        self.nodes = list(nodes)
        self.allocatable = {k: parse(v) for k, v in allocatable.items()}
        self.allocatable.setdefault("pods", Fraction(110))
        self.lost = lost if lost is not None else set()
        self.bound: dict[str, tuple[str, dict[str, Fraction]]] = {}
        """Pod uid -> (node, requests) of the pods placed and not ended."""
        self.waiting: dict[str, tuple[str, str]] = {}
        """Pod uid -> (namespace, name) of the pods not placed yet, in the order they came."""
        self._events: dict[str, tuple[str, str]] = {}
        """Pod uid -> (its FailedScheduling Event's name, the message) of its last failed attempt."""
        self._kubelet: Hook | None = None
        self._pending_pass = False

    def start(self, *, in_front_of: Hook) -> None:
        """Take the kubelet's place among the store's pod hooks: it then sees only the pods placed (and their
        deletions)."""
        hooks = self.store.pod_hooks
        hooks[hooks.index(in_front_of)] = self._on_pod
        self._kubelet = in_front_of
        self.store.event_hooks.append(self._on_event)

    # ---------------------------------------------------------------- what happens to pods

    def _on_pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if event == "ADDED":
            self.waiting[uid] = (meta["namespace"], meta["name"])
            self._soon()
        elif event == "DELETED":
            self.waiting.pop(uid, None)
            self._events.pop(uid, None)
            if self.bound.pop(uid, None) is not None:
                self._soon()
            assert self._kubelet is not None
            self._kubelet(event, pod)

    def _on_event(self, event: Event) -> None:
        """A pod that ended frees its room (called as the store emits: nothing is written from here)."""
        if event.resource != "pods" or event.type != "MODIFIED":
            return
        uid = event.obj["metadata"]["uid"]
        if uid in self.bound and (event.obj.get("status") or {}).get("phase") in ENDED:
            del self.bound[uid]
            self._soon()

    def _soon(self) -> None:
        """One scheduling pass after the current write (never a write from inside another)."""
        if not self._pending_pass:
            self._pending_pass = True
            asyncio.get_running_loop().call_soon(self._pass)

    # ---------------------------------------------------------------- placing

    def _pass(self) -> None:
        self._pending_pass = False
        for uid, (namespace, name) in list(self.waiting.items()):
            try:
                pod = self.store.get("pods", namespace, name)
            except ApiError:
                self.waiting.pop(uid, None)
                continue
            if pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
                self.waiting.pop(uid, None)
                continue
            self._place(uid, pod)

    def _place(self, uid: str, pod: dict[str, Any]) -> None:
        asked = pod_resources(pod)
        requests = {r: asked.get(f"requests.{r}", ZERO) for r in FITTED}
        node = pod["spec"].get("nodeName")  # bound by its creator: the scheduler has no say
        why: Counter[str] = Counter()
        if not node:
            for candidate in self.nodes:
                misfits = self._misfits(candidate, requests)
                if not misfits:
                    node = candidate
                    break
                why.update(misfits)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if not node:
            reasons = ", ".join(sorted(f"{count} {reason}" for reason, count in why.items()))
            self._unschedulable(uid, pod, f"0/{len(self.nodes)} nodes are available: {reasons}.")
            return
        del self.waiting[uid]
        self._events.pop(uid, None)
        self.bound[uid] = (node, requests)

        def bind(p: dict[str, Any]) -> None:
            p["spec"]["nodeName"] = node
            condition = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                         "lastTransitionTime": now_rfc3339()}  # fmt: skip
            p["status"]["conditions"] = [condition]

        bound = self.store.update("pods", namespace, name, bind)
        assert self._kubelet is not None
        self._kubelet("ADDED", bound)

    def _misfits(self, node: str, requests: dict[str, Fraction]) -> list[str]:
        """Why the pod does not fit on ``node`` (nothing: it fits)."""
        if node in self.lost:
            return [UNREACHABLE]
        there = [asked for where, asked in self.bound.values() if where == node]
        misfits = []
        if len(there) + 1 > self.allocatable["pods"]:
            misfits.append("Too many pods")
        for resource in FITTED:
            if resource in self.allocatable:
                used = sum((asked[resource] for asked in there), ZERO)
                if used + requests[resource] > self.allocatable[resource]:
                    misfits.append(f"Insufficient {resource}")
        return misfits

    def _unschedulable(self, uid: str, pod: dict[str, Any], message: str) -> None:
        """Say so on the pod (when its condition changes) and in a FailedScheduling Event (counted up when the same
        message comes again)."""
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not any(c.get("reason") == "Unschedulable" and c.get("message") == message for c in conditions):

            def unschedulable(p: dict[str, Any]) -> None:
                condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                             "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}  # fmt: skip
                p["status"]["conditions"] = [condition]

            with contextlib.suppress(ApiError):
                self.store.update("pods", namespace, name, unschedulable)
        now = now_rfc3339()
        last = self._events.get(uid)
        if last is not None and last[1] == message:

            def again(e: dict[str, Any]) -> None:
                e.update(count=int(e.get("count") or 1) + 1, lastTimestamp=now)

            with contextlib.suppress(ApiError):
                self.store.update("events", namespace, last[0], again)
                return
        event_name = f"{name}.{secrets.token_hex(8)}"
        involved = {"kind": "Pod", "namespace": namespace, "name": name, "uid": uid, "apiVersion": "v1",
                    "resourceVersion": meta.get("resourceVersion", "")}  # fmt: skip
        self.store.create(
            "events",
            namespace,
            {
                "metadata": {"name": event_name},
                "involvedObject": involved,
                "reason": "FailedScheduling",
                "message": message,
                "type": "Warning",
                "source": {"component": SCHEDULER},
                "reportingComponent": SCHEDULER,
                "reportingInstance": f"{SCHEDULER}-fake",
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )
        self._events[uid] = (event_name, message)
