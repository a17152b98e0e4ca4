"""The control plane's Prometheus metrics, on a registry of their own (never the process-wide default), so several
services in one process (tests, an embedding program) each count only their own work.

Labels stay low-cardinality: kinds, states, operations, outcomes, error codes, pool keys (one per configured pool).
No sandbox id ever becomes a label: ``/metrics`` needs no token. Tenants label only the capacity and quota series
(their number is bounded by the tokens file, and an operator needs each tenant's usage and refusals).

The service times its calls with :meth:`Metrics.operation`; the sandbox's kind, known only once the sandbox has been
looked up, is filled in by :func:`note_kind` from inside the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from sandbox.models import SandboxKind, SandboxState

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: a step is milliseconds, a cold desktop create is seconds."""
UNKNOWN_KIND = "unknown"
"""The kind of a call that failed before it found its sandbox (a bad id, say)."""

OK, ERROR, CANCELLED = "ok", "error", "cancelled"
FailureCause = Literal["container_gone", "container_exited", "probe_failed"]


@dataclass
class _Timing:
    kind: str = UNKNOWN_KIND


_current: ContextVar[_Timing | None] = ContextVar("sandbox_operation_timing", default=None)


def note_kind(kind: SandboxKind) -> None:
    """Label the operation being timed in this task (if any) with the kind of sandbox it acts on."""
    timing = _current.get()
    if timing is not None:
        timing.kind = kind.value


@dataclass(frozen=True)
class PoolStats:
    key: str
    kind: SandboxKind
    ready: int
    starting: int
    min: int


class Metrics:
    """Every metric the control plane exports. ``registry`` is what ``/metrics`` renders."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.operation_seconds = Histogram(
            "sandbox_operation_duration_seconds",
            "Service calls (create, step, observe, reset, exec, …) from entry to answer, by outcome (ok, error, "
            "cancelled); kind 'unknown' when the call failed before finding its sandbox.",
            ["operation", "kind", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._operations: dict[tuple[str, str, str], Histogram] = {}
        self.api_errors = Counter(
            "sandbox_api_errors",
            "Calls answered with an error, by transport (grpc, rest), method (RPC name or route) and status code "
            "name (NOT_FOUND, INVALID_ARGUMENT, …: the same name on both transports).",
            ["transport", "method", "code"],
            registry=r,
        )
        self.lane_steps = Counter(
            "sandbox_lane_steps",
            "Steps taken through a direct lane (docs/lanes.md), by kind and outcome, counted when the control plane "
            'reads the agent\'s ledger; they are in sandbox_operation_duration_seconds{operation="step"} too.',
            ["kind", "outcome"],
            registry=r,
        )
        self.lane_steps_lost = Counter(
            "sandbox_lane_steps_lost",
            "Lane steps an agent's ledger no longer held when the control plane read it (it read too late).",
            ["kind"],
            registry=r,
        )
        self.provisions = Counter(
            "sandbox_provisions",
            "Instances given to sandboxes (create, reset, recovery): 'warm' was taken from a warm pool, 'cold' was "
            "started on the caller's path.",
            ["kind", "source"],
            registry=r,
        )
        self.health_failures = Counter(
            "sandbox_health_failures",
            "Sandboxes found failed (by the health monitor or a caller's call): container_gone, container_exited "
            "or probe_failed (the container runs but a deep check fails).",
            ["kind", "cause"],
            registry=r,
        )
        self.replacements = Counter(
            "sandbox_replacements",
            "Failed auto_recover sandboxes given a fresh instance under the same id.",
            ["kind"],
            registry=r,
        )
        self.restarts = Counter(
            "sandbox_restarts",
            "Failed auto_recover sandboxes whose stopped container was started again in place, files kept.",
            ["kind"],
            registry=r,
        )
        self.expirations = Counter(
            "sandbox_expirations",
            "Leases ended by the control plane: ttl ran out, or idle too long.",
            ["kind", "reason"],
            registry=r,
        )
        self.sandboxes = Gauge(
            "sandbox_sandboxes",
            "Sandboxes in the store by kind and state, read at scrape time (every replica reports the whole fleet: "
            "aggregate replicas with max, not sum).",
            ["kind", "state"],
            registry=r,
        )
        self.pool_ready = Gauge(
            "sandbox_pool_ready_instances",
            "Warm instances waiting in each pool, read from the store at scrape time (fleet-wide, like "
            "sandbox_sandboxes).",
            ["pool", "kind"],
            registry=r,
        )
        self.pool_starting = Gauge(
            "sandbox_pool_starting_instances",
            "Instances this replica is starting for each pool (only the leader starts any).",
            ["pool", "kind"],
            registry=r,
        )
        self.pool_min = Gauge(
            "sandbox_pool_min_instances",
            "The number of warm instances each pool keeps ready.",
            ["pool", "kind"],
            registry=r,
        )
        self.recordings = Counter(
            "sandbox_recordings",
            "Screen recordings of episodes (android; reset with record): 'kept' with the trajectory, or 'failed' (it "
            "did not start, or was lost at its stop: the trajectory's warnings say why).",
            ["kind", "outcome"],
            registry=r,
        )
        self.capacity = Gauge(
            "sandbox_capacity",
            "The host's allocatable resources and what is reserved of them, by resource (cpus, memory_mb, pids) and "
            "use: allocatable, held (sandboxes), warm (pools and snapshot replicas), granted (admitted, not started).",
            ["resource", "use"],
            registry=r,
        )
        self.waiting = Gauge(
            "sandbox_admission_waiting",
            "Calls waiting for capacity (creates and groups that passed wait_s).",
            registry=r,
        )
        self.tenant_reserved = Gauge(
            "sandbox_tenant_reserved",
            "What each tenant's sandboxes reserve, by resource (cpus, memory_mb, pids, and sandboxes: their count).",
            ["tenant", "resource"],
            registry=r,
        )
        self.refusals = Counter(
            "sandbox_admission_refusals",
            "Starts refused by admission, by tenant and reason: capacity (the host is full), quota (the tenant's), "
            "pressure (the kernel reports memory pressure).",
            ["tenant", "reason"],
            registry=r,
        )
        self.isolation = Gauge(
            "sandbox_network_isolation",
            "1 for the state of the backend's check that the cluster enforces NetworkPolicies (enforced, not_enforced, "
            "unknown, pending, off); no series when the backend makes no such check (Docker).",
            ["state"],
            registry=r,
        )
        self.leader = Gauge(
            "sandbox_lifecycle_leader",
            "1 while this replica leads the background work (pools, health, expiry, reconciliation).",
            registry=r,
        )

    # ------------------------------------------------------------------ recording

    @contextlib.contextmanager
    def operation(self, name: str, *, kind: SandboxKind | None = None) -> Iterator[None]:
        """Time the block as one ``name`` call; its outcome is how the block ends."""
        timing = _Timing(kind.value if kind is not None else UNKNOWN_KIND)
        token = _current.set(timing)
        started = time.perf_counter()
        outcome = ERROR
        try:
            yield
            outcome = OK
        except asyncio.CancelledError:
            outcome = CANCELLED
            raise
        finally:
            _current.reset(token)
            self._operation(name, timing.kind, outcome).observe(time.perf_counter() - started)

    def _operation(self, name: str, kind: str, outcome: str) -> Histogram:
        """The histogram of one operation, kind and outcome (prometheus' ``labels()`` checks and locks on every
        call: a step would pay that each time)."""
        key = (name, kind, outcome)
        child = self._operations.get(key)
        if child is None:
            child = self._operations[key] = self.operation_seconds.labels(name, kind, outcome)
        return child

    def lane_step(self, operation: str, kind: SandboxKind, *, ok: bool, seconds: float) -> None:
        """One step (or observe) a lane took, as the agent timed it: counted with the control plane's own."""
        outcome = OK if ok else ERROR
        self._operation(operation, kind.value, outcome).observe(seconds)
        self.lane_steps.labels(kind.value, outcome).inc()

    def api_error(self, transport: str, method: str, code: str) -> None:
        self.api_errors.labels(transport, method, code).inc()

    def provisioned(self, kind: SandboxKind, *, warm: bool) -> None:
        self.provisions.labels(kind.value, "warm" if warm else "cold").inc()

    def health_failure(self, kind: SandboxKind, cause: FailureCause) -> None:
        self.health_failures.labels(kind.value, cause).inc()

    def replaced(self, kind: SandboxKind) -> None:
        self.replacements.labels(kind.value).inc()

    def restarted(self, kind: SandboxKind) -> None:
        self.restarts.labels(kind.value).inc()

    def expired(self, kind: SandboxKind, reason: str) -> None:
        self.expirations.labels(kind.value, reason).inc()

    def recording(self, kind: SandboxKind, outcome: Literal["kept", "failed"]) -> None:
        self.recordings.labels(kind.value, outcome).inc()

    def refused(self, tenant: str, reason: str) -> None:
        self.refusals.labels(tenant, reason).inc()

    def set_isolation(self, isolation: tuple[str, str] | None) -> None:
        """The scrape-time isolation gauge: one series, the check's state, at 1 (none without a check)."""
        self.isolation.clear()
        if isolation is not None:
            self.isolation.labels(isolation[0]).set(1)

    def set_capacity(
        self, uses: dict[str, dict[str, float]], tenants: dict[str, dict[str, float]], waiting: int
    ) -> None:
        """The scrape-time capacity gauges: ``uses`` is use -> resource -> amount, ``tenants`` tenant -> the same."""
        self.capacity.clear()
        for use, amounts in uses.items():
            for resource, amount in amounts.items():
                self.capacity.labels(resource, use).set(amount)
        self.tenant_reserved.clear()
        for tenant, amounts in tenants.items():
            for resource, amount in amounts.items():
                self.tenant_reserved.labels(tenant, resource).set(amount)
        self.waiting.set(waiting)

    def set_leader(self, leader: bool) -> None:
        self.leader.set(1 if leader else 0)

    def set_fleet(self, counts: dict[tuple[SandboxKind, SandboxState], int], pools: Iterable[PoolStats]) -> None:
        """The scrape-time gauges; every kind and state is reported, zeros included, so graphs have no gaps."""
        for kind in SandboxKind:
            for state in SandboxState:
                self.sandboxes.labels(kind.value, state.value).set(counts.get((kind, state), 0))
        for gauge in (self.pool_ready, self.pool_starting, self.pool_min):
            gauge.clear()  # a pool removed since the last scrape (a deleted snapshot's) disappears
        for pool in pools:
            labels = (pool.key, pool.kind.value)
            self.pool_ready.labels(*labels).set(pool.ready)
            self.pool_starting.labels(*labels).set(pool.starting)
            self.pool_min.labels(*labels).set(pool.min)

    # ------------------------------------------------------------------ exposition

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition in the format the scraper accepts (Prometheus text or OpenMetrics), and its content type."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type
