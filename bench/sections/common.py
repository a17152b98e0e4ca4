"""Timing helpers shared by the sections: sequential series and closed-loop load."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench import BenchError
from bench.progress import Progress
from sandbox.client import AsyncLane, AsyncSandbox, AsyncStepStream
from sandbox.models import Observation

EXEC_TRUE = {"type": "exec", "cmd": ["true"]}
"""One step: run ``true`` (no shell), the same command the ``docker exec`` baseline runs."""


async def series(
    progress: Progress,
    label: str,
    call: Callable[[], Awaitable[None]],
    n: int,
    warmup: int,
    *,
    pause_s: float = 0.0,
    before: Callable[[], Awaitable[None]] | None = None,
) -> list[float]:
    """``warmup`` untimed calls, then ``n`` timed ones, one at a time (``pause_s`` apart: a rollout's think time;
    ``before`` each one, untimed: an action whose effect the call then sees); the latencies in seconds."""
    for _ in range(warmup):
        if before is not None:
            await before()
        await call()
    samples = []
    for i in range(n):
        if pause_s:
            await asyncio.sleep(pause_s)
        if before is not None:
            await before()
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
        progress.count(label, i + 1, n)
    return samples


@dataclass(frozen=True)
class Load:
    latencies: list[float]
    """Of the calls that ended inside the measured window."""
    seconds: float
    calls: int = 0
    """Every call made, the warm-up's included."""

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds


async def closed_loop(call: Callable[[int], Awaitable[None]], workers: int, seconds: float, warmup_s: float) -> Load:
    """``workers`` loops calling ``call(worker)`` back to back for ``warmup_s + seconds``; counts the calls that end
    in the last ``seconds``."""
    started = time.perf_counter()
    window_start, window_end = started + warmup_s, started + warmup_s + seconds
    latencies: list[float] = []
    calls = 0

    async def loop(worker: int) -> None:
        nonlocal calls
        while time.perf_counter() < window_end:
            begun = time.perf_counter()
            await call(worker)
            calls += 1
            ended = time.perf_counter()
            if window_start <= ended <= window_end:
                latencies.append(ended - begun)

    await asyncio.gather(*(loop(w) for w in range(workers)))
    return Load(latencies, seconds, calls)


def check_exec(obs: Observation) -> None:
    if obs.exec is None or obs.exec.exit_code != 0:
        raise BenchError(f"a step of `true` did not succeed: {obs.exec}")


async def step_true(sandbox: AsyncSandbox) -> None:
    check_exec(await sandbox.step(EXEC_TRUE))


async def stream_true(stream: AsyncStepStream) -> None:
    check_exec(await stream.step(EXEC_TRUE))


async def lane_true(lane: AsyncLane) -> None:
    check_exec(await lane.step(EXEC_TRUE))


def require_lane(lane: AsyncLane) -> None:
    """A lane's rows measure the lane: one that fell back to the control plane is the bench's error, not a row."""
    if lane.info is None:
        raise BenchError("the SDK got no direct lane (docs/lanes.md): its steps went through the control plane")
