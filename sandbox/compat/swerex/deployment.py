"""SWE-ReX's ``AbstractDeployment`` on this platform: :class:`SandboxDeployment` is one sandbox of a control plane.

``start`` creates the sandbox through the SDK (a terminal sandbox unless told otherwise, with the platform's default
of no network), ``runtime`` is a :class:`~sandbox.compat.swerex.runtime.SandboxRuntime` in it, ``stop`` closes the
runtime and deletes the sandbox. :class:`SandboxDeploymentConfig` is the configuration model in SWE-ReX's manner (a
``type`` discriminator, ``extra="forbid"``, ``get_deployment()``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from swerex.deployment.abstract import AbstractDeployment
from swerex.deployment.hooks.abstract import CombinedDeploymentHook, DeploymentHook
from swerex.exceptions import DeploymentNotStartedError, DeploymentStartupError
from swerex.runtime.abstract import IsAliveResponse

from sandbox.client import Client, Sandbox
from sandbox.compat.swerex.runtime import SandboxRuntime
from sandbox.errors import SandboxError

LOGGER = logging.getLogger("sandbox.compat.swerex")


class SandboxDeploymentConfig(BaseModel):
    """A sandbox of this platform, as a SWE-ReX deployment."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["sandbox"] = "sandbox"
    """Discriminator for (de)serialization. Do not change."""
    target: str | None = None
    """The control plane's gRPC address; SANDBOX_TARGET, else 127.0.0.1:50051, when None."""
    token: str | None = None
    """The caller's token (``Authorization: Bearer``), when the control plane has a tokens file."""
    kind: str = "terminal"
    """The sandbox kind (``terminal``; any kind with a shell and ``python3`` works)."""
    spec: dict[str, Any] = Field(default_factory=dict)
    """More fields of ``SandboxSpec`` (``image``, ``resources``, ``network``, ``ttl_s``, ``snapshot``, ...)."""
    startup_timeout: float = 180.0
    """How long ``start`` waits for room on the host (the create's ``wait_s``) when the host is full."""

    def get_deployment(self) -> SandboxDeployment:
        return SandboxDeployment(**self.model_dump(exclude={"type"}))


class SandboxDeployment(AbstractDeployment):
    """One sandbox: ``await d.start()``, then ``d.runtime`` acts in it; ``await d.stop()`` deletes it."""

    def __init__(self, *, logger: logging.Logger | None = None, **kwargs: Any) -> None:
        """``kwargs``: the fields of :class:`SandboxDeploymentConfig`."""
        self._config = SandboxDeploymentConfig(**kwargs)
        self.logger = logger or LOGGER
        self._hooks = CombinedDeploymentHook()
        self._client: Client | None = None
        self._sandbox: Sandbox | None = None
        self._runtime: SandboxRuntime | None = None

    @classmethod
    def from_config(cls, config: SandboxDeploymentConfig) -> SandboxDeployment:
        return cls(**config.model_dump(exclude={"type"}))

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox, once started (its ``id``, and the whole SDK on it)."""
        if self._sandbox is None:
            raise DeploymentNotStartedError()
        return self._sandbox

    def add_hook(self, hook: DeploymentHook) -> None:
        self._hooks.add_hook(hook)

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        """Whether the sandbox answers and is healthy; ``DeploymentNotStartedError`` before ``start``."""
        return await self.runtime.is_alive(timeout=timeout)

    async def start(self) -> None:
        """Create the sandbox (``DeploymentStartupError`` when the control plane refuses) and its runtime."""
        if self._runtime is not None:
            return
        config = self._config
        self._hooks.on_custom_step("Creating sandbox")
        self._client = client = Client(config.target, token=config.token)  # blocking, in threads: any event loop
        try:
            self._sandbox = await asyncio.to_thread(
                client.create, config.kind, wait_s=config.startup_timeout, **config.spec
            )
        except SandboxError as e:
            await asyncio.to_thread(client.close)
            self._client = None
            raise DeploymentStartupError(f"the control plane did not create a {config.kind} sandbox: {e}") from e
        self.logger.info("sandbox %s created for SWE-ReX", self._sandbox.id)
        self._hooks.on_custom_step("Starting runtime")
        self._runtime = SandboxRuntime(self._sandbox, logger=self.logger)

    async def stop(self) -> None:
        """Close the runtime and delete the sandbox. Idempotent."""
        runtime, sandbox, client = self._runtime, self._sandbox, self._client
        self._runtime = self._sandbox = self._client = None
        try:
            if runtime is not None:
                try:
                    await runtime.close()
                except SandboxError as e:
                    self.logger.warning("closing the runtime of sandbox %s: %s", runtime.sandbox.id, e)
            if sandbox is not None:
                await asyncio.to_thread(sandbox.close)
        finally:
            if client is not None:
                await asyncio.to_thread(client.close)

    @property
    def runtime(self) -> SandboxRuntime:
        if self._runtime is None:
            raise DeploymentNotStartedError()
        return self._runtime
