"""What every backend provides: a place for an *instance* to live, and a way to reach its agent.

Vocabulary (see docs/architecture.md): an **instance** is what the engine runs — a container, a pod. A
**sandbox** is the lease a client holds; the service maps each sandbox onto one instance at a time and
swaps it on reset or recovery. Backends know only instances: every method here takes an instance id.

A backend provisions (create, destroy, restart, list, logs, snapshot); the in-sandbox agent acts. The
service layer knows backends only through this interface.
"""

from __future__ import annotations

import abc
import enum
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from sandbox.backends.agent_client import AgentClient
from sandbox.errors import FailedPrecondition, SandboxError
from sandbox.models import Health, HealthCheck, SandboxKind, SandboxSpec
from sandbox.protocol import LANE_SOCKET_NAME

# Labels on every engine object the platform creates. Clean-up filters on them.
LABEL_MANAGED_BY = "sandbox.managed-by"
LABEL_OWNER = "sandbox.owner"
LABEL_INSTANCE = "sandbox.instance"
LABEL_KIND = "sandbox.kind"
LABEL_POOL = "sandbox.pool"
LABEL_USER_PREFIX = "sandbox.user."
LABEL_SNAPSHOT = "sandbox.snapshot"
LABEL_SNAPSHOT_RECORD = "sandbox.snapshot-record"
"""On a snapshot image: the snapshot's record (JSON), so a wiped store can adopt it again."""
LABEL_TENANT_HASH = "sandbox.tenant-hash"
"""On what is made for one tenant (an instance, a tenant's internal network): ``tenant_hash`` of it, never the raw
tenant (a label value has limits, and an engine object's labels are no place for a tenant's name)."""
MANAGED_BY = "sandbox"
INSTANCE_ENV = "SANDBOX_INSTANCE_ID"
"""Inside an instance: its own instance id."""


class RuntimeState(enum.StrEnum):
    """What the engine says of an instance's container or pod."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    """Frozen for a moment (a snapshot's commit): neither judged by health checks nor handed out."""
    EXITED = "exited"
    MISSING = "missing"


@dataclass(frozen=True)
class BackendInstance:
    id: str
    kind: SandboxKind
    ref: str
    """The engine's own name for it: a container id, a pod name."""
    state: RuntimeState
    labels: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    exit_code: int | None = None
    detail: str | None = None
    """Why it is not running, for people, when the engine says more than its state (a pod's node was lost, it was
    evicted ...); None when the state says it all."""
    serving: bool = True
    """False when the engine doubts that a running instance serves (a pod whose Ready condition is False: its node
    stopped reporting, or the probe of its agent's port failed). Not a verdict: the health round deep-probes such an
    instance first, and only its agent's answer decides."""


@dataclass(frozen=True)
class BackendSnapshot:
    """A snapshot image the engine holds, with the record the service attached when it was taken."""

    ref: str
    record: dict[str, Any] | None


@dataclass(frozen=True)
class HostFacts:
    """The size of the one host a backend's instances share (what the capacity model divides)."""

    cpus: float
    memory_mb: float
    pids: int


class Backend(abc.ABC):
    name: str
    can_restart: bool = True
    """Whether a stopped instance can be started again in place (a pod cannot: the kubelet restarts it itself)."""
    can_snapshot: bool = True
    """Whether ``snapshot`` can work at all here (a backend that cannot raises ``FailedPrecondition`` from it)."""
    status_lag_s: float = 0.0
    """How long the engine may go on saying a dead container runs (a kubelet notices within a second or two; a docker
    engine at once): a health round waits up to this long for its word on one whose agent does not answer."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentClient] = {}

    @abc.abstractmethod
    async def create(
        self,
        instance_id: str,
        spec: SandboxSpec,
        *,
        pool: str | None = None,
        ready_timeout: float | None = None,
        tenant: str | None = None,
    ) -> BackendInstance:
        """Start an instance and return once its agent answers and is healthy. ``pool``: the warm pool it is
        started for, kept on the instance so a wiped store can tell warm instances from held ones. ``tenant``: the
        tenant it is started for (the service names it for every instance but a warm one), the scope of what the
        instance shares with its peers: with network ``internal`` it joins that tenant's internal network and
        reaches that tenant's sandboxes alone. None: no tenant (a warm instance, a caller outside the service)."""

    @abc.abstractmethod
    async def destroy(self, instance_id: str) -> None:
        """Remove the instance and everything it alone used (its claim included). Idempotent."""

    @abc.abstractmethod
    async def restart(self, instance_id: str, *, ready_timeout: float | None = None) -> BackendInstance:
        """Start the instance again in place (stopping it first if it runs), with its files; wait until healthy."""

    @abc.abstractmethod
    async def inspect(self, instance_id: str) -> BackendInstance:
        """Current engine state; ``RuntimeState.MISSING`` when the engine has no such instance."""

    @abc.abstractmethod
    async def list_instances(self) -> list[BackendInstance]:
        """Every instance this backend owns (by its owner label)."""

    async def list_not_running(self) -> list[BackendInstance]:
        """The instances this backend owns that are not running (stopped, paused, starting), and the running ones
        the engine doubts (``serving`` False): what a health round judges from the engine's view, while a running
        instance is judged by its agent. An engine that filters on its side saves listing every running instance
        each round (Docker: 13 against 80 ms of dockerd's CPU with 300 containers)."""
        return [i for i in await self.list_instances() if i.state is not RuntimeState.RUNNING or not i.serving]

    @abc.abstractmethod
    async def logs(self, instance_id: str, *, tail: int = 200) -> str:
        """The instance's own output (its services and agent)."""

    async def ping(self) -> None:
        """Raise (``Unavailable``) unless the engine answers; a readiness probe calls this often, so keep it cheap."""
        await self.list_instances()

    def pressure(self) -> str | None:
        """Why the engine cannot keep up now (it stopped answering, too many calls are queued), for readiness to
        report; None while it keeps up. A backend that tracks this judges it with hysteresis, so it does not flap
        (``engine_gate.EngineGate.pressure``). Cheap and non-blocking: no engine call. None here."""
        return None

    def isolation(self) -> tuple[str, str] | None:
        """(state, detail) of the backend's own check that the cluster enforces the sandboxes' network isolation, for
        the metrics to report; None when the backend makes none (Docker applies its networks itself). Cheap: the
        check's last result, no call."""
        return None

    async def host_facts(
        self, *, memory_mb: float | None = None, cpus: float | None = None, pids: int | None = None
    ) -> HostFacts | None:
        """The host's size, each figure the given one or else the engine's word; None when the instances do not share
        one host the control plane can size (Kubernetes: the scheduler places them). Here: only what is given, and
        None unless all three are."""
        if memory_mb is None or cpus is None or pids is None:
            return None
        return HostFacts(cpus=cpus, memory_mb=memory_mb, pids=pids)

    def image_for(self, spec: SandboxSpec) -> str:
        """The image an instance of ``spec`` runs when the spec names none."""
        return spec.image or spec.kind.value

    # claims: which sandbox holds an instance, kept with the instance on the engine side

    @abc.abstractmethod
    async def set_claim(self, instance_id: str, claim: dict[str, Any]) -> None:
        """Attach the lease that holds this instance (sandbox id, tenant, spec, lease end), so that a
        control plane whose store was wiped can rebuild the sandbox's record from the engine alone."""

    @abc.abstractmethod
    async def claims(self) -> dict[str, dict[str, Any]]:
        """Instance id -> its claim, for every owned instance that has one."""

    # snapshots

    @abc.abstractmethod
    async def snapshot(self, instance_id: str, name: str, *, record: dict[str, Any] | None = None) -> str:
        """Keep the instance's file system as an image (carrying ``record``); returns its reference."""

    @abc.abstractmethod
    async def list_snapshots(self) -> list[BackendSnapshot]:
        """Every snapshot image this backend owns."""

    @abc.abstractmethod
    async def collect_snapshots(
        self, *, keep: set[str], only: set[str] | None = None, min_age_s: float = 0.0
    ) -> list[str]:
        """Remove snapshot images not in ``keep`` that no instance runs; returns the removed references.
        ``only``: consider just these references. ``min_age_s``: leave images younger than this alone — a snapshot
        is committed before the record naming it is stored, and must not be collected in between."""

    # the agent

    def agent(self, instance_id: str) -> AgentClient:
        """A client of the instance's agent over this backend's transport (one per instance, pooled)."""
        client = self._agents.get(instance_id)
        if client is None:
            client = self._agents[instance_id] = self._connect_agent(instance_id)
        return client

    @abc.abstractmethod
    def _connect_agent(self, instance_id: str) -> AgentClient:
        """A new client of the instance's agent."""

    async def lane_address(self, instance_id: str) -> str | None:
        """Where an SDK reaches the instance's direct lanes (docs/lanes.md): ``unix:PATH``, the lane socket beside
        the agent's on this host, or ``tcp:HOST:PORT``; None: this backend offers none."""
        socket_path = self.agent(instance_id).socket_path
        if socket_path is None:
            return None
        return "unix:" + os.path.join(os.path.dirname(socket_path), LANE_SOCKET_NAME)

    async def _forget_agent(self, instance_id: str) -> None:
        agent = self._agents.pop(instance_id, None)
        if agent is not None:
            await agent.close()

    async def close(self) -> None:
        """Release clients and connections; instances keep running."""
        agents, self._agents = list(self._agents.values()), {}
        for agent in agents:
            await agent.close()


def check_cpus(spec: SandboxSpec, host_cpus: float) -> None:
    """Refuse, as the caller's to fix, a spec asking for more CPUs than the host has: the engine would refuse it too,
    but later and as its own failure (Docker: "Range of CPUs is from 0.01 to N")."""
    if spec.resources.cpus > host_cpus:
        raise FailedPrecondition(
            f"resources.cpus is {spec.resources.cpus:g}, but the host has {host_cpus:g} CPUs: ask for at most that"
        )


def tenant_hash(tenant: str) -> str:
    """A short, stable name of a tenant for engine object names and labels (12 hex digits of its SHA-256)."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:12]


def encode_claim(claim: dict[str, Any]) -> str:
    return json.dumps(claim, separators=(",", ":"), sort_keys=True)


async def probe_health(backend: Backend, instance_id: str, *, known: BackendInstance | None = None) -> Health:
    """The engine's view and the agent's deep probes, in one report.

    ``known``: the engine's view from a listing just taken; it saves an inspect per instance, which
    at hundreds of instances per health round is what costs the control plane most.
    A dead agent or a stopped container shows as a failed check, never as an exception.
    """
    state = known if known is not None else await backend.inspect(instance_id)
    if state.state is not RuntimeState.RUNNING:
        detail = f"container is {state.state.value}" + (
            f" (exit code {state.exit_code})" if state.exit_code is not None else ""
        )
        detail += f": {state.detail}" if state.detail else ""
        return Health(ok=False, checks={"container": HealthCheck(ok=False, detail=detail)})
    return await probe_agent(backend, instance_id)


async def probe_agent(backend: Backend, instance_id: str) -> Health:
    """The agent's deep probes of an instance taken to be running (a failure does not tell whether it still is)."""
    container = HealthCheck(ok=True, detail="running")
    try:
        report = await backend.agent(instance_id).health(deadline=10)
    except SandboxError as e:
        agent = HealthCheck(ok=False, detail=f"agent does not answer: {e.message}")
        return Health(ok=False, checks={"container": container, "agent": agent})
    checks = {"container": container, "agent": HealthCheck(ok=True, detail="answers"), **report.checks}
    return Health(ok=report.ok, checks=checks)
