"""reset: back to a snapshot through the SDK vs ``docker rm -f`` and ``docker run`` of the image to ready.

The snapshot keeps one warm replica (``warm=1``); between resets the platform settles, i.e. the pool has refilled
(a reset every few seconds per sandbox, as in rollouts). Each reset is checked: the sandbox must now run on the
instance that was the warm replica (the fast path), and the first one must show the snapshot's file, not the later
change.
"""

from __future__ import annotations

import time

from bench import BenchError
from bench.harness import Bench, Platform, SectionResult
from bench.report import Row, Target
from bench.stats import Summary, speedup
from sandbox.client import AsyncSandbox

NAME = "reset"
TARGET_S = {"terminal": ("p50", 0.150), "desktop": ("p99", 0.050)}
"""Per kind: the percentile held to a bound (a desktop's reset is bounded at p99, as rollouts wait on the slowest)."""
WARM = 1
BASELINE = {"terminal": "docker rm -f + run → exec true", "desktop": "docker rm -f + run → WM up"}


async def _instance(sandbox: AsyncSandbox) -> str:
    return (await sandbox.exec(["printenv", "SANDBOX_INSTANCE_ID"])).stdout.strip()


async def _measure(bench: Bench, platform: Platform, kind: str, n: int) -> tuple[list[float], list[float], int]:
    sandbox = await platform.client.create(kind=kind)
    await sandbox.files.write("state.txt", "snapshot")
    snapshot = f"bench-{kind}"
    await sandbox.snapshot(snapshot, warm=WARM)
    await sandbox.files.write("state.txt", "changed later")
    await bench.settle(1 + WARM)
    container = await bench.docker.run_ready(kind)
    ours: list[float] = []
    docker: list[float] = []
    fast = 0
    for i in range(n + 1):  # the first pair warms up
        held = await _instance(sandbox)
        warm = set(await bench.instances()) - {held}
        started = time.perf_counter()
        await sandbox.reset(snapshot=snapshot)
        took = time.perf_counter() - started
        fast += await _instance(sandbox) in warm
        if i == 0 and (content := await sandbox.files.read("state.txt")) != b"snapshot":
            raise BenchError(f"after a reset to {snapshot}, state.txt holds {content!r}")
        await bench.settle(1 + WARM)
        started = time.perf_counter()
        await bench.docker.remove([container])
        container = await bench.docker.run_ready(kind)
        took_docker = time.perf_counter() - started
        if i:
            ours.append(took)
            docker.append(took_docker)
        bench.progress.count(f"reset {kind}: snapshot and docker rm+run", i, n)
    await bench.docker.remove([container])
    await sandbox.close()
    await platform.client.delete_snapshot(snapshot)
    await bench.settle(0)
    return ours, docker, fast


async def run(bench: Bench) -> SectionResult:
    counts = {"terminal": bench.options.reset_samples, "desktop": bench.options.reset_desktop_samples}
    rows, details = [], {}
    async with bench.platform("reset", {"lifecycle": {"tick_s": 0.1}}) as platform:
        for kind, (percentile, limit) in TARGET_S.items():
            ours, docker, fast = await _measure(bench, platform, kind, counts[kind])
            our, base = Summary.of(ours), Summary.of(docker)
            measured = our.p99 if percentile == "p99" else our.p50
            target = Target(f"{percentile} ≤ {limit * 1000:.0f} ms", measured <= limit)
            note = f"warm replica used {fast}/{counts[kind] + 1}"
            ratio = speedup(base.p50, our.p50)
            rows.append(Row(NAME, f"{kind} to a snapshot", our, base, BASELINE[kind], ratio, target, note))
            details[kind] = {"samples_s": {"ours": ours, "docker": docker}, "warm_replica_used": fast}
    return SectionResult(rows, details)
