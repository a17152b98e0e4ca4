"""Sandboxes as containers on a Docker engine.

The agent is reached through a unix socket in a per-sandbox host directory that is
bind-mounted at /run/sandbox in the container, so a sandbox needs no network at all.
Every docker SDK call is blocking and runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from sandbox.agent_client import AgentClient
from sandbox.backends.base import (
    LABEL_ID,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_USER_PREFIX,
    MANAGED_BY,
    Backend,
    BackendSandbox,
    RuntimeState,
)
from sandbox.backends.config import DockerConfig
from sandbox.errors import BackendError, FailedPrecondition, InvalidArgument, NotFound, SandboxError, Unavailable
from sandbox.models import NetworkPolicy, SandboxKind, SandboxSpec
from sandbox.protocol import AGENT_SOCKET_NAME, SOCKET_DIR_IN_SANDBOX

T = TypeVar("T")

CONTAINER_PREFIX = "sbx-"
SNAPSHOT_REPO = "sandbox-snap"
LABEL_SNAPSHOT = "sandbox.snapshot"
VOLUME_PREFIX = "sbxvol-"
INTERNAL_NETWORK = "sbx-internal"
SUPPORTED_KINDS = (SandboxKind.TERMINAL, SandboxKind.DESKTOP, SandboxKind.BROWSER)


def _translate(e: Exception, what: str) -> SandboxError:
    if isinstance(e, docker.errors.ImageNotFound):
        return NotFound(f"{what}: image not found ({e.explanation}); build it with `sandbox images build`")
    if isinstance(e, docker.errors.NotFound):
        return NotFound(f"{what}: {e.explanation}")
    if isinstance(e, docker.errors.APIError):
        return BackendError(f"{what}: the engine refused: {e.explanation or e}")
    if isinstance(e, (requests.exceptions.ConnectionError, ConnectionError)):
        return Unavailable(f"{what}: the Docker engine does not answer: {e}")
    return BackendError(f"{what}: {e}")


async def _call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except (docker.errors.DockerException, requests.exceptions.RequestException, ConnectionError) as e:
        raise _translate(e, what) from e


def _state_of(container: Container) -> RuntimeState:
    status = container.status
    if status in ("running",):
        return RuntimeState.RUNNING
    if status in ("created", "restarting"):
        return RuntimeState.STARTING
    return RuntimeState.EXITED


def _created_at(container: Container) -> float:
    raw = str(container.attrs.get("Created", ""))
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(raw[:26].rstrip("Z") + "+00:00").timestamp()
    return 0.0


def _from_summary(summary: dict[str, Any]) -> BackendSandbox:
    labels = dict(summary.get("Labels") or {})
    status = str(summary.get("State", ""))
    state = {"running": RuntimeState.RUNNING, "created": RuntimeState.STARTING, "restarting": RuntimeState.STARTING}
    exit_code = re.search(r"Exited \((-?\d+)\)", str(summary.get("Status", "")))
    return BackendSandbox(
        id=labels.get(LABEL_ID, ""),
        kind=SandboxKind(labels.get(LABEL_KIND, "terminal")),
        ref=str(summary.get("Id", "")),
        state=state.get(status, RuntimeState.EXITED),
        labels=labels,
        created_at=float(summary.get("Created") or 0),
        exit_code=int(exit_code.group(1)) if exit_code else None,
    )


class DockerBackend(Backend):
    name = "docker"

    def __init__(self, config: DockerConfig) -> None:
        self.config = config
        self._client: docker.DockerClient | None = None
        self._agents: dict[str, AgentClient] = {}

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            try:
                kwargs: dict[str, Any] = {"max_pool_size": self.config.max_pool_size, "timeout": 120}
                if self.config.base_url:
                    self._client = docker.DockerClient(base_url=self.config.base_url, **kwargs)
                else:
                    self._client = docker.from_env(**kwargs)
            except docker.errors.DockerException as e:
                raise Unavailable(f"cannot reach the Docker engine: {e}") from e
        return self._client

    def owner_labels(self) -> dict[str, str]:
        return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: self.config.owner}

    def image_for(self, spec: SandboxSpec) -> str:
        return spec.image or f"{self.config.image_prefix}/{spec.kind.value}:latest"

    def socket_dir(self, sandbox_id: str) -> str:
        return os.path.join(self.config.socket_root, sandbox_id)

    def container_name(self, sandbox_id: str) -> str:
        return f"{CONTAINER_PREFIX}{self.config.owner}-{sandbox_id}"

    # ------------------------------------------------------------------ lifecycle

    async def create(self, sandbox_id: str, spec: SandboxSpec, *, ready_timeout: float | None = None) -> BackendSandbox:
        if spec.kind not in SUPPORTED_KINDS:
            raise FailedPrecondition(
                f"the docker backend cannot run {spec.kind.value} sandboxes: an Android emulator needs KVM and "
                "an emulator image; use a backend that provides them"
            )
        socket_dir = await asyncio.to_thread(self._make_socket_dir, sandbox_id)
        try:
            params = await self._run_params(sandbox_id, spec, socket_dir)
            # create + start, never containers.run: run pulls a missing image, and no registry is reachable.
            container = await _call(f"create sandbox {sandbox_id}", self.client.containers.create, **params)
            await _call(f"start sandbox {sandbox_id}", container.start)
            agent = self.agent(sandbox_id)
            try:
                await agent.wait_ready(ready_timeout or self.config.ready_timeout_s)
            except SandboxError as e:
                logs = await self.logs(sandbox_id, tail=30)
                raise Unavailable(
                    f"sandbox {sandbox_id} did not become ready: {e.message}\n--- its logs ---\n{logs}"
                ) from e
            await _call(f"inspect sandbox {sandbox_id}", container.reload)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.destroy(sandbox_id))
            raise
        return self._describe(container)

    async def _run_params(self, sandbox_id: str, spec: SandboxSpec, socket_dir: str) -> dict[str, Any]:
        labels = {
            **self.owner_labels(),
            LABEL_ID: sandbox_id,
            LABEL_KIND: spec.kind.value,
            **{LABEL_USER_PREFIX + k: v for k, v in spec.labels.items()},
        }
        screen = spec.screen
        env = {
            **spec.env,
            "SANDBOX_KIND": spec.kind.value,
            "SANDBOX_SCREEN": f"{screen.width}x{screen.height}x{screen.depth}",
            "SANDBOX_ID": sandbox_id,
        }
        volumes: dict[str, dict[str, str]] = {socket_dir: {"bind": SOCKET_DIR_IN_SANDBOX, "mode": "rw"}}
        for mount in spec.volumes:
            name = await self._ensure_volume(mount.name, self.image_for(spec))
            volumes[name] = {"bind": mount.path, "mode": "ro" if mount.read_only else "rw"}
        r = spec.resources
        params: dict[str, Any] = {
            "image": self.image_for(spec),
            "name": self.container_name(sandbox_id),
            "hostname": "sandbox",
            "init": True,
            "labels": labels,
            "environment": env,
            "volumes": volumes,
            "nano_cpus": int(r.cpus * 1e9),
            "mem_limit": f"{r.memory_mb}m",
            "memswap_limit": f"{r.memory_mb}m",
            "pids_limit": r.pids,
            "shm_size": f"{r.shm_mb}m",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
        }
        if self.config.runtime:
            params["runtime"] = self.config.runtime
        if spec.network is NetworkPolicy.NONE:
            params["network_mode"] = "none"
        elif spec.network is NetworkPolicy.INTERNAL:
            params["network"] = await self._ensure_internal_network()
        else:
            params["network_mode"] = "bridge"
        return params

    def _make_socket_dir(self, sandbox_id: str) -> str:
        path = self.socket_dir(sandbox_id)
        if len(os.path.join(path, AGENT_SOCKET_NAME)) > 107:
            raise InvalidArgument(f"socket path under {self.config.socket_root!r} is too long for a unix socket")
        os.makedirs(path, mode=0o755, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, self.config.sandbox_uid, self.config.sandbox_uid)
        else:
            os.chmod(path, 0o777)  # the sandbox user must create its socket here
        return path

    async def _ensure_volume(self, name: str, image: str) -> str:
        full = f"{VOLUME_PREFIX}{name}"
        try:
            await _call(f"inspect volume {name}", self.client.volumes.get, full)
            return full
        except NotFound:
            pass
        await _call(f"create volume {name}", self.client.volumes.create, name=full, labels=self.owner_labels())
        # A new volume is owned by root; hand it to the sandbox user once, with a throwaway container.
        uid = self.config.sandbox_uid
        chown = await _call(
            f"prepare volume {name}",
            self.client.containers.create,
            image=image,
            command=["chown", f"{uid}:{uid}", "/volume"],
            entrypoint=[],
            user="0:0",
            network_mode="none",
            volumes={full: {"bind": "/volume", "mode": "rw"}},
            labels={**self.owner_labels(), "sandbox.role": "volume-init"},
        )
        try:
            await _call(f"prepare volume {name}", chown.start)
            result = await _call(f"prepare volume {name}", chown.wait, timeout=60)
            if result.get("StatusCode") != 0:
                raise BackendError(f"could not hand volume {name} to uid {uid}: exit {result.get('StatusCode')}")
        finally:
            await _call(f"prepare volume {name}", chown.remove, force=True)
        return full

    async def _ensure_internal_network(self) -> str:
        name = f"{INTERNAL_NETWORK}-{self.config.owner}"
        found = await _call("list networks", self.client.networks.list, names=[name])
        if not any(n.name == name for n in found):
            await _call(
                "create the internal network",
                self.client.networks.create,
                name,
                driver="bridge",
                internal=True,
                labels=self.owner_labels(),
            )
        return name

    async def destroy(self, sandbox_id: str) -> None:
        agent = self._agents.pop(sandbox_id, None)
        if agent is not None:
            await agent.close()
        try:
            container = await self._get(sandbox_id)
            await _call(f"remove sandbox {sandbox_id}", container.remove, force=True, v=True)
        except NotFound:
            pass
        await asyncio.to_thread(shutil.rmtree, self.socket_dir(sandbox_id), True)

    async def inspect(self, sandbox_id: str) -> BackendSandbox:
        try:
            container = await self._get(sandbox_id)
        except NotFound:
            return BackendSandbox(id=sandbox_id, kind=SandboxKind.TERMINAL, ref="", state=RuntimeState.MISSING)
        return self._describe(container)

    async def list_sandboxes(self) -> list[BackendSandbox]:
        filters = {"label": [f"{LABEL_MANAGED_BY}={MANAGED_BY}", f"{LABEL_OWNER}={self.config.owner}"]}
        # The low-level listing: containers.list() inspects each one and fails when one goes meanwhile.
        summaries = await _call("list sandboxes", self.client.api.containers, all=True, filters=filters)
        return [_from_summary(s) for s in summaries if LABEL_ID in (s.get("Labels") or {})]

    async def logs(self, sandbox_id: str, *, tail: int = 200) -> str:
        try:
            container = await self._get(sandbox_id)
        except NotFound:
            return ""
        raw = await _call(f"logs of {sandbox_id}", container.logs, tail=tail, stdout=True, stderr=True)
        return raw.decode("utf-8", errors="replace")

    async def snapshot(self, sandbox_id: str, name: str) -> str:
        container = await self._get(sandbox_id)
        repository = f"{SNAPSHOT_REPO}/{self.config.owner.lower()}"
        tag = re.sub(r"[^a-z0-9_.-]", "-", name.lower())[:120]
        labels = {**self.owner_labels(), LABEL_SNAPSHOT: name}
        # pause=True: the file system does not change under the commit.
        image = await _call(
            f"snapshot sandbox {sandbox_id}",
            container.commit,
            repository=repository,
            tag=tag,
            conf={"Labels": {**container.labels, **labels}},
            pause=True,
        )
        return f"{repository}:{tag}" if image.id else ""

    async def collect_snapshots(self, *, keep: set[str]) -> list[str]:
        filters = {"label": [f"{LABEL_OWNER}={self.config.owner}", LABEL_SNAPSHOT]}
        images = await _call("list snapshots", self.client.images.list, filters=filters)
        containers = await _call(
            "list sandboxes",
            self.client.api.containers,
            all=True,
            filters={"label": f"{LABEL_OWNER}={self.config.owner}"},
        )
        in_use = {c.get("Image") for c in containers} | {c.get("ImageID") for c in containers}
        removed = []
        for image in images:
            tags = set(image.tags)
            if tags & keep or tags & in_use or image.id in in_use:
                continue
            for tag in tags or {image.id}:
                try:
                    await _call(f"remove snapshot {tag}", self.client.images.remove, tag, noprune=False)
                    removed.append(tag)
                except SandboxError as e:  # still in use by a container that is starting: next time
                    logging.getLogger(__name__).info("snapshot %s kept: %s", tag, e.message)
        return removed

    def agent(self, sandbox_id: str) -> AgentClient:
        client = self._agents.get(sandbox_id)
        if client is None:
            path = os.path.join(self.socket_dir(sandbox_id), AGENT_SOCKET_NAME)
            client = self._agents[sandbox_id] = AgentClient(path, label=f"sandbox {sandbox_id}")
        return client

    async def close(self) -> None:
        for agent in self._agents.values():
            await agent.close()
        self._agents.clear()
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None

    async def _get(self, sandbox_id: str) -> Container:
        return await _call(f"find sandbox {sandbox_id}", self.client.containers.get, self.container_name(sandbox_id))

    def _describe(self, container: Container) -> BackendSandbox:
        labels = dict(container.labels)
        exit_code = container.attrs.get("State", {}).get("ExitCode")
        state = _state_of(container)
        return BackendSandbox(
            id=labels.get(LABEL_ID, ""),
            kind=SandboxKind(labels.get(LABEL_KIND, "terminal")),
            ref=container.id or "",
            state=state,
            labels=labels,
            created_at=_created_at(container),
            exit_code=exit_code if state is RuntimeState.EXITED else None,
        )
