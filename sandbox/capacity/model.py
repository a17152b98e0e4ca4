"""A host's allocatable resources and what each spec reserves on it.

allocatable = (host - reserve) x overcommit, per resource; a spec reserves its kind's request, scaled by how far its
limits are from the kind's default spec and never above its limits. A host of unknown size (Kubernetes, where the
scheduler places pods) has no model: only quotas are checked there.
"""

from __future__ import annotations

from sandbox.backends.base import HostFacts
from sandbox.capacity.settings import CapacitySettings
from sandbox.capacity.usage import Usage
from sandbox.memo import Memo
from sandbox.models import Resources, SandboxKind, SandboxSpec


class CapacityModel:
    def __init__(self, settings: CapacitySettings, host: HostFacts | None) -> None:
        self.settings = settings
        self._host = host
        self._allocatable = self._allocate()
        self._reservations: Memo[tuple[SandboxKind, Resources], Usage] = Memo()

    @property
    def bounded(self) -> bool:
        """Whether host capacity is checked at all (a known host, and the check enabled)."""
        return self.host is not None and self.settings.enabled

    @property
    def host(self) -> HostFacts | None:
        return self._host

    @host.setter
    def host(self, host: HostFacts | None) -> None:
        self._host = host
        self._allocatable = self._allocate()

    @property
    def allocatable(self) -> Usage | None:
        """Worked out once a host is known: every admission decision reads it several times."""
        return self._allocatable

    def _allocate(self) -> Usage | None:
        if self.host is None or not self.settings.enabled:
            return None
        s, h = self.settings, self.host
        memory_reserve = max(s.memory_reserve_mb, h.memory_mb * s.memory_reserve_fraction)
        return Usage(
            cpus=max(0.0, h.cpus - s.cpu_reserve) * s.cpu_overcommit,
            memory_mb=max(0.0, h.memory_mb - memory_reserve) * s.memory_overcommit,
            pids=max(0, h.pids - s.pids_reserve),
        )

    @property
    def warm_room(self) -> Usage | None:
        allocatable = self.allocatable
        return None if allocatable is None else allocatable.scaled(self.settings.warm_share)

    @property
    def surge(self) -> Usage | None:
        allocatable = self.allocatable
        return None if allocatable is None else allocatable.scaled(self.settings.replace_surge)

    def reservation(self, spec: SandboxSpec) -> Usage:
        """What one instance of ``spec`` reserves (memoised: a burst names the same resources again and again)."""
        return self._reservations.get((spec.kind, spec.resources), lambda: self._reserve(spec.kind, spec.resources))

    def _reserve(self, kind: SandboxKind, limits: Resources) -> Usage:
        request = self.settings.request(kind)
        default = SandboxSpec(kind=kind).resources
        cpus = min(limits.cpus, request.cpus * max(1.0, limits.cpus / default.cpus))
        memory = min(float(limits.memory_mb), request.memory_mb * max(1.0, limits.memory_mb / default.memory_mb))
        return Usage(cpus=cpus, memory_mb=memory, pids=min(limits.pids, request.pids))

    def limit_for(self, spec: SandboxSpec) -> int | None:
        """How many sandboxes of ``spec`` an empty host holds (None: no model)."""
        allocatable = self.allocatable
        return None if allocatable is None else self.reservation(spec).how_many_fit(allocatable)
