"""create: a sandbox to ready, cold (no pool) and from a warm pool, vs ``docker run`` of the same image to ready.

Between samples the platform settles (no instance starting or being removed), so a sample times one create on a
quiet machine; the cold and ``docker run`` samples alternate, so both see the same machine.
"""

from __future__ import annotations

import time

from bench.harness import Bench, Platform, SectionResult
from bench.report import Row, Target
from bench.stats import Summary, speedup

NAME = "create"
KINDS = ("terminal", "desktop")
WARM_SPEEDUP = 10.0
READY = {"terminal": "docker run → exec true ok", "desktop": "docker run → WM up"}


def _elapsed(since: float) -> float:
    return time.perf_counter() - since


async def _cold_and_docker(bench: Bench, platform: Platform, kind: str, n: int) -> tuple[list[float], list[float]]:
    cold: list[float] = []
    docker: list[float] = []
    for i in range(n + 1):  # the first pair warms up
        started = time.perf_counter()
        sandbox = await platform.client.create(kind=kind)
        took = _elapsed(started)
        await sandbox.close()
        await bench.settle(0)
        started = time.perf_counter()
        container = await bench.docker.run_ready(kind)
        took_docker = _elapsed(started)
        await bench.docker.remove([container])
        if i:
            cold.append(took)
            docker.append(took_docker)
        bench.progress.count(f"create {kind}: cold and docker run", i, n)
    return cold, docker


async def _warm(bench: Bench, platform: Platform, kind: str, n: int, *, idle: int) -> list[float]:
    warm: list[float] = []
    for i in range(n + 1):
        started = time.perf_counter()
        sandbox = await platform.client.create(kind=kind)
        took = _elapsed(started)
        await bench.settle(idle + 1)  # the pool has refilled
        await sandbox.close()
        await bench.settle(idle)
        if i:
            warm.append(took)
        bench.progress.count(f"create {kind}: warm pool", i, n)
    return warm


async def run(bench: Bench) -> SectionResult:
    counts = {"terminal": bench.options.create_samples, "desktop": bench.options.create_desktop_samples}
    cold, docker, warm = {}, {}, {}
    async with bench.platform("create-cold") as platform:
        for kind in KINDS:
            cold[kind], docker[kind] = await _cold_and_docker(bench, platform, kind, counts[kind])
    pools = [{"spec": {"kind": kind}, "min": 1, "max": 2, "max_starting": 1} for kind in KINDS]
    async with bench.platform("create-warm", {"pools": pools, "lifecycle": {"tick_s": 0.1}}) as platform:
        await bench.settle(len(KINDS))
        for kind in KINDS:
            warm[kind] = await _warm(bench, platform, kind, counts[kind], idle=len(KINDS))
    rows = []
    for kind in KINDS:
        base = Summary.of(docker[kind])
        cold_s, warm_s = Summary.of(cold[kind]), Summary.of(warm[kind])
        rows.append(
            Row(NAME, f"{kind}, cold", cold_s, base, READY[kind], speedup(base.p50, cold_s.p50)),
        )
        ratio = speedup(base.p50, warm_s.p50)
        target = Target(f"≥ {WARM_SPEEDUP:g}x docker run", ratio is not None and ratio >= WARM_SPEEDUP)
        rows.append(Row(NAME, f"{kind}, warm pool", warm_s, base, READY[kind], ratio, target))
    return SectionResult(rows, {"samples_s": {"cold": cold, "warm": warm, "docker_run": docker}})
