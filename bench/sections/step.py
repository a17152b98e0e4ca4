"""step: ``true`` run in a terminal sandbox through the SDK (a Step RPC, and a step over a StepStream) vs
``docker exec <the same container> true``."""

from __future__ import annotations

from bench.harness import Bench, SectionResult
from bench.report import Row, Target
from bench.sections.common import series, step_true, stream_true
from bench.stats import Summary, speedup

NAME = "step"
SPEEDUP = 10.0
BASELINE = "docker exec true"


async def run(bench: Bench) -> SectionResult:
    n, warmup = bench.options.step_samples, bench.options.step_warmup
    progress = bench.progress
    async with bench.platform("step") as platform:
        sandbox = await platform.client.create(kind="terminal")
        container = await bench.container_of(sandbox)
        step = await series(progress, "step: SDK Step", lambda: step_true(sandbox), n, warmup)
        async with sandbox.step_stream() as stream:
            streamed = await series(progress, "step: SDK StepStream", lambda: stream_true(stream), n, warmup)
        docker = await series(progress, "step: docker exec", lambda: bench.docker.exec(container, "true"), n, warmup)
        await sandbox.close()
    base = Summary.of(docker)
    ours, over_stream = Summary.of(step), Summary.of(streamed)
    ratio = speedup(base.p50, ours.p50)
    target = Target(f"≥ {SPEEDUP:g}x docker exec", ratio is not None and ratio >= SPEEDUP)
    rows = [
        Row(NAME, "exec `true`, SDK Step", ours, base, BASELINE, ratio, target),
        Row(NAME, "exec `true`, SDK StepStream", over_stream, base, BASELINE, speedup(base.p50, over_stream.p50)),
    ]
    return SectionResult(rows)
