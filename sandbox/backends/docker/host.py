"""The size of the Docker engine's host: its memory and CPUs from the engine's info, its pid limit from the kernel
when the engine is local (a remote engine's is not readable here: pids are then not bounded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandbox.backends.base import HostFacts

UNBOUNDED_PIDS = 1 << 22
"""The kernel's largest pid_max: what a host whose limit cannot be read is taken to have."""


def local_pid_limit(proc: Path = Path("/proc/sys/kernel")) -> int | None:
    """The lesser of pid_max and threads-max (every thread takes a pid), or None if unreadable."""
    try:
        return min(int((proc / "pid_max").read_text()), int((proc / "threads-max").read_text()))
    except (OSError, ValueError):
        return None


def is_local(base_url: str | None) -> bool:
    return base_url is None or base_url.startswith(("unix://", "/"))


def host_facts(
    info: dict[str, Any], *, local: bool, memory_mb: float | None, cpus: float | None, pids: int | None
) -> HostFacts:
    """Each figure the given one, else the engine's (``info`` is ``docker info``'s document)."""
    engine_memory = float(info.get("MemTotal") or 0) / (1 << 20)
    engine_cpus = float(info.get("NCPU") or 0)
    kernel_pids = local_pid_limit() if local else None
    return HostFacts(
        cpus=cpus if cpus is not None else engine_cpus,
        memory_mb=memory_mb if memory_mb is not None else engine_memory,
        pids=pids if pids is not None else (kernel_pids or UNBOUNDED_PIDS),
    )
