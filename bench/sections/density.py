"""density: how many idle sandboxes of one kind this machine holds before the p99 latency of a step passes the
limit (100 ms), and the memory each one costs the control plane and the host.

The ramp adds sandboxes in batches (created through the SDK, a few at a time). After each batch it times
``density_samples`` steps of ``true``, one at a time, each on a sandbox picked at random among those held. It stops
at the maximum, when p99 passes the limit, when a create fails, before MemAvailable would drop under
``min_free_gib``, or at the time bound. The count reported is the last one whose p99 was within the limit. The
control plane runs with its default settings (health probes of every sandbox every 2 s included), but for its
capacity admission, which is off: the ramp measures what the host holds, and that is what the capacity model's limit
is set beside (the limit of each kind's default spec the model gives, with the default capacity settings, on the
host the engine reports: within ±20% of the density measured is the bar). The baseline: ``docker exec <container>
true`` on random containers at the same density.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.capacity import TOLERANCE, describe_limit, engine_host, engine_info, model_limit, within
from bench.harness import Bench, Platform, SectionResult
from bench.machine import GIB, MIB, CpuMeter, container_cpu_seconds, mem_available, pids_named
from bench.report import Row, Target
from bench.sections.common import series, step_true
from bench.stats import Summary, Value, speedup
from sandbox.backends.base import LABEL_KIND
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.errors import SandboxError

NAME = "density"
TARGET = {"terminal": 1000, "desktop": 200}
"""Issue 34's targets (the last ones, 600 and 120, were met at 650 and 130)."""
FIRST_GUESS = {"terminal": 96 * MIB, "desktop": 320 * MIB}
"""Host memory per sandbox assumed before the first batch is measured."""
MARGIN = 1.25
SETTLE_S = 2.0
"""After a batch of creates: their own work (and the engine's) dies down."""
IDLE_WINDOW_S = 3.0
"""Then the CPU the idle sandboxes cost (the control plane's probes, the engine) is measured over this long."""
BASELINE_SAMPLES = 100


@dataclass(frozen=True)
class Point:
    count: int
    p50_s: float
    p99_s: float
    server_rss: int
    mem_available: int
    create_s: float
    idle_cpu: dict[str, float]
    """CPU while the sandboxes sat idle, before the steps were timed (see ``CpuMeter``; ``sandboxes_cpu_pct``: all
    the held sandboxes' processes together, from their cgroups, in shares of one core)."""
    foreign_containers: int


async def _create_batch(
    client: AsyncClient, kind: str, count: int, concurrency: int
) -> tuple[list[AsyncSandbox], str | None]:
    gate = asyncio.Semaphore(concurrency)

    async def create() -> AsyncSandbox:
        async with gate:
            return await client.create(kind=kind)

    results = await asyncio.gather(*(create() for _ in range(count)), return_exceptions=True)
    made = [r for r in results if isinstance(r, AsyncSandbox)]
    errors = [r for r in results if isinstance(r, BaseException)]
    for error in errors:
        if not isinstance(error, SandboxError):
            raise error
    return made, (errors[0].message if errors and isinstance(errors[0], SandboxError) else None)


class _Ramp:
    def __init__(self, bench: Bench, platform: Platform, kind: str, maximum: int, step: int) -> None:
        self.bench, self.platform, self.kind = bench, platform, kind
        self.maximum, self.step = maximum, step
        self.options = bench.options
        self.rng = random.Random(0)
        self.held: list[AsyncSandbox] = []
        self.points: list[Point] = []
        self.last_latencies: list[float] = []
        self.stopped = "the maximum was reached"
        self.meter = CpuMeter(_watched(platform.server.pid))

    async def run(self, mem0: int) -> None:
        limit = self.options.density_p99_ms / 1000
        give_up = time.monotonic() + self.options.density_minutes * 60
        label = f"density {self.kind}"
        while len(self.held) < self.maximum:
            if time.monotonic() > give_up:
                self.stopped = f"time bound ({self.options.density_minutes:g} min)"
                return
            add = min(self.step, self.maximum - len(self.held))
            available = await asyncio.to_thread(mem_available)
            each = (mem0 - available) / len(self.held) if self.held else FIRST_GUESS[self.kind]
            if available - add * max(each, 0) * MARGIN < self.options.min_free_gib * GIB:
                self.stopped = f"memory ({available / GIB:.1f} GiB available, ~{each / MIB:.0f} MiB each)"
                return
            started = time.perf_counter()
            concurrency = min(self.options.density_create_concurrency, add)
            made, error = await _create_batch(self.platform.client, self.kind, add, concurrency)
            self.held += made
            create_s = time.perf_counter() - started
            await asyncio.sleep(SETTLE_S)
            containers = await self.bench.docker.find({LABEL_KIND: self.kind})
            boxes0, started = await asyncio.to_thread(_sandboxes_cpu, containers), time.monotonic()
            self.meter.start()
            await asyncio.sleep(IDLE_WINDOW_S)
            idle_cpu = self.meter.read()
            boxes1 = await asyncio.to_thread(_sandboxes_cpu, containers)
            if boxes0 is not None and boxes1 is not None:
                idle_cpu["sandboxes_cpu_pct"] = round(100 * (boxes1 - boxes0) / (time.monotonic() - started), 1)
            samples = self.options.density_samples
            latencies = await series(self.bench.progress, label, self._step, samples, 0)
            point = await self._point(latencies, create_s, idle_cpu)
            self.points.append(point)
            self.last_latencies = latencies
            self.bench.progress.say(
                f"{label}: {point.count} held, step p50 {point.p50_s * 1000:.1f} ms p99 {point.p99_s * 1000:.1f} ms, "
                f"server RSS {point.server_rss / MIB:.0f} MiB, MemAvailable {point.mem_available / GIB:.1f} GiB, "
                f"+{len(made)} in {create_s:.1f} s; idle CPU {_shares(idle_cpu)}"
                + (f"; {point.foreign_containers} other containers on the engine" if point.foreign_containers else "")
            )
            if error is not None:
                self.stopped = f"a create failed: {error[:200]}"
                return
            if point.p99_s > limit:
                self.stopped = f"p99 {point.p99_s * 1000:.0f} ms > {limit * 1000:g} ms at {point.count}"
                return

    async def _step(self) -> None:
        await step_true(self.rng.choice(self.held))

    async def _point(self, latencies: list[float], create_s: float, idle_cpu: dict[str, float]) -> Point:
        summary = Summary.of(latencies)
        server_rss = await asyncio.to_thread(self.platform.rss)
        available = await asyncio.to_thread(mem_available)
        foreign = await self.bench.foreign_containers()
        return Point(len(self.held), summary.p50, summary.p99, server_rss, available, create_s, idle_cpu, foreign)


def _sandboxes_cpu(containers: list[str]) -> float | None:
    """CPU seconds the containers' processes have used so far, all together; None when a cgroup cannot be read."""
    readings = [container_cpu_seconds(c) for c in containers]
    return None if any(r is None for r in readings) else sum(r for r in readings if r is not None)


def _shares(cpu: dict[str, float]) -> str:
    return ", ".join(f"{name.removesuffix('_pct')} {value:.0f}%" for name, value in cpu.items())


def _watched(server_pid: int) -> dict[str, int]:
    """The processes whose CPU the ramp reports: the control plane, and the engine's daemons (read only)."""
    pids = {"server": server_pid}
    for command in ("dockerd", "containerd"):
        found = pids_named(command)
        if found:
            pids[command] = found[0]
    return pids


async def _ramp(bench: Bench, kind: str, maximum: int, step: int, model: int) -> SectionResult:
    interval = bench.options.density_health_interval_s
    settings: dict[str, Any] = {"capacity": {"enabled": False}}  # the ramp measures what the model should predict
    if interval > 0:
        settings["lifecycle"] = {"health_interval_s": interval}
    async with bench.platform(f"density-{kind}", settings) as platform:
        await asyncio.sleep(2.0)
        rss0 = await asyncio.to_thread(platform.rss)
        mem0 = await asyncio.to_thread(mem_available)
        ramp = _Ramp(bench, platform, kind, maximum, step)
        await ramp.run(mem0)
        bench.progress.say(f"density {kind}: stopped: {ramp.stopped}; docker exec baseline at {len(ramp.held)} held")
        containers = await bench.docker.find({LABEL_KIND: kind})
        rng = random.Random(1)
        samples = min(bench.options.density_samples, BASELINE_SAMPLES) if containers else 0

        async def docker_exec() -> None:
            await bench.docker.exec(rng.choice(containers), "true")

        docker = await series(bench.progress, f"density {kind}: docker exec", docker_exec, samples, 0)
        bench.progress.say(f"density {kind}: removing {len(ramp.held)} sandboxes")
    return _result(bench, kind, ramp, rss0, mem0, docker, model)


def _untested(kind: str, reached: int, maximum: int) -> bool:
    """Whether the ramp stopped at its maximum below the kind's target (a quick run): the density is not known."""
    return maximum < TARGET[kind] and reached >= maximum


def _target(kind: str, reached: int, *, maximum: int) -> Target:
    wanted = TARGET[kind]
    if _untested(kind, reached, maximum):
        return Target(f"≥ {wanted} (ramp max {maximum})", None)
    return Target(f"≥ {wanted}", reached >= wanted)


def model_row(kind: str, reached: int, model: int, *, maximum: int, stopped: str) -> Row:
    """The density measured beside the capacity model's limit for the kind (their ratio measured / model)."""
    bar = f"model within ±{TOLERANCE:.0%}"
    if _untested(kind, reached, maximum):
        target = Target(f"{bar} (ramp max {maximum})", None)
    else:
        target = Target(bar, within(reached, model))
    return Row(
        NAME,
        f"idle {kind}s measured / capacity model's limit",
        Value(reached, "sandboxes"),
        Value(model, "sandboxes"),
        "capacity model, default settings",
        reached / model if model > 0 else None,
        target,
        note=describe_limit(reached, model, stopped),
    )


def _result(
    bench: Bench, kind: str, ramp: _Ramp, rss0: int, mem0: int, docker: list[float], model: int
) -> SectionResult:
    limit_ms = bench.options.density_p99_ms
    passed = [p for p in ramp.points if p.p99_s * 1000 <= limit_ms]
    reached = passed[-1].count if passed else 0
    beside = model_row(kind, reached, model, maximum=ramp.maximum, stopped=ramp.stopped)
    bench.progress.say(f"density {kind}: {beside.note}")
    rows = [
        Row(
            NAME,
            f"idle {kind}s held, step p99 ≤ {limit_ms:g} ms",
            Value(reached, "sandboxes"),
            target=_target(kind, reached, maximum=ramp.maximum),
            note=f"stopped: {ramp.stopped}",
        ),
        beside,
    ]
    last = ramp.points[-1] if ramp.points else None
    if last is not None:
        ours, base = Summary.of(ramp.last_latencies), Summary.of(docker) if docker else None
        ratio = speedup(base.p50, ours.p50) if base else None
        rows.append(Row(NAME, f"step with {last.count} idle {kind}s", ours, base, "docker exec true, same", ratio))
        server = (last.server_rss - rss0) / last.count / MIB
        host = (mem0 - last.mem_available) / last.count / MIB
        note = f"{rss0 / MIB:.0f} → {last.server_rss / MIB:.0f} MiB"
        rows.append(Row(NAME, f"control-plane RSS per {kind}", Value(server, "MiB", last.count), note=note))
        rows.append(Row(NAME, f"host memory per {kind}", Value(host, "MiB", last.count)))
    details: dict[str, Any] = {
        "reached": reached,
        "stopped": ramp.stopped,
        "server_rss_start": rss0,
        "mem_available_start": mem0,
        "points": [asdict(p) for p in ramp.points],
        "model": {
            "limit": model,
            "ratio": round(reached / model, 3) if model > 0 else None,
            "within_tolerance": beside.target.met if beside.target else None,
        },
    }
    return SectionResult(rows, details)


async def run(bench: Bench) -> SectionResult:
    o = bench.options
    rows: list[Row] = []
    host = engine_host(await engine_info(bench.docker))
    details: dict[str, Any] = {"host": asdict(host), "model_tolerance": TOLERANCE}
    for kind, maximum, step in (
        ("terminal", o.density_max_terminal, o.density_step_terminal),
        ("desktop", o.density_max_desktop, o.density_step_desktop),
    ):
        if maximum > 0:
            result = await _ramp(bench, kind, maximum, step, model_limit(host, kind))
            rows += result.rows
            details[kind] = result.details
    return SectionResult(rows, details)
