"""tasks: a reset to a task that swaps in a warm replica of its post-setup snapshot, vs the first reset to it, which
runs its setup and takes that snapshot; and the rate of ``sandbox demo``'s scripted episodes.

- **Reset to a task.** For a terminal task (``terminal-json-config``: a download and a command) and a desktop task
  (``desktop-xterm-hello``: a command, then an app launched and its window activated, steps that run again after
  every swap since a snapshot keeps no memory). The setup path is timed on copies of the task whose first command
  differs (``true # <n>``), so each one is new to the platform; their snapshots are deleted at once. The warm path
  resets one sandbox to the task again and again, the platform settled between resets (the replica refilled).
- **Demo.** :func:`sandbox.cli.demo.run_demo` over the sample tasks with their reference solutions, 4 at a time,
  after one untimed pass that makes every task's snapshot: episodes/s and steps/s, the share that scored 1.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench import BenchError
from bench.harness import QUIET_S, Bench, Platform, SectionResult
from bench.report import Row, Target
from bench.stats import Summary, Value, speedup
from sandbox.cli.demo import load_scripted, run_demo
from sandbox.tasks.model import Task

NAME = "tasks"
TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
RESET_TASKS = {"terminal": "terminal-json-config.json", "desktop": "desktop-xterm-hello.json"}
WARM = 1
CONCURRENCY = 4
BASELINE = "first reset: setup run + snapshot"


def _variant(task: Task, n: int) -> Task:
    """The task with a first command of its own: new to the platform, so its reset runs the setup."""
    data = task.to_dict()
    data["id"] = f"{task.id}-bench-{n}"
    data["config"] = [{"type": "execute", "parameters": {"command": f"true # bench {n}", "shell": True}},
                      *data.get("config", [])]  # fmt: skip
    return Task.from_dict(data, fixtures=task.fixtures)


async def _settle(bench: Bench, expected: int, timeout: float = 180) -> None:
    """Wait until ``expected`` instances run, every one healthy (the warm replica refilled). Like ``bench.settle``,
    but blind to the socket root's dot-folders (``.claims``), which are no instances."""
    give_up = time.monotonic() + timeout
    while True:
        names = [n for n in await bench.instances() if not n.startswith(".")]
        if len(names) == expected and all([await bench._healthy(n) for n in names]):
            await asyncio.sleep(QUIET_S)
            return
        if time.monotonic() > give_up:
            raise BenchError(f"the platform did not settle at {expected} instances in {timeout:g} s: {names}")
        await asyncio.sleep(0.1)


async def _drop_snapshots(platform: Platform, keep: set[str]) -> None:
    for snapshot in await platform.client.snapshots():
        if snapshot.name not in keep:
            await platform.client.delete_snapshot(snapshot.name)


async def _reset_rows(bench: Bench, platform: Platform, kind: str, n_setup: int, n_warm: int) -> tuple[Row, dict]:
    task = Task.from_file(TASKS_DIR / RESET_TASKS[kind])
    sandbox = await platform.client.create(kind, labels={"bench": NAME})
    setup: list[float] = []
    warm: list[float] = []
    swapped = 0
    try:
        for i in range(n_setup):
            started = time.perf_counter()
            obs = await sandbox.reset(task=_variant(task, i))
            setup.append(time.perf_counter() - started)
            if not obs.info.get("setup_ran"):
                raise BenchError(f"a reset to a new variant of {task.id} did not run its setup: {obs.info}")
            await _drop_snapshots(platform, set())
            bench.progress.count(f"tasks {kind}: setup", i + 1, n_setup)
        await sandbox.reset(task=task)  # makes the task's snapshot and its warm replica
        keep = {s.name for s in await platform.client.snapshots()}
        for i in range(n_warm + 1):  # the first one warms up
            # The replica queued in its pool first: until the instance the last reset swapped out is gone, it
            # and the sandbox make up the count while the new replica is still starting.
            await bench.pool_full(platform, WARM * len(keep))
            await _settle(bench, 1 + WARM * len(keep))
            started = time.perf_counter()
            obs = await sandbox.reset(task=task)
            took = time.perf_counter() - started
            if i:
                warm.append(took)
                swapped += obs.info.get("snapshot") is not None
            bench.progress.count(f"tasks {kind}: warm", i, n_warm)
    finally:
        await sandbox.close()
        await _drop_snapshots(platform, set())
    ours, base = Summary.of(warm), Summary.of(setup)
    note = f"{task.id}; snapshot swapped in {swapped}/{n_warm}"
    row = Row(NAME, f"reset to a {kind} task, warm", ours, base, BASELINE, speedup(base.p50, ours.p50), None, note)
    return row, {"samples_s": {"warm": warm, "setup": setup}, "swapped": swapped}


async def _demo_row(bench: Bench, platform: Platform, kinds: set[str] | None, label: str) -> tuple[Row, dict]:
    plan = load_scripted(TASKS_DIR, kinds)
    if not plan:
        raise BenchError(f"no sample tasks with solutions in {TASKS_DIR}")
    bench.progress.say(f"tasks: demo warm-up pass over {len(plan)} {label} tasks")
    await run_demo(platform.client, plan, episodes=len(plan), concurrency=CONCURRENCY)
    episodes = len(plan) * bench.options.tasks_demo_passes
    stats = await run_demo(platform.client, plan, episodes=episodes, concurrency=CONCURRENCY)
    if stats.errors:
        raise BenchError(f"demo episodes failed: {stats.errors[:3]}")
    target = Target("every episode reward 1", stats.successes == stats.episodes)
    note = f"{stats.steps_per_s:.1f} steps/s; {stats.successes}/{stats.episodes} reward 1"
    value = Value(round(stats.episodes_per_s, 2), "episodes/s", n=stats.episodes)
    row = Row(NAME, f"demo: {label} sample tasks, {CONCURRENCY} at a time", value, target=target, note=note)
    details = {
        "episodes": stats.episodes, "wall_s": stats.wall_s, "steps": stats.steps, "successes": stats.successes,
        "step_s": stats.step_s, "reset_warm_s": stats.reset_warm_s, "reset_setup_s": stats.reset_setup_s,
    }  # fmt: skip
    return row, details


async def run(bench: Bench) -> SectionResult:
    options = bench.options
    rows: list[Row] = []
    details: dict[str, Any] = {}
    settings = {"lifecycle": {"tick_s": 0.1}, "tasks": {"warm_per_task": WARM}}
    async with bench.platform(NAME, settings) as platform:
        for kind in RESET_TASKS:
            row, detail = await _reset_rows(bench, platform, kind, options.tasks_setup_samples, options.tasks_samples)
            rows.append(row)
            details[f"reset_{kind}"] = detail
        for label, kinds in (("terminal", {"terminal"}), ("all", None)):
            if kinds is None and options.quick:
                continue  # a quick run times the terminal tasks only
            row, detail = await _demo_row(bench, platform, kinds, label)
            rows.append(row)
            details[f"demo_{label}"] = detail
    return SectionResult(rows, details)
