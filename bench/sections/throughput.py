"""throughput: steps per second over N terminal sandboxes from one AsyncClient (one closed loop per sandbox) vs N
concurrent ``docker exec <container> true`` loops over the same containers, each for the same time after a warm-up."""

from __future__ import annotations

import asyncio

from bench.harness import Bench, SectionResult
from bench.report import Row
from bench.sections.common import closed_loop, step_true
from bench.stats import Summary, Value, gain, speedup
from sandbox.client import AsyncSandbox

NAME = "throughput"
WARMUP_S = 1.0
CREATE_CONCURRENCY = 4


async def run(bench: Bench) -> SectionResult:
    n, seconds = bench.options.throughput_sandboxes, bench.options.throughput_seconds
    progress = bench.progress
    async with bench.platform("throughput") as platform:
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def create() -> AsyncSandbox:
            async with gate:
                return await platform.client.create(kind="terminal")

        sandboxes = await asyncio.gather(*(create() for _ in range(n)))
        containers = await asyncio.gather(*(bench.container_of(s) for s in sandboxes))
        progress.say(f"throughput: {n} sandboxes, SDK steps for {seconds:g} s")
        ours = await closed_loop(lambda i: step_true(sandboxes[i]), n, seconds, WARMUP_S)
        progress.say(f"throughput: {ours.rate:.0f} steps/s; docker exec for {seconds:g} s")
        docker = await closed_loop(lambda i: bench.docker.exec(containers[i], "true"), n, seconds, WARMUP_S)
        progress.say(f"throughput: docker exec {docker.rate:.1f}/s")
        await asyncio.gather(*(s.close() for s in sandboxes))
    our_rate = Value(ours.rate, "steps/s", n=len(ours.latencies))
    base_rate = Value(docker.rate, "execs/s", n=len(docker.latencies))
    our_lat, base_lat = Summary.of(ours.latencies), Summary.of(docker.latencies)
    loops = f"{n} docker exec loops"
    rows = [
        Row(NAME, f"{n} terminals, 1 AsyncClient", our_rate, base_rate, loops, gain(ours.rate, docker.rate)),
        Row(NAME, "step latency under that load", our_lat, base_lat, loops, speedup(base_lat.p50, our_lat.p50)),
    ]
    return SectionResult(rows, {"seconds": seconds, "sandboxes": n})
