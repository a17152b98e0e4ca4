"""The operator's loop: while this replica leads the background work (``Lifecycle.is_leader``), keep the Sandbox
objects mirrored (and the declared ones created) and the SandboxPool objects applied; when it stops leading, stop
watching and let the next leader do it. One leader at a time, so two replicas never write the same object, or start
a pool twice."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.errors import SandboxError, Unavailable
from sandbox.operator.informer import Informer
from sandbox.operator.sandboxes import SandboxMirror
from sandbox.operator.sandboxpools import PoolSync
from sandbox.operator.settings import OperatorSettings
from sandbox.service import SandboxService
from sandbox.service.lifecycle import Lifecycle
from sandbox.service.pools import PoolConfig

SYNC_TIMEOUT_S = 60.0
"""How long a new leader waits for its first listings before it compares anything."""


class Operator:
    def __init__(
        self,
        service: SandboxService,
        lifecycle: Lifecycle,
        backend: KubernetesBackend,
        *,
        settings: OperatorSettings | None = None,
        pools: list[PoolConfig] | None = None,
        logger: logging.Logger,
    ) -> None:
        self.service = service
        self.lifecycle = lifecycle
        self.backend = backend
        self.settings = settings or OperatorSettings()
        self._log = logger
        self.mirror = SandboxMirror(service, backend, self.settings, logger=logger)
        self.pools = PoolSync(service, backend, self.settings, configured=list(pools or []), logger=logger)
        self._informers: list[Informer] = []
        self._watching: list[asyncio.Task[None]] = []

    @property
    def running(self) -> bool:
        return bool(self._watching)

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except SandboxError as e:
                self._log.warning("operator pass failed: %s", e.message)
            except Exception:
                self._log.exception("operator pass crashed")
            await asyncio.sleep(self.settings.interval_s)

    async def tick(self) -> None:
        """One pass: start or stop watching as leadership goes, then compare and write what differs."""
        if not self.lifecycle.is_leader:
            if self.running:
                self._log.info("this replica no longer leads: the operator stops")
                await self._stop()
            return
        if not self.running:
            await self._start()
        await self.pools.sync()
        await self.mirror.sync()

    async def _start(self) -> None:
        api = await self.backend.api()
        self._informers = [*self.mirror.informers(api), *self.pools.informers(api)]
        self._watching = [asyncio.create_task(i.run(), name=f"informer {i.what}") for i in self._informers]
        try:
            async with asyncio.timeout(SYNC_TIMEOUT_S):
                await asyncio.gather(*(i.synced.wait() for i in self._informers))
        except TimeoutError:
            await self._stop()
            raise Unavailable("the operator could not list its objects (are the CRDs installed?)") from None
        self._log.info("the operator mirrors sandboxes into Sandbox objects, creates declared ones, applies pools")

    async def _stop(self) -> None:
        for task in self._watching:
            task.cancel()
        await asyncio.gather(*self._watching, return_exceptions=True)
        self._watching = []
        await self.mirror.close()
        await self.pools.stop()

    async def close(self) -> None:
        with contextlib.suppress(SandboxError):
            await self._stop()
