"""throughput: steps per second over N terminal sandboxes from one AsyncClient (one closed loop per sandbox) vs N
concurrent ``docker exec <container> true`` loops over the same containers, each for the same time after a warm-up.

Then, over the same sandboxes:

- steps that start no process: ``:`` (a shell builtin) in a persistent shell session of each sandbox, one closed
  loop per sandbox, each on a ``StepStream`` - what the control plane and the agent cost per step, with no spawn;
- the same two kinds of step batched: each sandbox's step in one ``step_many`` call (gRPC ``StepMany``, a vectorized
  environment's step), in two closed loops over half the sandboxes each - what the API's per-call work costs;
- the same two kinds of step over direct lanes (docs/lanes.md: the SDK to each sandbox's agent, the control plane
  out of the path), one closed loop per sandbox;
- the machine's own spawn limit: one ``docker exec <container> bash -c 'for i in $(seq K); do /bin/true; done'``
  in every sandbox at once, no control plane in the way (K per sandbox; spawns/s = all spawns / the slowest loop's
  time). Exec steps/s (above) as a fraction of it says how much of the machine's spawning a step of ``true`` gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from bench import BenchError
from bench.harness import Bench, SectionResult
from bench.report import Row, Target
from bench.sections.common import EXEC_TRUE, Load, check_exec, closed_loop, lane_true, require_lane, step_true
from bench.stats import Summary, Value, gain, speedup
from bench.step_cpu import CpuSplit, StepCpuMeter
from sandbox.client import AsyncClient, AsyncLane, AsyncSandbox, AsyncStepStream
from sandbox.models import Observation

Check = Callable[[Observation], None]
NAME = "throughput"
WARMUP_S = 1.0
CREATE_CONCURRENCY = 4
NO_SPAWN = {"type": "exec", "cmd": ":", "session": "bench"}
"""A step that starts no process: a builtin in the sandbox's persistent shell session."""
NO_SPAWN_TARGET = 2000.0
SPAWN_FRACTION_TARGET = 0.5
BATCH_LOOPS = 2
"""Closed loops of ``step_many`` calls, each over its share of the sandboxes: two, so that one batch's work in the
client and the control plane overlaps the other's steps in the sandboxes."""


def _cpu_rows(what: str, split: CpuSplit | None, steps: int) -> list[Row]:
    """CPU per step, all told, with each part's share in the note (none when the cgroups cannot be read)."""
    if split is None or steps == 0:
        return []
    total = Value(1000 * split.total / steps, "ms CPU", n=steps)
    return [Row(NAME, f"CPU per {what}, all processes", total, note=split.describe(steps))]


def _batch_rows(
    n: int,
    exec_rate: float,
    exec_calls: Load,
    quiet_rate: float,
    quiet_calls: Load,
    limit: Value,
    loops: str,
    spawns: float,
) -> list[Row]:
    per_call = f"{n // BATCH_LOOPS} a StepMany call, {BATCH_LOOPS} loops"
    exec_fraction = exec_rate / spawns if spawns > 0 else 0.0
    return [
        Row(NAME, f"exec steps of `true` batched ({per_call}) vs the spawn limit",
            Value(exec_rate, "steps/s", n=len(exec_calls.latencies)), limit, loops, exec_fraction,
            Target(f"≥ {SPAWN_FRACTION_TARGET:.0%} of the limit", exec_fraction >= SPAWN_FRACTION_TARGET)),
        Row(NAME, f"no-spawn steps batched ({per_call})", Value(quiet_rate, "steps/s", n=len(quiet_calls.latencies)),
            limit, loops, gain(quiet_rate, spawns),
            Target(f"≥ {NO_SPAWN_TARGET:,.0f} steps/s", quiet_rate >= NO_SPAWN_TARGET)),
        Row(NAME, "a batched call's latency (no-spawn steps)", Summary.of(quiet_calls.latencies)),
    ]  # fmt: skip


def _lane_rows(n: int, laned: Load, quiet: Load, limit: Value, loops: str, spawns: float) -> list[Row]:
    fraction = laned.rate / spawns if spawns > 0 else 0.0
    return [
        Row(NAME, f"exec steps of `true` over {n} direct lanes vs the spawn limit",
            Value(laned.rate, "steps/s", n=len(laned.latencies)), limit, loops, fraction,
            Target(f"≥ {SPAWN_FRACTION_TARGET:.0%} of the limit", fraction >= SPAWN_FRACTION_TARGET)),
        Row(NAME, f"no-spawn steps over {n} direct lanes", Value(quiet.rate, "steps/s", n=len(quiet.latencies)),
            limit, loops, gain(quiet.rate, spawns),
            Target(f"≥ {NO_SPAWN_TARGET:,.0f} steps/s", quiet.rate >= NO_SPAWN_TARGET)),
        Row(NAME, "no-spawn step latency over lanes under that load", Summary.of(quiet.latencies)),
    ]  # fmt: skip


def _check_no_spawn(obs: Observation) -> None:
    if obs.exec is None or obs.exec.exit_code != 0:
        raise RuntimeError(f"a step of `:` in a session did not succeed: {obs.exec}")


async def _batched(
    client: AsyncClient, sandboxes: list[AsyncSandbox], action: Mapping[str, Any], check: Check, seconds: float
) -> tuple[float, Load]:
    """Steps/s when each of :data:`BATCH_LOOPS` loops steps its share of ``sandboxes`` in one call; and the calls."""
    shares = [share for share in (sandboxes[i::BATCH_LOOPS] for i in range(BATCH_LOOPS)) if share]

    async def batch(loop: int) -> None:
        for outcome in await client.step_many([(sb, action) for sb in shares[loop]]):
            if not isinstance(outcome, Observation):
                raise BenchError(f"a batched step failed: {outcome}")
            check(outcome)

    load = await closed_loop(batch, len(shares), seconds, WARMUP_S)
    return load.rate * len(sandboxes) / len(shares), load


async def _spawn_limit(bench: Bench, containers: list[str], per_container: int) -> tuple[float, float]:
    """Spawns/s of ``/bin/true`` from a shell loop in every container at once; and the slowest loop's seconds."""
    script = f"for i in $(seq {per_container}); do /bin/true; done"

    async def loop(container: str) -> float:
        started = time.perf_counter()
        await bench.docker("exec", container, "bash", "-c", script, timeout=600)
        return time.perf_counter() - started

    await asyncio.gather(*(bench.docker("exec", c, "bash", "-c", "for i in $(seq 20); do /bin/true; done")
                           for c in containers))  # fmt: skip
    took = await asyncio.gather(*(loop(c) for c in containers))
    slowest = max(took)
    return per_container * len(containers) / slowest, slowest


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
        meter = StepCpuMeter(platform.server.pid, containers)
        meter.start()
        ours = await closed_loop(lambda i: step_true(sandboxes[i]), n, seconds, WARMUP_S)
        exec_cpu = meter.stop()
        progress.say(f"throughput: {ours.rate:.0f} steps/s; docker exec for {seconds:g} s")
        docker = await closed_loop(lambda i: bench.docker.exec(containers[i], "true"), n, seconds, WARMUP_S)
        progress.say(f"throughput: docker exec {docker.rate:.1f}/s; steps in a shell session for {seconds:g} s")
        async with contextlib.AsyncExitStack() as stack:
            streams: list[AsyncStepStream] = [await stack.enter_async_context(s.step_stream()) for s in sandboxes]

            async def no_spawn(i: int) -> None:
                _check_no_spawn(await streams[i].step(NO_SPAWN))

            meter.start()
            quiet = await closed_loop(no_spawn, n, seconds, WARMUP_S)
            quiet_cpu = meter.stop()
        progress.say(f"throughput: {quiet.rate:.0f} no-spawn steps/s; the same steps batched for {seconds:g} s")
        client = platform.client
        meter.start()
        batched_quiet, quiet_calls = await _batched(client, sandboxes, NO_SPAWN, _check_no_spawn, seconds)
        batched_quiet_cpu = meter.stop()
        meter.start()
        batched_exec, exec_calls = await _batched(client, sandboxes, EXEC_TRUE, check_exec, seconds)
        batched_exec_cpu = meter.stop()
        progress.say(f"throughput: batched {batched_quiet:.0f} no-spawn, {batched_exec:.0f} exec steps/s; lanes")
        async with contextlib.AsyncExitStack() as stack:
            lanes: list[AsyncLane] = [await stack.enter_async_context(s.lane()) for s in sandboxes]

            async def lane_quiet(i: int) -> None:
                _check_no_spawn(await lanes[i].step(NO_SPAWN))

            meter.start()
            laned = await closed_loop(lambda i: lane_true(lanes[i]), n, seconds, WARMUP_S)
            lane_exec_cpu = meter.stop()
            meter.start()
            lane_quiet_load = await closed_loop(lane_quiet, n, seconds, WARMUP_S)
            lane_quiet_cpu = meter.stop()
            for lane in lanes:
                require_lane(lane)
        progress.say(
            f"throughput: lanes {laned.rate:.0f} exec, {lane_quiet_load.rate:.0f} no-spawn steps/s; spawn limit"
        )
        per_container = bench.options.spawn_loop_count
        spawns, slowest = await _spawn_limit(bench, containers, per_container)
        progress.say(f"throughput: {spawns:.0f} spawns/s ({per_container} per sandbox, slowest {slowest:.1f} s)")
        await asyncio.gather(*(s.close() for s in sandboxes))
    our_rate = Value(ours.rate, "steps/s", n=len(ours.latencies))
    base_rate = Value(docker.rate, "execs/s", n=len(docker.latencies))
    our_lat, base_lat = Summary.of(ours.latencies), Summary.of(docker.latencies)
    quiet_lat = Summary.of(quiet.latencies)
    loops = f"{n} docker exec loops"
    limit = Value(spawns, "spawns/s", n=per_container * n)
    spawn_loops = f"{n} shell loops of /bin/true"
    fraction = ours.rate / spawns if spawns > 0 else 0.0
    rows = [
        Row(NAME, f"{n} terminals, 1 AsyncClient", our_rate, base_rate, loops, gain(ours.rate, docker.rate)),
        Row(NAME, "step latency under that load", our_lat, base_lat, loops, speedup(base_lat.p50, our_lat.p50)),
        Row(NAME, "those exec steps vs the spawn limit in the same sandboxes", our_rate, limit, spawn_loops,
            fraction, Target(f"≥ {SPAWN_FRACTION_TARGET:.0%} of the limit", fraction >= SPAWN_FRACTION_TARGET)),
        Row(NAME, f"no-spawn steps (`:` in a shell session), {n} StepStreams",
            Value(quiet.rate, "steps/s", n=len(quiet.latencies)), limit, spawn_loops, gain(quiet.rate, spawns),
            Target(f"≥ {NO_SPAWN_TARGET:,.0f} steps/s", quiet.rate >= NO_SPAWN_TARGET)),
        Row(NAME, "no-spawn step latency under that load", quiet_lat),
        *_batch_rows(n, batched_exec, exec_calls, batched_quiet, quiet_calls, limit, spawn_loops, spawns),
        *_lane_rows(n, laned, lane_quiet_load, limit, spawn_loops, spawns),
        *_cpu_rows("exec step of `true`", exec_cpu, ours.calls),
        *_cpu_rows("no-spawn step", quiet_cpu, quiet.calls),
        *_cpu_rows("batched exec step of `true`", batched_exec_cpu, exec_calls.calls * n // BATCH_LOOPS),
        *_cpu_rows("batched no-spawn step", batched_quiet_cpu, quiet_calls.calls * n // BATCH_LOOPS),
        *_cpu_rows("exec step of `true` over a lane", lane_exec_cpu, laned.calls),
        *_cpu_rows("no-spawn step over a lane", lane_quiet_cpu, lane_quiet_load.calls),
    ]  # fmt: skip
    details = {
        "seconds": seconds,
        "sandboxes": n,
        "spawn_limit": {"per_sandbox": per_container, "spawns_per_s": spawns, "slowest_s": slowest},
    }
    return SectionResult(rows, details)
