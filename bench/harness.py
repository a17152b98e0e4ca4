"""One benchmark run: its id and labels, the control planes it starts, waiting for quiet, and clean-up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import BenchError
from bench.baseline import DockerCli
from bench.cleanup import remove_owned
from bench.machine import rss
from bench.options import Options
from bench.progress import Progress
from bench.report import Row
from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import INSTANCE_ENV, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.errors import SandboxError
from sandbox.protocol import AGENT_SOCKET_NAME
from sandbox.testing.redis_server import RedisServer
from sandbox.testing.server import ServerProcess

QUIET_S = 0.3
"""After the platform settles, so that the instance it just saw healthy is also in its pool queue."""


@dataclass
class SectionResult:
    rows: list[Row]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Platform:
    """A running control plane and an SDK client of it."""

    server: ServerProcess
    client: AsyncClient

    def rss(self) -> int:
        """The control plane's resident memory, in bytes."""
        return rss(self.server.pid)


def _socket_root(run_id: str) -> str:
    parent = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    return os.path.join(parent, f"sbx-bench-{run_id}")


def _instances(socket_root: str) -> list[str]:
    try:
        # One directory per instance; dot-folders (the claims) are the platform's own bookkeeping.
        return sorted(e.name for e in os.scandir(socket_root) if e.is_dir() and not e.name.startswith("."))
    except FileNotFoundError:
        return []


def _empty(directory: str) -> None:
    for name in _instances(directory):
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


class Bench:
    def __init__(self, options: Options, progress: Progress, *, run_id: str | None = None) -> None:
        self.options = options
        self.progress = progress
        self.run_id = run_id or secrets.token_hex(4)
        self.owner = f"bench-{self.run_id}"
        self.socket_root = _socket_root(self.run_id)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"sbx-bench-{self.run_id}-"))
        self.docker = DockerCli({LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: self.owner})
        self.keep_workdir = options.keep_logs
        self._servers: list[ServerProcess] = []

    @contextlib.asynccontextmanager
    async def platform(self, name: str, settings: dict[str, Any] | None = None) -> AsyncIterator[Platform]:
        """A control plane of this run's own (owner label, socket root, state file); everything it made is removed
        at the end."""
        options = {"settings": settings} if settings else {}
        async with self._platforms([(name, options)]) as (platform,):
            yield platform

    @contextlib.asynccontextmanager
    async def replicas(
        self, name: str, count: int, settings: dict[str, Any] | None = None
    ) -> AsyncIterator[list[Platform]]:
        """``count`` control planes sharing one state store, a redis-server of this run's own (on 127.0.0.1, stopped
        by its PID at the end), each with an SDK client of its own; everything they made is removed at the end."""
        redis = await asyncio.to_thread(RedisServer)
        try:
            await asyncio.to_thread(redis.start)
            options = {"redis_url": redis.url, **({"settings": settings} if settings else {})}
            async with self._platforms([(f"{name}-{i + 1}", options) for i in range(count)]) as platforms:
                yield platforms
        finally:
            await asyncio.to_thread(redis.close)

    @contextlib.asynccontextmanager
    async def _platforms(self, servers: list[tuple[str, dict[str, Any]]]) -> AsyncIterator[list[Platform]]:
        started: list[ServerProcess] = []
        clients: list[AsyncClient] = []
        try:
            for name, options in servers:
                server = ServerProcess(
                    self.workdir, owner=self.owner, socket_root=self.socket_root, name=name, **options
                )
                self._servers.append(server)
                started.append(server)
                await asyncio.to_thread(server.start)
                self.progress.say(f"{name}: control plane up (pid {server.pid}, {server.grpc_target})")
            clients = [AsyncClient(server.grpc_target, timeout=300) for server in started]
            yield [Platform(server, client) for server, client in zip(started, clients, strict=True)]
        except Exception:  # a failure, not an interruption: its logs are worth keeping
            self.keep_workdir = True
            raise
        finally:
            for client in clients:
                await client.close()
            for server in started:
                await asyncio.to_thread(server.stop)
            await self.clean()

    async def clean(self) -> None:
        """Remove whatever carries this run's labels (containers, snapshot images, volumes, networks)."""
        found = await asyncio.to_thread(remove_owned, self.owner)
        if any(found.values()):
            self.progress.say(f"removed what this run left: {found}")
        await asyncio.to_thread(_empty, self.socket_root)

    async def instances(self) -> list[str]:
        """The platform's instances now: one directory each in the socket root."""
        return await asyncio.to_thread(_instances, self.socket_root)

    async def settle(self, expected: int, *, timeout: float = 180) -> None:
        """Wait until the platform is quiet: exactly ``expected`` instances in the socket root (none starting,
        none being removed), every one's agent reporting healthy."""
        give_up = time.monotonic() + timeout
        while True:
            names = await self.instances()
            if len(names) == expected and all(await asyncio.gather(*(self._healthy(n) for n in names))):
                await asyncio.sleep(QUIET_S)
                return
            if time.monotonic() > give_up:
                raise BenchError(f"the platform did not settle at {expected} instances in {timeout:g} s: {names}")
            await asyncio.sleep(0.1)

    async def pool_full(self, platform: Platform, expected: int, *, timeout: float = 60) -> None:
        """Wait until the platform's pools hold ``expected`` warm instances in all (its metrics, read from the
        store): an instance whose agent answers is in its pool's queue only once the control plane has put it there,
        and a claim that finds the queue short starts a container."""
        give_up = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=platform.server.http_url, timeout=10) as http:
            while True:
                text = (await http.get("/metrics")).text
                ready = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                            if line.startswith("sandbox_pool_ready_instances{"))  # fmt: skip
                if ready == expected:
                    return
                if time.monotonic() > give_up:
                    raise BenchError(f"the pools hold {ready:g} warm instances, not {expected}, after {timeout:g} s")
                await asyncio.sleep(0.1)

    async def _healthy(self, instance: str) -> bool:
        agent = AgentClient(os.path.join(self.socket_root, instance, AGENT_SOCKET_NAME), label=instance)
        try:
            return (await agent.health(deadline=5)).ok
        except SandboxError:
            return False
        finally:
            await agent.close()

    async def foreign_containers(self) -> int:
        """Running containers on the engine that are not this run's: other workloads perturbing the numbers."""
        everything = await self.docker("ps", "-q")
        ours = await self.docker.find({})
        return max(0, len(everything.stdout.split()) - len(ours))

    async def container_of(self, sandbox: AsyncSandbox) -> str:
        """The id of the container a sandbox runs in (found by its instance's label, as a user would)."""
        result = await sandbox.exec(["printenv", INSTANCE_ENV])
        instance = result.stdout.strip()
        found = await self.docker.find({LABEL_INSTANCE: instance})
        if len(found) != 1:
            raise BenchError(f"sandbox {sandbox.id} (instance {instance!r}) has {len(found)} containers")
        return found[0]

    def close(self) -> None:
        """Blocking, for ``finally`` (Ctrl-C included): stop the servers this run started (by their PID), remove
        what carries its labels, and its socket root."""
        for server in self._servers:
            server.stop(grace=15)
        remove_owned(self.owner)
        shutil.rmtree(self.socket_root, ignore_errors=True)
        if self.keep_workdir:
            self.progress.say(f"logs of the control planes kept in {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
