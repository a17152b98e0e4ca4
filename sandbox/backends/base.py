"""What every backend provides: a place for a sandbox to live, and a way to reach its agent.

A backend provisions (create, destroy, list, logs); the in-sandbox agent acts. The
service layer knows backends only through this interface.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field

from sandbox.agent_client import AgentClient
from sandbox.errors import SandboxError
from sandbox.models import Health, HealthCheck, SandboxKind, SandboxSpec

# Labels on every engine object the platform creates. Clean-up filters on them.
LABEL_MANAGED_BY = "sandbox.managed-by"
LABEL_OWNER = "sandbox.owner"
LABEL_ID = "sandbox.id"
LABEL_KIND = "sandbox.kind"
LABEL_USER_PREFIX = "sandbox.user."
MANAGED_BY = "sandbox"


class RuntimeState(enum.StrEnum):
    """What the engine says of a sandbox's container or pod."""

    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    MISSING = "missing"


@dataclass(frozen=True)
class BackendSandbox:
    id: str
    kind: SandboxKind
    ref: str
    """The engine's own name for it: a container id, a pod name."""
    state: RuntimeState
    labels: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    exit_code: int | None = None


class Backend(abc.ABC):
    name: str

    @abc.abstractmethod
    async def create(self, sandbox_id: str, spec: SandboxSpec, *, ready_timeout: float | None = None) -> BackendSandbox:
        """Start a sandbox and return once its agent answers and is healthy."""

    @abc.abstractmethod
    async def destroy(self, sandbox_id: str) -> None:
        """Remove the sandbox and everything it alone used. Idempotent."""

    @abc.abstractmethod
    async def inspect(self, sandbox_id: str) -> BackendSandbox:
        """Current engine state; ``RuntimeState.MISSING`` when the engine has no such sandbox."""

    @abc.abstractmethod
    async def list_sandboxes(self) -> list[BackendSandbox]:
        """Every sandbox this backend instance owns (by its owner label)."""

    @abc.abstractmethod
    async def logs(self, sandbox_id: str, *, tail: int = 200) -> str:
        """The sandbox's own output (its services and agent)."""

    def image_for(self, spec: SandboxSpec) -> str:
        """The image a sandbox of ``spec`` runs when the spec names none."""
        return spec.image or spec.kind.value

    @abc.abstractmethod
    async def snapshot(self, sandbox_id: str, name: str) -> str:
        """Keep the sandbox's file system as an image; returns its reference."""

    @abc.abstractmethod
    async def collect_snapshots(self, *, keep: set[str]) -> list[str]:
        """Remove snapshot images not in ``keep`` that no sandbox runs; returns the removed references."""

    @abc.abstractmethod
    def agent(self, sandbox_id: str) -> AgentClient:
        """A client of the sandbox's agent over this backend's transport."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release clients and connections; sandboxes keep running."""


async def probe_health(backend: Backend, sandbox_id: str, *, known: BackendSandbox | None = None) -> Health:
    """The engine's view and the agent's deep probes, in one report.

    ``known``: the engine's view from a listing just taken; it saves an inspect per sandbox, which
    at hundreds of sandboxes per health round is what costs the control plane most.
    A dead agent or a stopped container shows as a failed check, never as an exception.
    """
    state = known if known is not None else await backend.inspect(sandbox_id)
    if state.state is not RuntimeState.RUNNING:
        detail = f"container is {state.state.value}" + (
            f" (exit code {state.exit_code})" if state.exit_code is not None else ""
        )
        return Health(ok=False, checks={"container": HealthCheck(ok=False, detail=detail)})
    container = HealthCheck(ok=True, detail="running")
    try:
        report = await backend.agent(sandbox_id).health(deadline=10)
    except SandboxError as e:
        agent = HealthCheck(ok=False, detail=f"agent does not answer: {e.message}")
        return Health(ok=False, checks={"container": container, "agent": agent})
    checks = {"container": container, "agent": HealthCheck(ok=True, detail="answers"), **report.checks}
    return Health(ok=report.ok, checks=checks)
