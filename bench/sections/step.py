"""step: ``true`` run in a terminal sandbox through the SDK (a Step RPC, and a step over a StepStream) vs
``docker exec <the same container> true``: back to back, then both again with a pause between calls."""

from __future__ import annotations

from bench.harness import Bench, SectionResult
from bench.report import Row, Target
from bench.sections.common import series, step_true, stream_true
from bench.stats import Summary, speedup

NAME = "step"
SPEEDUP = 10.0
BASELINE = "docker exec true"


async def run(bench: Bench) -> SectionResult:
    n, warmup, pace = bench.options.step_samples, bench.options.step_warmup, bench.options.pace_ms / 1000
    progress = bench.progress
    paced: tuple[list[float], list[float]] | None = None
    async with bench.platform("step") as platform:
        sandbox = await platform.client.create(kind="terminal")
        container = await bench.container_of(sandbox)

        async def docker_exec() -> None:
            await bench.docker.exec(container, "true")

        step = await series(progress, "step: SDK Step", lambda: step_true(sandbox), n, warmup)
        async with sandbox.step_stream() as stream:
            streamed = await series(progress, "step: SDK StepStream", lambda: stream_true(stream), n, warmup)
        docker = await series(progress, "step: docker exec", docker_exec, n, warmup)
        if pace:
            paced = (
                await series(progress, "step: SDK Step, paced", lambda: step_true(sandbox), n, warmup, pause_s=pace),
                await series(progress, "step: docker exec, paced", docker_exec, n, warmup, pause_s=pace),
            )
        await sandbox.close()
    base = Summary.of(docker)
    over_stream = Summary.of(streamed)
    rows = [
        _row("exec `true`, SDK Step", Summary.of(step), base, BASELINE),
        Row(NAME, "exec `true`, SDK StepStream", over_stream, base, BASELINE, speedup(base.p50, over_stream.p50)),
    ]
    if paced is not None:
        label = f"{bench.options.pace_ms:g} ms apart"
        rows.append(_row(f"exec `true`, SDK Step, {label}", Summary.of(paced[0]), Summary.of(paced[1]), BASELINE))
    return SectionResult(rows)


def _row(name: str, ours: Summary, base: Summary, baseline: str) -> Row:
    ratio = speedup(base.p50, ours.p50)
    target = Target(f"≥ {SPEEDUP:g}x docker exec", ratio is not None and ratio >= SPEEDUP)
    return Row(NAME, name, ours, base, baseline, ratio, target)
