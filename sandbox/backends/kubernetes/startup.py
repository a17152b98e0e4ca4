"""Following a new pod until it runs: first the scheduler's part, then the kubelet's, each with its own deadline.

    created ──(the scheduler places it)──> scheduled ──(the kubelet pulls, starts)──> running, with an IP
       │ within schedule_timeout_s                │ within the ready timeout, counted from the placement
       └─> CapacityExhausted                      └─> Unavailable (NotFound: its image cannot be pulled)

Image pulls that fail (ErrImagePull, ImagePullBackOff) are not a failure at first sight: the kubelet retries them,
so the create waits on to its ready deadline, logging each new pull message once, and only then fails (NotFound)
with the last one (``RETRIED_PULLS``).

On Kubernetes the scheduler decides where a pod fits; the control plane does not guess node capacity. While the
scheduler cannot place a pod (condition PodScheduled False, reason Unschedulable: no node has room for its requests,
or none matches its selector, tolerations or volumes), the create is waiting for capacity, not hung: each new word of
the scheduler is logged once ("waiting for capacity: 0/3 nodes are available: 3 Insufficient memory."), and once
``schedule_timeout_s`` has passed, :class:`~sandbox.errors.CapacityExhausted` quotes the last one, names what the pod
asked for and says what to do. A pod placed later (a pod deleted made room; an autoscaler added a node) goes on as
any other. All of it is read from the one watch kept on the pod, no polling; only a pod that ran out of time with no
condition to quote costs one read of its FailedScheduling Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sandbox.backends.kubernetes import status
from sandbox.backends.kubernetes.api import KubeApi, core_path
from sandbox.errors import CapacityExhausted, FailedPrecondition, NotFound, SandboxError, Unavailable

RETRIED_PULLS = frozenset({"ErrImagePull", "ImagePullBackOff"})
"""Pull failures the kubelet retries (with a back-off up to 5 min): a registry briefly down, a tag pushed a moment
later, a rate limit. A create waits through them to its start deadline and then fails with the last pull message;
InvalidImageName and ErrImageNeverPull never resolve and fail at once."""

WHAT_TO_DO = (
    "To make room: end other sandboxes (or other pods on those nodes), add nodes (or let the cluster autoscaler do "
    "so: raise schedule_timeout_s if it needs longer), or ask for fewer resources (the spec's cpus, memory_mb). If the "
    "reason is not room (a node selector, a taint, an unbound volume), fix that instead."
)


async def wait_running(
    api: KubeApi,
    pod: dict[str, Any],
    *,
    namespace: str,
    schedule_timeout_s: float,
    ready_timeout_s: float,
    logger: logging.Logger,
    instance: str,
) -> tuple[dict[str, Any], float]:
    """Follow ``pod`` (as created) through a watch until it runs with an IP; returns it and the deadline (event-loop
    time) of its readiness: ``ready_timeout_s`` after the scheduler placed it. Fails early when it cannot start."""
    loop, name = asyncio.get_running_loop(), pod["metadata"]["name"]
    place_by = loop.time() + schedule_timeout_s
    ready_by: float | None = None
    said: str | None = None
    pull_failed: str | None = None
    while status.pod_ip(pod) is None:
        if ready_by is None and status.scheduled(pod):
            ready_by = loop.time() + ready_timeout_s
            if said is not None:
                logger.info("pod %s placed on a node after waiting for capacity", name, extra={"instance": instance})
        failure = status.startup_failure(pod)
        if failure is not None:
            why, image_fault = failure
            if image_fault and waiting_reason(pod) in RETRIED_PULLS:
                if why != pull_failed:  # the kubelet retries with a back-off: wait on, to the deadline
                    logger.info("pod %s: %s (the kubelet retries)", name, why, extra={"instance": instance})
                pull_failed = why
            elif image_fault:
                raise NotFound(f"pod {name} cannot pull its image: {why}")
            else:
                raise Unavailable(f"pod {name} cannot start: {why}")
        if ready_by is None and (word := status.unschedulable(pod)) is not None and word != said:
            logger.warning("waiting for capacity: %s", word, extra={"instance": instance})
            said = word
        remaining = (place_by if ready_by is None else ready_by) - loop.time()
        if remaining <= 0:
            if ready_by is None:
                raise await no_room(api, pod, namespace=namespace, timeout_s=schedule_timeout_s)
            if pull_failed is not None and waiting_reason(pod) in RETRIED_PULLS:
                raise NotFound(
                    f"pod {name} cannot pull its image: still failing {ready_timeout_s:g} s after it was placed on a "
                    f"node (the kubelet retried until the start deadline, ready_timeout_s): {pull_failed}"
                )
            raise Unavailable(
                f"pod {name} was not running within {ready_timeout_s:g} s of being placed on a node: "
                f"{status.pending_reason(pod)}"
            )
        try:
            async with asyncio.timeout(remaining + 1):
                pod = await _next_state(api, pod, remaining, namespace=namespace)
        except TimeoutError:
            continue
        except Unavailable as e:  # the watch broke (or its version expired): read the pod again
            logger.info("watching pod %s: %s; reading it again", name, e.message, extra={"instance": instance})
            await asyncio.sleep(0.2)
            pod = await api.get(core_path(namespace, "pods", name), what=f"read pod {name}")
    return pod, ready_by if ready_by is not None else loop.time() + ready_timeout_s


def waiting_reason(pod: dict[str, Any]) -> str | None:
    """Why the pod's container waits (ErrImagePull, ContainerCreating ...), or None."""
    waiting = (status.container_status(pod).get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason")
    return str(reason) if reason else None


def _moved(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether ``after`` is news for :func:`wait_running`: it runs or failed, was placed, or the scheduler's word
    changed."""
    return (
        status.pod_ip(after) is not None
        or status.startup_failure(after) is not None
        or status.scheduled(after) != status.scheduled(before)
        or status.unschedulable(after) != status.unschedulable(before)
    )


async def _next_state(api: KubeApi, pod: dict[str, Any], remaining: float, *, namespace: str) -> dict[str, Any]:
    """The pod at its next news, or as last seen when the watch ends."""
    name = pod["metadata"]["name"]
    events = api.watch(
        core_path(namespace, "pods"),
        what=f"watch pod {name}",
        resource_version=str(pod["metadata"].get("resourceVersion", "")),
        timeout_s=remaining,
        fields=f"metadata.name={name}",
    )
    before = pod
    async with contextlib.aclosing(events):
        async for kind, obj in events:
            if kind == "DELETED":
                raise FailedPrecondition(f"pod {name} was deleted while it started")
            if kind in ("ADDED", "MODIFIED"):
                pod = obj
                if _moved(before, pod):
                    break
    return pod


async def no_room(api: KubeApi, pod: dict[str, Any], *, namespace: str, timeout_s: float) -> SandboxError:
    """The error of a pod the scheduler did not place within ``timeout_s``: CapacityExhausted quoting the scheduler
    (the pod's condition, else its last FailedScheduling Event); Unavailable when the scheduler never said a word
    (none runs for it?)."""
    name = pod["metadata"]["name"]
    why = status.unschedulable(pod) or await failed_scheduling(api, pod, namespace=namespace)
    asked = status.requests_of(pod)
    if why is None:
        return Unavailable(
            f"pod {name} ({asked}) was not placed on a node within {timeout_s:g} s (schedule_timeout_s), and no "
            "scheduler said why (no PodScheduled condition, no FailedScheduling event): is one running for it?"
        )
    return CapacityExhausted(
        f"no room in the cluster for pod {name} ({asked}): still unscheduled after {timeout_s:g} s "
        f"(schedule_timeout_s); the scheduler says: {why.rstrip('. ')}. {WHAT_TO_DO}"
    )


async def failed_scheduling(api: KubeApi, pod: dict[str, Any], *, namespace: str) -> str | None:
    """The message of the pod's latest FailedScheduling Event (one LIST), or None. Reading them is a courtesy: a
    refusal (no RBAC for events) or an error is no reason to fail another way."""
    meta = pod["metadata"]
    fields = f"involvedObject.name={meta['name']},reason=FailedScheduling"
    if meta.get("uid"):
        fields += f",involvedObject.uid={meta['uid']}"
    try:
        what = f"read pod {meta['name']}'s events"
        listing = await api.list(core_path(namespace, "events"), what=what, fields=fields)
    except SandboxError:
        return None
    said = [e for e in listing.get("items") or [] if e.get("message")]
    if not said:
        return None
    latest = max(said, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return str(latest["message"])
