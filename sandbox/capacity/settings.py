"""The capacity settings: what the host keeps for itself, how far CPUs are shared, what each kind reserves.

The per-kind requests are the working set a sandbox of the kind's default spec was measured to need (``make bench``'s
density section, 2026-11-29: host memory per idle terminal 17.4 MiB, per idle desktop 52.2 MiB), with room for what a
policy opens in it; the model then admits at most what the bench held at a step p99 under 100 ms (1,100 terminals,
220 desktops on 24 GiB). A spec asking for a larger memory or CPU limit than the default reserves in proportion, never
more than its limit.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sandbox.models import SandboxKind


class KindRequest(BaseModel):
    """What one sandbox of a kind's default spec reserves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float = Field(gt=0, le=64, description="CPU cores reserved (idle sandboxes use a sliver of one).")
    memory_mb: float = Field(gt=0, le=262_144, description="Memory reserved, in MiB.")
    pids: int = Field(ge=1, le=65_536, description="Processes and threads reserved.")


DEFAULT_REQUESTS: dict[SandboxKind, KindRequest] = {
    SandboxKind.TERMINAL: KindRequest(cpus=0.005, memory_mb=22, pids=16),
    SandboxKind.DESKTOP: KindRequest(cpus=0.025, memory_mb=100, pids=64),
    SandboxKind.BROWSER: KindRequest(cpus=0.1, memory_mb=320, pids=160),
    SandboxKind.ANDROID: KindRequest(cpus=1.0, memory_mb=4096, pids=256),
}


class CapacitySettings(BaseModel):
    """How the control plane decides what a host can hold (docs/capacity.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Off: no host capacity check (quotas still hold).")
    memory_reserve_mb: int = Field(
        1024, ge=0, description="Memory kept for the engine, the control plane and the kernel, at least."
    )
    memory_reserve_fraction: float = Field(
        0.08, ge=0, lt=1, description="... or this share of the host's memory, whichever is larger."
    )
    memory_overcommit: float = Field(
        1.0, ge=0.1, le=10, description="Reservations may add up to this many times the allocatable memory."
    )
    cpu_reserve: float = Field(0.25, ge=0, description="CPU cores kept for the engine and the control plane.")
    cpu_overcommit: float = Field(
        4.0, ge=0.1, le=100, description="Reserved CPUs may add up to this many times the allocatable CPUs."
    )
    pids_reserve: int = Field(4096, ge=0, description="Processes and threads kept for the rest of the host.")
    requests: dict[SandboxKind, KindRequest] = Field(
        default_factory=lambda: dict(DEFAULT_REQUESTS),
        description="What a sandbox of each kind's default spec reserves (kinds not named keep the default).",
    )
    host_memory_mb: int | None = Field(None, ge=64, description="The host's memory; the engine's word when unset.")
    host_cpus: float | None = Field(None, gt=0, description="The host's CPUs; the engine's word when unset.")
    host_pids: int | None = Field(None, ge=64, description="The host's pid limit; the kernel's when unset.")
    warm_share: float = Field(
        0.5, ge=0, le=1, description="Warm pools and snapshot replicas together take at most this share."
    )
    replace_surge: float = Field(
        0.1,
        ge=0,
        le=1,
        description="A reset or recovery of a full host may reserve this share beyond capacity while its old "
        "instance is being replaced (the old one is removed right after).",
    )
    max_wait_s: float = Field(900.0, ge=0, description="The longest a caller may ask to wait for capacity.")
    replace_wait_s: float = Field(
        30.0, ge=0, description="How long a reset or recovery waits for capacity beyond the surge before refusing."
    )
    memory_pressure_pct: float = Field(
        25.0,
        ge=0,
        le=100,
        description="PSI memory 'some avg10' at or above which admission stops and warm instances go (0: never).",
    )
    memory_pressure_clear_pct: float = Field(
        5.0, ge=0, le=100, description="... and below which it resumes (hysteresis)."
    )

    def request(self, kind: SandboxKind) -> KindRequest:
        return self.requests.get(kind, DEFAULT_REQUESTS[kind])
