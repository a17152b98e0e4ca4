"""step: ``true`` run in a terminal sandbox through the SDK (a Step RPC, a step over a StepStream, and a step over a
direct lane to the sandbox's agent, docs/lanes.md) vs
``docker exec <the same container> true``: back to back, then both again with a pause between calls.

And the floor under a step: a bare spawn of ``/bin/true`` in the same sandbox, each one timed by the shell loop that
starts it (``$EPOCHREALTIME`` before and after, no control plane, no agent). A step's p50 above that p50 is what the
step pays for besides starting its process: the SDK, gRPC, the control plane, the agent's framing and its spawn
path."""

from __future__ import annotations

from bench import BenchError
from bench.harness import Bench, SectionResult
from bench.report import Row, Target
from bench.sections.common import lane_true, require_lane, series, step_true, stream_true
from bench.stats import Summary, speedup

NAME = "step"
SPEEDUP = 10.0
BASELINE = "docker exec true"
OVER_SPAWN_TARGET_S = 0.001
SPAWN_BASELINE = "bare spawn of /bin/true in the sandbox"


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
        async with sandbox.lane() as lane:
            laned = await series(progress, "step: SDK direct lane", lambda: lane_true(lane), n, warmup)
            require_lane(lane)
        docker = await series(progress, "step: docker exec", docker_exec, n, warmup)
        progress.say(f"step: {n} bare spawns of /bin/true in the sandbox")
        spawns = await bare_spawns(bench, container, n, warmup)
        if pace:
            paced = (
                await series(progress, "step: SDK Step, paced", lambda: step_true(sandbox), n, warmup, pause_s=pace),
                await series(progress, "step: docker exec, paced", docker_exec, n, warmup, pause_s=pace),
            )
        await sandbox.close()
    base = Summary.of(docker)
    over_stream, over_lane = Summary.of(streamed), Summary.of(laned)
    rows = [
        _row("exec `true`, SDK Step", Summary.of(step), base, BASELINE),
        Row(NAME, "exec `true`, SDK StepStream", over_stream, base, BASELINE, speedup(base.p50, over_stream.p50)),
        Row(NAME, "exec `true`, SDK direct lane", over_lane, base, BASELINE, speedup(base.p50, over_lane.p50)),
        _over_spawn("exec `true`, SDK Step, vs a bare spawn", Summary.of(step), Summary.of(spawns)),
        _over_spawn("exec `true`, SDK StepStream, vs a bare spawn", over_stream, Summary.of(spawns)),
        _over_spawn("exec `true`, SDK direct lane, vs a bare spawn", over_lane, Summary.of(spawns)),
    ]
    if paced is not None:
        label = f"{bench.options.pace_ms:g} ms apart"
        rows.append(_row(f"exec `true`, SDK Step, {label}", Summary.of(paced[0]), Summary.of(paced[1]), BASELINE))
    return SectionResult(rows)


def _row(name: str, ours: Summary, base: Summary, baseline: str) -> Row:
    ratio = speedup(base.p50, ours.p50)
    target = Target(f"≥ {SPEEDUP:g}x docker exec", ratio is not None and ratio >= SPEEDUP)
    return Row(NAME, name, ours, base, baseline, ratio, target)


async def bare_spawns(bench: Bench, container: str, n: int, warmup: int) -> list[float]:
    """``n`` spawns of ``/bin/true`` one after another from a shell loop in ``container``, each timed on its own."""
    script = f"for i in $(seq {warmup + n}); do s=$EPOCHREALTIME; /bin/true; e=$EPOCHREALTIME; echo $s $e; done"
    done = await bench.docker("exec", container, "bash", "-c", script, timeout=300)
    pairs = [line.split() for line in done.stdout.splitlines()[warmup:]]
    if len(pairs) != n or any(len(p) != 2 for p in pairs):
        raise BenchError(f"the spawn loop printed {len(pairs)} timings, not {n}: {done.stdout[-200:]!r}")
    return [float(end) - float(start) for start, end in pairs]


def _over_spawn(name: str, ours: Summary, spawn: Summary) -> Row:
    over = ours.p50 - spawn.p50
    target = Target(f"p50 ≤ spawn + {OVER_SPAWN_TARGET_S * 1000:g} ms", over <= OVER_SPAWN_TARGET_S)
    note = f"{over * 1000:.2f} ms above the spawn's p50"
    return Row(NAME, name, ours, spawn, SPAWN_BASELINE, speedup(spawn.p50, ours.p50), target, note)
