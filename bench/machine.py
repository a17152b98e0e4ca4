"""What the benchmark ran on, and the host figures it watches (free memory, a process's RSS). Linux only."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class Machine:
    cpu_model: str
    cores: int
    ram_gib: float
    kernel: str
    os: str
    docker: str
    python: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"{self.cpu_model}, {self.cores} cores, {self.ram_gib:.1f} GiB RAM; {self.os}, Linux {self.kernel}; "
            f"Docker {self.docker}; Python {self.python}"
        )


def _meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            number = rest.split()
            if number:
                values[key] = int(number[0]) * (1024 if rest.strip().endswith("kB") else 1)
    return values


def mem_available() -> int:
    """MemAvailable, in bytes: what can still be allocated without swapping or the OOM killer."""
    return _meminfo()["MemAvailable"]


def rss(pid: int) -> int:
    """VmRSS of ``pid``, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"process {pid} reports no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time ``pid`` has used so far (its own threads, not its children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CGROUP_CPU = (
    "/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage",  # v1: nanoseconds
    "/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat",  # v2, systemd driver: usage_usec
    "/sys/fs/cgroup/docker/{id}/cpu.stat",  # v2, cgroupfs driver
)


def container_cpu_seconds(container_id: str) -> float | None:
    """CPU seconds every process of a container has used so far, from its cgroup; None when none is found."""
    for pattern in CGROUP_CPU:
        try:
            with open(pattern.format(id=container_id)) as f:
                text = f.read()
        except OSError:
            continue
        if pattern.endswith("cpuacct.usage"):
            return int(text) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    return None


def busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, summed over its cores (from /proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    total = sum(ticks[:8])
    hz = os.sysconf("SC_CLK_TCK")
    return (total - idle) / hz, total / hz


def pids_named(command: str) -> list[int]:
    """Processes whose command name is ``command`` (read from /proc; for watching only)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() == command:
                        found.append(int(entry))
            except OSError:
                continue
    return found


class CpuMeter:
    """CPU used between ``start()`` and ``read()``: the machine's busy share of all its cores, and each watched
    process's share of one core (100 = one core busy)."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._wall = 0.0
        self._machine = (0.0, 0.0)
        self._processes: dict[str, float] = {}

    def _process_seconds(self) -> dict[str, float]:
        seconds = {}
        for name, pid in self.pids.items():
            try:
                seconds[name] = cpu_seconds(pid)
            except (OSError, ValueError, IndexError):
                continue
        return seconds

    def start(self) -> None:
        self._wall = time.monotonic()
        self._machine = busy_seconds()
        self._processes = self._process_seconds()

    def read(self) -> dict[str, float]:
        wall = time.monotonic() - self._wall
        busy, total = busy_seconds()
        shares = {"machine_busy_pct": 100 * (busy - self._machine[0]) / max(total - self._machine[1], 1e-9)}
        for name, seconds in self._process_seconds().items():
            if name in self._processes:
                shares[f"{name}_cpu_pct"] = 100 * (seconds - self._processes[name]) / max(wall, 1e-9)
        return {k: round(v, 1) for k, v in shares.items()}


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or "unknown CPU"


def _os_name() -> str:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.partition("=")[2].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def _docker_version() -> str:
    try:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    return done.stdout.strip() or f"unknown ({done.stderr.strip()[:200]})"


def describe() -> Machine:
    """Blocking (runs the docker CLI): call it from a thread in async code."""
    return Machine(
        cpu_model=_cpu_model(),
        cores=os.cpu_count() or 0,
        ram_gib=round(_meminfo()["MemTotal"] / GIB, 1),
        kernel=platform.release(),
        os=_os_name(),
        docker=_docker_version(),
        python=platform.python_version(),
    )
