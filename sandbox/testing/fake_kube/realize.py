"""The fake kubelet of mode "realize": every pod becomes a Docker container (container_spec.py says how).

A created pod is scheduled on the node ``fake-node`` and started: phase Running, ``status.podIP`` = the container's
address on the harness's internal Docker network (the host reaches it directly; nothing else can), a running
container status. When the container dies, or is removed behind the API's back, the pod shows it (terminated, with
its exit code) and, as the kubelet does under restartPolicy Always, a new container from the image takes its place
after ``restart_backoff_s`` (``restartCount`` + 1; the old container's files are gone). Deleting a pod removes its
container (with grace 0 before the API answers; otherwise the pod first shows a deletionTimestamp). Every Docker
call runs in a worker thread, off the fake server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
from dataclasses import dataclass
from functools import partial
from typing import Any

import docker
import docker.errors

from sandbox.backends.docker.teardown import TeardownLane
from sandbox.testing.fake_kube import pulls
from sandbox.testing.fake_kube.container_spec import Context, NotRunnable, container_args
from sandbox.testing.fake_kube.objects import ApiError, ObjectStore, now_rfc3339

NODE = "fake-node"
_log = logging.getLogger(__name__)


TEARDOWNS = TeardownLane()
"""Pod containers are removed one at a time, host-wide, like the Docker backend's (teardown.py)."""


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    task: asyncio.Task[None] | None = None
    container: str | None = None
    restarts: int = 0
    settling: bool = False
    """A death is being handled (or the pod was evicted): the monitor leaves it alone."""
    deleted: bool = False


def running_status(ip: str, image: str, container_id: str, restarts: int, last: dict[str, Any]) -> dict[str, Any]:
    now = now_rfc3339()
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    container = {
        "name": "",
        "image": image,
        "imageID": f"docker://{image}",
        "containerID": f"docker://{container_id}",
        "ready": True,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": now}},
    }
    if last:
        container["lastState"] = {"terminated": last}
    return {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1", "startTime": now,
            "conditions": conditions, "containerStatuses": [container], "qosClass": "Guaranteed"}  # fmt: skip


class Realizer:
    def __init__(
        self,
        store: ObjectStore,
        client: docker.DockerClient,
        *,
        workdir: str,
        network: str,
        labels: dict[str, str],
        restart_backoff_s: float = 1.0,
        poll_s: float = 0.3,
    ) -> None:
        self.store = store
        self.client = client
        self.workdir = workdir
        self.network = network
        self.labels = labels
        """On every container: the owner labels the tests pass, and the harness's own."""
        self.restart_backoff_s = restart_backoff_s
        self.poll_s = poll_s
        self._pods: dict[str, _Pod] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._monitor: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.store.pod_hooks.append(self.on_pod)
        self._monitor = asyncio.create_task(self._watch_containers())

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def on_pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if event == "ADDED":
            record = self._pods[meta["uid"]] = _Pod(meta["namespace"], meta["name"], meta["uid"])
            record.task = self._spawn(self._realize(record, pod))
        elif event == "DELETED" and (known := self._pods.get(meta["uid"])) is not None and not known.deleted:
            self._spawn(self._remove(known))  # removed without the kubelet's part (a namespace, a dependent)

    # ---------------------------------------------------------------- start

    def _set_status(self, record: _Pod, status: dict[str, Any], node: bool = True) -> None:
        def change(pod: dict[str, Any]) -> None:
            if node:
                pod["spec"]["nodeName"] = NODE
            pod["status"] = status

        with contextlib.suppress(ApiError):  # deleted meanwhile
            self.store.update("pods", record.namespace, record.name, change)

    def _waiting(self, record: _Pod, pod: dict[str, Any], reason: str, message: str) -> None:
        name = pod["spec"]["containers"][0]["name"]
        waiting = {"name": name, "ready": False, "restartCount": record.restarts, "image": "",
                   "state": {"waiting": {"reason": reason, "message": message}}}  # fmt: skip
        conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}]
        self._set_status(record, {"phase": "Pending", "conditions": conditions, "containerStatuses": [waiting]})

    def _context(self, pod: dict[str, Any], image_user: str) -> Context:
        namespace = pod["metadata"]["namespace"]
        secrets, _ = self.store.list("secrets", namespace)
        claims, _ = self.store.list("persistentvolumeclaims", namespace)
        return Context(
            workdir=self.workdir,
            network=self.network,
            labels=self.labels,
            image_user=image_user,
            secrets={s["metadata"]["name"]: dict(s.get("data") or {}) for s in secrets},
            claims={c["metadata"]["name"] for c in claims},
        )

    async def _realize(self, record: _Pod, pod: dict[str, Any], last: dict[str, Any] | None = None) -> None:
        image = pod["spec"]["containers"][0]["image"]
        report = partial(self._waiting, record, pod)
        deleted, backoff = (lambda: record.deleted), self.restart_backoff_s
        attrs = await pulls.pull(self.client, image, report, deleted=deleted, backoff_s=backoff)
        if attrs is None:
            return
        while not record.deleted:
            try:
                args = await asyncio.to_thread(container_args, pod, self._context(pod, attrs["Config"].get("User", "")))
                break
            except NotRunnable as e:
                self._waiting(record, pod, e.reason, e.message)
                if not e.retry:
                    return
                await asyncio.sleep(0.25)
        if record.deleted:
            return
        try:
            container = await asyncio.to_thread(self.client.containers.create, **args)
            if record.deleted:  # deleted while it was made: a removal that listed before it existed missed it
                await self._remove_container(record)
                return
            await asyncio.to_thread(container.start)
            await asyncio.to_thread(container.reload)
        except docker.errors.DockerException as e:
            self._waiting(record, pod, "RunContainerError", str(e))
            return
        record.container = container.id  # only now: the monitor takes a container that is not running for dead
        ip = container.attrs["NetworkSettings"]["Networks"][self.network]["IPAddress"]
        status = running_status(ip, image, str(container.id), record.restarts, last or {})
        status["containerStatuses"][0]["name"] = pod["spec"]["containers"][0]["name"]
        self._set_status(record, status)

    # ---------------------------------------------------------------- deaths and restarts

    async def _watch_containers(self) -> None:
        """Every ``poll_s``: one listing of the harness's containers; a realized pod whose container stopped or
        vanished is handled as the kubelet would."""
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                listing = await asyncio.to_thread(
                    self.client.api.containers,
                    all=True,
                    filters={"label": [f"{k}={v}" for k, v in self.labels.items()]},
                )
            except docker.errors.DockerException as e:
                _log.warning("the fake kubelet cannot list containers: %s", e)
                continue
            alive = {s["Id"]: s for s in listing}
            for record in list(self._pods.values()):
                if record.deleted or record.settling or record.container is None:
                    continue
                summary = alive.get(record.container)
                if summary is None or summary.get("State") != "running":
                    found = re.search(r"Exited \((-?\d+)\)", str((summary or {}).get("Status", "")))
                    code = int(found.group(1)) if found else 137
                    record.settling = True
                    # the pod's task now: a removal waits for the restart (and the container it makes) to end
                    record.task = self._spawn(self._restart(record, code, gone=summary is None))

    async def _restart(self, record: _Pod, code: int, *, gone: bool) -> None:
        reason = "ContainerGone" if gone else ("Completed" if code == 0 else "Error")
        last = {"exitCode": code, "reason": reason, "finishedAt": now_rfc3339()}
        try:
            pod = self.store.get("pods", record.namespace, record.name)
        except ApiError:
            return

        def terminated(p: dict[str, Any]) -> None:
            for status in p["status"].get("containerStatuses") or []:
                status.update(ready=False, state={"terminated": last})
            for condition in p["status"].get("conditions") or []:
                if condition["type"] in ("Ready", "ContainersReady"):
                    condition["status"] = "False"

        with contextlib.suppress(ApiError):
            self.store.update("pods", record.namespace, record.name, terminated)
        await asyncio.sleep(self.restart_backoff_s)
        if record.deleted or pod["spec"].get("restartPolicy", "Always") == "Never":
            return
        await self._remove_container(record)
        record.restarts += 1
        await self._realize(record, pod, last)
        record.settling = False

    def evict(self, namespace: str, name: str, *, reason: str, message: str, phase: str = "Failed") -> None:
        """The pod fails with ``reason`` (Evicted, NodeLost) and its container goes; the pod object stays."""
        pod = self.store.get("pods", namespace, name)
        record = self._pods.get(pod["metadata"]["uid"])
        if record is not None:
            record.settling = True
            self._spawn(self._remove_container(record))

        def failed(p: dict[str, Any]) -> None:
            p["status"].update(phase=phase, reason=reason, message=message)
            for status in p["status"].get("containerStatuses") or []:
                status.update(ready=False, state={"terminated": {"exitCode": 137, "reason": reason}})

        self.store.update("pods", namespace, name, failed)

    # ---------------------------------------------------------------- removal, logs

    async def delete_pod(self, namespace: str, name: str, grace: int | None) -> dict[str, Any]:
        pod = self.store.get("pods", namespace, name)
        record = self._pods.get(pod["metadata"]["uid"])
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        if record is None:
            return self.store.delete("pods", namespace, name)
        if grace <= 0:
            await self._remove(record)
            return self.store.delete("pods", namespace, name)

        def terminating(p: dict[str, Any]) -> None:
            p["metadata"].update(deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=grace)

        updated = self.store.update("pods", namespace, name, terminating)
        self._spawn(self._graceful(record, grace))
        return updated

    async def _graceful(self, record: _Pod, grace: int) -> None:
        record.settling = True
        if record.container is not None:
            with contextlib.suppress(docker.errors.DockerException):
                container = await asyncio.to_thread(self.client.containers.get, record.container)
                await asyncio.to_thread(container.stop, timeout=grace)
        await self._remove(record)
        with contextlib.suppress(ApiError):
            self.store.delete("pods", record.namespace, record.name)

    async def _remove(self, record: _Pod) -> None:
        record.deleted = True
        if record.task is not None and not record.task.done():
            await asyncio.wait({record.task})  # a start under way ends first: its container is then found
        await self._remove_container(record)
        self._pods.pop(record.uid, None)
        await asyncio.to_thread(shutil.rmtree, f"{self.workdir}/pods/{record.uid}", True)

    async def _remove_container(self, record: _Pod) -> None:
        """Remove the pod's container(s), and return once Docker no longer lists one (a removal already under way,
        by another path, is waited for)."""
        filters = {"label": f"fake-kube.uid={record.uid}"}
        for _ in range(100):
            found = await asyncio.to_thread(self.client.api.containers, all=True, filters=filters)
            if not found:
                break
            for summary in found:
                remove = partial(self.client.api.remove_container, summary["Id"], force=True, v=True)
                try:
                    await TEARDOWNS.run(remove)  # in turn with every removal on this engine: teardown.py
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as e:
                    if e.status_code != 409:  # 409: its removal is already in progress
                        raise
                    await asyncio.sleep(0.1)
        record.container = None

    def container_of(self, namespace: str, name: str) -> str | None:
        pod = self.store.get("pods", namespace, name)
        record = self._pods.get(pod["metadata"]["uid"])
        return None if record is None else record.container

    async def logs(self, namespace: str, name: str, tail: int | None) -> str:
        pod = self.store.get("pods", namespace, name)
        record = self._pods.get(pod["metadata"]["uid"])
        if record is None or record.container is None:
            container = pod["spec"]["containers"][0]["name"]
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start')
        try:
            found = await asyncio.to_thread(self.client.containers.get, record.container)
            raw = await asyncio.to_thread(found.logs, tail=tail if tail is not None else "all")
        except docker.errors.NotFound:
            return ""
        return bytes(raw).decode("utf-8", errors="replace")

    async def close(self) -> None:
        """Stop watching; every container of the harness goes (the harness removes the network and files)."""
        if self._monitor is not None:
            self._monitor.cancel()
            await asyncio.gather(self._monitor, return_exceptions=True)
        for record in list(self._pods.values()):
            record.deleted = True
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for record in list(self._pods.values()):
            await self._remove(record)
