"""Instances as containers on a Docker engine.

The agent is reached through a unix socket in a per-instance host directory that is
bind-mounted at /run/sandbox in the container, so an instance needs no network at all.
Every docker SDK call is blocking and runs in a worker thread; the calls that make something
on the engine run to their end even when their caller is cancelled, so that what they made is
always there to be removed (a cancelled start never leaves a container behind).

Claims (which sandbox holds an instance) are JSON files in ``<socket_root>/.claims/``, outside the
directory mounted into the container, so the sandbox cannot change them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import docker
import docker.errors
from docker.models.containers import Container

from sandbox.aio import raise_if_cancelled, settled
from sandbox.backends import android
from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import (
    INSTANCE_ENV,
    LABEL_INSTANCE,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_SNAPSHOT,
    LABEL_SNAPSHOT_RECORD,
    LABEL_USER_PREFIX,
    MANAGED_BY,
    Backend,
    BackendInstance,
    BackendSnapshot,
    HostFacts,
    RuntimeState,
    check_cpus,
)
from sandbox.backends.docker import android_params, disk, host
from sandbox.backends.docker import claims as claim_files
from sandbox.backends.docker.claim_writer import ClaimWriter
from sandbox.backends.docker.config import DockerConfig
from sandbox.backends.docker.describe import NOT_RUNNING, describe, from_summary, timestamp
from sandbox.backends.docker.engine_client import EngineCalls, connect
from sandbox.backends.docker.networks import InternalNetworks
from sandbox.backends.docker.teardown import TeardownLane, engine_needs_lane, stop_now
from sandbox.backends.docker.volumes import Volumes
from sandbox.errors import BackendError, FailedPrecondition, InvalidArgument, NotFound, SandboxError, Unavailable
from sandbox.models import NetworkPolicy, SandboxKind, SandboxSpec
from sandbox.protocol import AGENT_SOCKET_NAME, SOCKET_DIR_IN_SANDBOX

T = TypeVar("T")

SANDBOX_OOM_SCORE_ADJ = 500
"""Sandboxes are what the kernel's OOM killer takes first when the host runs out of memory; the engine (dockerd
starts at -500) and the control plane (``sandbox.server`` lowers its own) are the last."""
CONTAINER_PREFIX = "sbx-"
SNAPSHOT_REPO = "sandbox-snap"
SUPPORTED_KINDS = (SandboxKind.TERMINAL, SandboxKind.DESKTOP, SandboxKind.BROWSER, SandboxKind.ANDROID)


class DockerBackend(Backend):
    name = "docker"

    def __init__(self, config: DockerConfig) -> None:
        super().__init__()
        self.config = config
        self._claims = ClaimWriter(config.socket_root)
        self._client: docker.DockerClient | None = None
        self._info: dict[str, Any] | None = None
        self._call = EngineCalls(config.engine_calls)  # every engine call: ``await self._call(what, fn, ...)``
        self.engine_gate = self._call.gate  # its pressure() for readiness, its stats() for metrics
        self._networks = InternalNetworks(lambda: self.client, config.owner, self.owner_labels(), self._call)
        self._teardowns = TeardownLane(config.teardown_lock)
        self._volumes = Volumes(
            lambda: self.client, config.owner, self.owner_labels(), self._call, self._tear_down, uid=config.sandbox_uid
        )
        self._probe: asyncio.Future[Any] | None = None

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            try:
                # 120 s stays: the gate fails callers within engine_calls.stall_s of a stall; this only bounds how
                # long a worker thread is held, and a commit or an image removal may rightly take a minute.
                self._client = connect(self.config.base_url, max_pool_size=self.config.max_pool_size, timeout=120)
            except docker.errors.DockerException as e:
                raise Unavailable(f"cannot reach the Docker engine: {e}") from e
        return self._client

    async def host_facts(
        self, *, memory_mb: float | None = None, cpus: float | None = None, pids: int | None = None
    ) -> HostFacts:
        info = await self._call_info()
        return host.host_facts(
            info, local=host.is_local(self.config.base_url), memory_mb=memory_mb, cpus=cpus, pids=pids
        )

    def pressure(self) -> str | None:
        return self.engine_gate.pressure()

    async def ping(self) -> None:
        """The engine's info, not its ``/_ping``: a dockerd deadlocked in libnetwork (``teardown.py``) still
        answers a ping but no longer its info. One probe at a time: a caller that gives up leaves it running, and
        the next caller waits for that one rather than holding another worker thread on a stuck engine."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._call("ask the engine how it is", self.client.info))
            self._probe.add_done_callback(lambda probe: probe.cancelled() or probe.exception())
        await asyncio.shield(self._probe)

    def owner_labels(self) -> dict[str, str]:
        return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: self.config.owner}

    def image_for(self, spec: SandboxSpec) -> str:
        return spec.image or f"{self.config.image_prefix}/{spec.kind.value}:latest"

    def socket_dir(self, instance_id: str) -> str:
        return os.path.join(self.config.socket_root, instance_id)

    def container_name(self, instance_id: str) -> str:
        return f"{CONTAINER_PREFIX}{self.config.owner}-{instance_id}"

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
        if spec.kind not in SUPPORTED_KINDS:
            raise FailedPrecondition(f"the docker backend cannot run {spec.kind.value} sandboxes")
        if android.is_android(spec):  # refused before anything is made when the host has no KVM
            android_params.run_params(spec, self.config.kvm_device)
        info = await self._call_info()
        check_cpus(spec, float(info.get("NCPU") or "inf"))  # not told: let the engine judge
        disk.check(spec, info)
        try:
            socket_dir = await asyncio.to_thread(self._make_socket_dir, instance_id)
            async with self._networks.joining(spec.network, tenant) as network:  # None: not network internal
                params = await self._run_params(instance_id, spec, socket_dir, pool, network, tenant=tenant)
                # create + start, never containers.run: run pulls a missing image, and no registry is reachable.
                make = partial(
                    self._call, f"create instance {instance_id}", self.client.containers.create, kind="create", **params
                )
                try:
                    container = await settled(self._networks.again_if_gone(network, tenant, make))
                except NotFound as e:  # the android image is built from a local SDK: say how
                    if android.is_android(spec) and "image not found" in e.message:
                        raise NotFound(f"{e.message}; {android.BUILD_HINT}") from e
                    raise
                except BackendError as e:  # XFS without pquota: the info cannot tell
                    if spec.resources.disk_mb is not None and disk.ENGINE_REFUSAL in e.message:
                        raise disk.refused(e.message) from e
                    raise
                start = partial(self._call, f"start instance {instance_id}", container.start, kind="start")
                await settled(self._networks.again_if_gone(network, tenant, start))
            configured = android.ready_timeout(spec, self.config.ready_timeout_s)
            await self._wait_ready(instance_id, ready_timeout or configured)
            await self._call(f"inspect instance {instance_id}", container.reload)
            raise_if_cancelled()
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.destroy(instance_id))
            raise
        return describe(container)

    async def _tear_down(self, what: str, fn: Callable[[], T]) -> T:
        """A call that ends a container's run (a kill, a wait for an exit): in the teardown lane when the engine
        needs one (``teardown.py``). Patient in the gate: it waits for an exit, and for its turn in the lane."""
        run = partial(self._teardowns.run, fn) if await self._needs_lane() else partial(asyncio.to_thread, fn)
        return await self._call.run(what, "remove", run, patient=True)

    async def _needs_lane(self) -> bool:
        if self.config.serial_teardown != "auto":
            return self.config.serial_teardown == "on"
        return engine_needs_lane(str((await self._call_info()).get("ServerVersion")))

    async def _call_info(self) -> dict[str, Any]:
        """The engine's info, asked once: its CPUs (what nano_cpus is checked against) and storage driver."""
        if self._info is None:
            self._info = dict(await self._call("ask the engine of its host", self.client.info) or {})
        return self._info

    async def _wait_ready(self, instance_id: str, ready_timeout: float | None) -> None:
        try:
            await self.agent(instance_id).wait_ready(ready_timeout or self.config.ready_timeout_s)
        except SandboxError as e:
            logs = await self.logs(instance_id, tail=30)
            raise Unavailable(
                f"instance {instance_id} did not become ready: {e.message}\n--- its logs ---\n{logs}"
            ) from e

    async def restart(self, instance_id: str, *, ready_timeout: float | None = None) -> BackendInstance:
        container = await self._get(instance_id)
        await self._forget_agent(instance_id)  # its connections went with the old agent process
        if container.status == "running":  # a failed agent or X server: kill and start again, files kept
            # Killed, not stopped: the sandbox failed, so a graceful stop buys nothing (written files are in the
            # page cache either way) and costs seconds, Chromium's shutdown most of all.
            await settled(self._tear_down(f"stop instance {instance_id}", partial(stop_now, container)))
            await settled(self._call(f"restart instance {instance_id}", container.start, kind="start"))
        else:
            await settled(self._call(f"restart instance {instance_id}", container.start, kind="start"))
        await self._wait_ready(instance_id, ready_timeout)
        await self._call(f"inspect instance {instance_id}", container.reload)
        return describe(container)

    async def _run_params(
        self,
        instance_id: str,
        spec: SandboxSpec,
        socket_dir: str,
        pool: str | None,
        network: str | None,
        *,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        labels = {
            **self.owner_labels(),
            LABEL_INSTANCE: instance_id,
            LABEL_KIND: spec.kind.value,
            **({LABEL_POOL: pool} if pool else {}),
            **{LABEL_USER_PREFIX + k: v for k, v in spec.labels.items()},
        }
        screen = spec.screen
        env = {
            **spec.env,
            "SANDBOX_KIND": spec.kind.value,
            "SANDBOX_SCREEN": f"{screen.width}x{screen.height}x{screen.depth}",
            INSTANCE_ENV: instance_id,
        }
        volumes: dict[str, dict[str, str]] = {socket_dir: {"bind": SOCKET_DIR_IN_SANDBOX, "mode": "rw"}}
        for mount in spec.volumes:
            name = await self._volumes.ensure(mount.name, tenant, self.image_for(spec))  # the tenant's (volumes.py)
            volumes[name] = {"bind": mount.path, "mode": "ro" if mount.read_only else "rw"}
        r = spec.resources
        params: dict[str, Any] = {
            "image": self.image_for(spec),
            "name": self.container_name(instance_id),
            "hostname": "sandbox",
            "init": True,
            "labels": labels,
            "environment": env,
            "volumes": volumes,
            "nano_cpus": int(r.cpus * 1e9),
            "mem_limit": f"{r.memory_mb}m",
            "memswap_limit": f"{r.memory_mb}m",
            "pids_limit": r.pids,
            "oom_score_adj": SANDBOX_OOM_SCORE_ADJ,
            "shm_size": f"{r.shm_mb}m",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            **disk.run_params(spec),
        }
        if self.config.runtime:
            params["runtime"] = self.config.runtime
        if android.is_android(spec):
            extra = android_params.run_params(spec, self.config.kvm_device)
            env.update(extra.pop("environment"))  # the same dict as params["environment"]
            params.update(extra)
        if spec.network is NetworkPolicy.NONE:
            params["network_mode"] = "none"
        elif spec.network is NetworkPolicy.INTERNAL:
            params["network"] = network  # the tenant's (networks.py)
        else:
            params["network_mode"] = "bridge"
        return params

    def _make_socket_dir(self, instance_id: str) -> str:
        path = self.socket_dir(instance_id)
        if len(os.path.join(path, AGENT_SOCKET_NAME)) > 107:
            raise InvalidArgument(f"socket path under {self.config.socket_root!r} is too long for a unix socket")
        os.makedirs(path, mode=0o755, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, self.config.sandbox_uid, self.config.sandbox_uid)
        else:
            os.chmod(path, 0o777)  # the sandbox user must create its socket here
        return path

    async def destroy(self, instance_id: str) -> None:
        await self._forget_agent(instance_id)
        try:
            container = await self._get(instance_id)
            if await self._needs_lane():  # stopped in turn; its files are removed beside other removals
                await self._tear_down(f"stop instance {instance_id}", partial(stop_now, container))
            await self._call(f"remove instance {instance_id}", container.remove, kind="remove", force=True, v=True)
            await self._networks.release(container.attrs)  # its tenant's internal network, if the last one on it
        except NotFound:
            pass
        await asyncio.to_thread(shutil.rmtree, self.socket_dir(instance_id), True)
        await self._claims.remove(instance_id)

    async def inspect(self, instance_id: str) -> BackendInstance:
        try:
            container = await self._get(instance_id)
        except NotFound:
            return BackendInstance(id=instance_id, kind=SandboxKind.TERMINAL, ref="", state=RuntimeState.MISSING)
        return describe(container)

    async def list_instances(self) -> list[BackendInstance]:
        return await self._list("list instances")

    async def list_not_running(self) -> list[BackendInstance]:
        return await self._list("list stopped instances", status=NOT_RUNNING)

    async def _list(self, what: str, **filters: list[str]) -> list[BackendInstance]:
        owned = [f"{LABEL_MANAGED_BY}={MANAGED_BY}", f"{LABEL_OWNER}={self.config.owner}"]
        # The low-level listing: containers.list() inspects each one and fails when one goes meanwhile.
        summaries = await self._call(what, self.client.api.containers, all=True, filters={"label": owned, **filters})
        return [from_summary(s) for s in summaries if LABEL_INSTANCE in (s.get("Labels") or {})]

    async def logs(self, instance_id: str, *, tail: int = 200) -> str:
        try:
            container = await self._get(instance_id)
        except NotFound:
            return ""
        raw = await self._call(f"logs of {instance_id}", container.logs, tail=tail, stdout=True, stderr=True)
        return raw.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ claims

    async def set_claim(self, instance_id: str, claim: dict[str, Any]) -> None:
        await self._claims.write(instance_id, claim)

    async def claims(self) -> dict[str, dict[str, Any]]:
        return await asyncio.to_thread(claim_files.read_claims, self.config.socket_root)

    # ------------------------------------------------------------------ snapshots

    async def snapshot(self, instance_id: str, name: str, *, record: dict[str, Any] | None = None) -> str:
        container = await self._get(instance_id)
        repository = f"{SNAPSHOT_REPO}/{self.config.owner.lower()}"
        tag = re.sub(r"[^a-z0-9_.-]", "-", name.lower())[:120]
        labels = {**self.owner_labels(), LABEL_SNAPSHOT: name}
        if record is not None:
            labels[LABEL_SNAPSHOT_RECORD] = json.dumps(record, separators=(",", ":"))
        # pause=True: the file system does not change under the commit.
        image = await self._call(
            f"snapshot instance {instance_id}",
            container.commit,
            kind="commit",
            repository=repository,
            tag=tag,
            conf={"Labels": {**container.labels, **labels}},
            pause=True,
        )
        return f"{repository}:{tag}" if image.id else ""

    async def list_snapshots(self) -> list[BackendSnapshot]:
        filters = {"label": [f"{LABEL_OWNER}={self.config.owner}", LABEL_SNAPSHOT]}
        images = await self._call("list snapshots", self.client.images.list, filters=filters)
        found = []
        for image in images:
            raw = (image.labels or {}).get(LABEL_SNAPSHOT_RECORD)
            record = None
            with contextlib.suppress(ValueError, TypeError):
                record = json.loads(raw) if raw else None
            for tag in image.tags:
                found.append(BackendSnapshot(ref=tag, record=record if isinstance(record, dict) else None))
        return found

    async def collect_snapshots(
        self, *, keep: set[str], only: set[str] | None = None, min_age_s: float = 0.0
    ) -> list[str]:
        filters = {"label": [f"{LABEL_OWNER}={self.config.owner}", LABEL_SNAPSHOT]}
        images = await self._call("list snapshots", self.client.images.list, filters=filters)
        containers = await self._call(
            "list instances",
            self.client.api.containers,
            all=True,
            filters={"label": f"{LABEL_OWNER}={self.config.owner}"},
        )
        in_use = {c.get("Image") for c in containers} | {c.get("ImageID") for c in containers}
        removed = []
        now = time.time()
        for image in images:
            tags = set(image.tags)
            if tags & keep or tags & in_use or image.id in in_use:
                continue
            if only is not None and not tags & only:
                continue
            if now - timestamp(str(image.attrs.get("Created", ""))) < min_age_s:
                continue  # committed a moment ago: the record naming it may not be stored yet
            for tag in tags or {image.id}:
                try:
                    await self._call(
                        f"remove snapshot {tag}", self.client.images.remove, tag, kind="remove", noprune=False
                    )
                    removed.append(tag)
                except SandboxError as e:  # still in use by a container that is starting: next time
                    logging.getLogger(__name__).info("snapshot %s kept: %s", tag, e.message)
        return removed

    # ------------------------------------------------------------------ agent, engine

    def _connect_agent(self, instance_id: str) -> AgentClient:
        path = os.path.join(self.socket_dir(instance_id), AGENT_SOCKET_NAME)
        return AgentClient(path, label=f"instance {instance_id}")

    async def close(self) -> None:
        await super().close()
        self.engine_gate.close()
        await asyncio.to_thread(self._teardowns.close)
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None

    async def _get(self, instance_id: str) -> Container:
        return await self._call(
            f"find instance {instance_id}", self.client.containers.get, self.container_name(instance_id)
        )
