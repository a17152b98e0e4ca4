"""Where a step's CPU goes, measured around a closed loop: the client (this process: the SDK and gRPC), the control
plane, the sandboxes (their agents, shells and whatever a step starts, from the containers' cgroups) and the rest
of the machine (the engine, the kernel's network and scheduling work, anything else running)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from bench.machine import busy_seconds, container_cpu_seconds, cpu_seconds


@dataclass(frozen=True)
class CpuSplit:
    """CPU seconds used by each part between ``start()`` and ``stop()``."""

    client: float
    control_plane: float
    sandboxes: float
    other: float

    @property
    def total(self) -> float:
        return self.client + self.control_plane + self.sandboxes + self.other

    def per_step_ms(self, steps: int) -> dict[str, float]:
        parts = {"client": self.client, "control plane": self.control_plane, "sandboxes": self.sandboxes}
        return {name: 1000 * seconds / max(steps, 1) for name, seconds in {**parts, "other": self.other}.items()}

    def describe(self, steps: int) -> str:
        return ", ".join(f"{name} {ms:.2f} ms" for name, ms in self.per_step_ms(steps).items())


class StepCpuMeter:
    def __init__(self, server_pid: int, containers: list[str]) -> None:
        self.server_pid = server_pid
        self.containers = containers
        self._start: tuple[float, float, float | None, float] | None = None

    def _sandboxes(self) -> float | None:
        readings = [container_cpu_seconds(c) for c in self.containers]
        return None if any(r is None for r in readings) else sum(r for r in readings if r is not None)

    def _read(self) -> tuple[float, float, float | None, float]:
        return cpu_seconds(os.getpid()), cpu_seconds(self.server_pid), self._sandboxes(), busy_seconds()[0]

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> CpuSplit | None:
        """The split since ``start()``; None when the containers' cgroups cannot be read on this host."""
        if self._start is None:
            raise RuntimeError("stop() before start()")
        (client0, server0, boxes0, busy0), (client1, server1, boxes1, busy1) = self._start, self._read()
        if boxes0 is None or boxes1 is None:
            return None
        client, server, boxes = client1 - client0, server1 - server0, boxes1 - boxes0
        return CpuSplit(client, server, boxes, max(0.0, (busy1 - busy0) - client - server - boxes))
