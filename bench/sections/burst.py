"""burst: many creates at once against a warm pool that holds one terminal for each of them, vs as many
``docker run`` of the same image to ready at once (what a user would script).

The control plane keeps a pool of ``burst_size`` terminals. Once it is full and the platform is quiet, a few
creates one at a time (the pool refilled between them) give the unloaded cost of a claim; then ``burst_rounds``
times, ``burst_size`` creates are sent at once and each one's latency is timed from the same start. The async SDK
sends such creates (one spec, the same turn of the event loop) as one call, each made on its own
(``sandbox/client/_creates.py``); the same bursts are timed again with each create its own ``CreateSandbox`` call,
as before it did, to show what the calls themselves cost. Between
rounds the sandboxes are deleted and the pool refills. The pool's refill starts during a burst are part of what
the claims compete with (as in production). The baseline starts ``burst_size`` containers at once and times each
to its first successful ``docker exec true``.

The same pool then serves ``burst_rounds`` rollout groups: ``burst_size`` sandboxes in one ``create_group`` call,
timed as that call (every sandbox of a group is ready when it returns).

Then the same bursts against control planes sharing one Redis (``burst_replicas``): one of them (the store's own
cost beside the embedded one), then the burst spread over ``burst_replicas`` of them, each create sent through the
next one's client in turn — what scaling the control plane out gives a burst on this machine.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.harness import Bench, Platform, SectionResult
from bench.report import Row, Target
from bench.stats import Summary, speedup
from sandbox.client import AsyncSandbox, _ops

NAME = "burst"
P99_TARGET_S = 0.050
SEQUENTIAL_SAMPLES = 8
BASELINE = "docker run → exec true ok, as many at once"


async def _timed_create(platform: Platform, started: float, *, own_call: bool) -> tuple[AsyncSandbox, float]:
    if own_call:  # the SDK's coalescing bypassed: one CreateSandbox RPC
        client = platform.client
        sandbox = AsyncSandbox(client, await client._run(_ops.create("terminal", {})))
    else:
        sandbox = await platform.client.create(kind="terminal")
    return sandbox, time.perf_counter() - started


async def _sequential(bench: Bench, platform: Platform, n: int, size: int) -> list[float]:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        sandbox = await platform.client.create(kind="terminal")
        samples.append(time.perf_counter() - started)
        await bench.settle(size + 1)  # refilled: the next claim sees the same full pool
        await sandbox.close()
        await bench.settle(size)
        await bench.pool_full(platform, size)
        bench.progress.count("burst: one at a time", i + 1, n)
    return samples


async def _burst(platforms: list[Platform], size: int, *, own_calls: bool = False) -> list[float]:
    started = time.perf_counter()
    creates = (_timed_create(platforms[i % len(platforms)], started, own_call=own_calls) for i in range(size))
    done = await asyncio.gather(*creates)
    await asyncio.gather(*(sandbox.close() for sandbox, _ in done))
    return [took for _, took in done]


async def _rounds(
    bench: Bench, platforms: list[Platform], label: str, *, own_calls: bool = False
) -> tuple[list[float], list[dict[str, float]]]:
    """``burst_rounds`` bursts against the warm pool (full when this starts), refilled between them."""
    size = bench.options.burst_size
    samples: list[float] = []
    per_round: list[dict[str, float]] = []
    for r in range(bench.options.burst_rounds):
        took = await _burst(platforms, size, own_calls=own_calls)
        samples += took
        summary = Summary.of(took)
        per_round.append({"p50_s": summary.p50, "p99_s": summary.p99, "max_s": summary.max})
        bench.progress.say(
            f"burst {r + 1}/{bench.options.burst_rounds} ({label}): {size} creates at once, "
            f"p50 {summary.p50 * 1000:.1f} ms, p99 {summary.p99 * 1000:.1f} ms"
        )
        await bench.settle(size, timeout=600)
        await bench.pool_full(platforms[0], size)
    return samples, per_round


async def _groups(bench: Bench, platform: Platform) -> list[float]:
    """``burst_rounds`` groups of ``burst_size`` from the warm pool, one call each, refilled between them."""
    size, samples = bench.options.burst_size, []
    for r in range(bench.options.burst_rounds):
        started = time.perf_counter()
        group = await platform.client.create_group(size, "terminal")
        samples.append(time.perf_counter() - started)
        await asyncio.gather(*(sandbox.close() for sandbox in group))
        bench.progress.say(
            f"group {r + 1}/{bench.options.burst_rounds}: {size} in one call, {samples[-1] * 1000:.1f} ms"
        )
        await bench.settle(size, timeout=600)
        await bench.pool_full(platform, size)
    return samples


async def _on_redis(
    bench: Bench, settings: dict[str, Any], replicas: int
) -> tuple[list[float], list[dict[str, float]]]:
    label = f"{replicas} replica{'s' if replicas > 1 else ''} on Redis"
    async with bench.replicas("burst-redis", replicas, settings) as platforms:
        bench.progress.say(f"burst: warming a pool of {bench.options.burst_size} terminals ({label})")
        await bench.settle(bench.options.burst_size, timeout=600)
        await bench.pool_full(platforms[0], bench.options.burst_size)
        return await _rounds(bench, platforms, label)


async def _docker_burst(bench: Bench, size: int) -> list[float]:
    started = time.perf_counter()

    async def one() -> tuple[str, float]:
        container = await bench.docker.run_ready("terminal")
        return container, time.perf_counter() - started

    done = await asyncio.gather(*(one() for _ in range(size)), return_exceptions=True)
    made = [d[0] for d in done if isinstance(d, tuple)]
    await bench.docker.remove(made)
    failed = [d for d in done if isinstance(d, BaseException)]
    if failed:
        raise failed[0]
    return [d[1] for d in done if isinstance(d, tuple)]


async def run(bench: Bench) -> SectionResult:
    size, replicas = bench.options.burst_size, bench.options.burst_replicas
    pool = {"spec": {"kind": "terminal"}, "min": size, "max": size, "max_starting": 8}
    settings = {"pools": [pool]}  # the lifecycle at its defaults
    rounds: dict[str, list[dict[str, float]]] = {}
    async with bench.platform("burst", settings) as platform:
        bench.progress.say(f"burst: warming a pool of {size} terminals")
        await bench.settle(size, timeout=600)
        await bench.pool_full(platform, size)
        one_at_a_time = await _sequential(bench, platform, SEQUENTIAL_SAMPLES, size)
        burst, rounds["embedded"] = await _rounds(bench, [platform], "one control plane")
        label = "one control plane, each create its own call"
        own_calls, rounds["own_calls"] = await _rounds(bench, [platform], label, own_calls=True)
        groups = await _groups(bench, platform)
    on_redis: dict[int, list[float]] = {}
    for count in sorted({1, replicas}) if replicas else ():
        on_redis[count], rounds[f"redis_{count}"] = await _on_redis(bench, settings, count)
    bench.progress.say(f"burst: {size} docker run at once")
    docker = await _docker_burst(bench, size)
    ours, base, single = Summary.of(burst), Summary.of(docker), Summary.of(one_at_a_time)
    grouped = Summary.of(groups)
    target = Target(f"p99 ≤ {P99_TARGET_S * 1000:g} ms", ours.p99 <= P99_TARGET_S)
    rows = [
        Row(NAME, f"{size} creates at once, warm pool of {size}", ours, base, BASELINE,
            speedup(base.p50, ours.p50), target),
        Row(NAME, f"{size} creates at once, each its own CreateSandbox call (the SDK's coalescing bypassed)",
            Summary.of(own_calls), base, BASELINE, speedup(base.p50, Summary.of(own_calls).p50)),
        Row(NAME, "one create at a time, same pool", single, base, BASELINE, speedup(base.p50, single.p50)),
        Row(NAME, f"{size} in one create_group call (a rollout group), same pool", grouped, base, BASELINE,
            speedup(base.p50, grouped.p50), Target(f"p99 ≤ {P99_TARGET_S * 1000:g} ms", grouped.p99 <= P99_TARGET_S)),
    ]  # fmt: skip
    for count, took in on_redis.items():
        spread = f"{count} control planes on one Redis, {size // count} through each" if count > 1 else "on Redis"
        summary = Summary.of(took)
        ratio = speedup(base.p50, summary.p50)
        rows.append(Row(NAME, f"{size} creates at once, {spread}", summary, base, BASELINE, ratio))
    samples = {
        "burst": burst,
        "own_calls": own_calls,
        "groups": groups,
        "docker": docker,
        **{f"redis_{count}": took for count, took in on_redis.items()},
    }
    return SectionResult(rows, {"size": size, "rounds": rounds, "samples_s": samples})
