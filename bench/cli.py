"""``python -m bench`` (``make bench``): run the sections, print the table, write the results.

A full run writes ``bench/results/latest.{json,md}`` (the markdown is the README's table); ``--quick`` writes
``quick.*``, and ``--only`` or a run that failed or was interrupted ``partial.*``: none of them replaces the table.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import FrameType
from typing import Any

from bench import BenchError
from bench.harness import Bench
from bench.machine import CpuMeter, Machine, describe
from bench.options import QUICK, SECTION_NAMES, Options, make_options
from bench.progress import Progress
from bench.report import Row, render_markdown, render_text
from bench.sections import SECTIONS
from sandbox.errors import SandboxError

_NOT_FLAGS = {"sections", "quick", "output", "keep_logs"}


@dataclass
class Outcome:
    started_at: str
    machine: Machine | None = None
    rows: list[Row] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    perturbed: dict[str, int] = field(default_factory=dict)
    """Sections during which other containers ran on the engine: how many, at most."""
    interrupted: bool = False


def _non_negative(kind: type[Any]) -> Callable[[str], Any]:
    """An argparse type: a count, a size or a duration, never below 0."""

    def convert(text: str) -> Any:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text} is negative")
        return value

    convert.__name__ = kind.__name__  # argparse names the type in its message for a value it cannot convert
    return convert


def parse(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Benchmarks of the platform against the docker CLI, side by side."
    )
    parser.add_argument("--quick", action="store_true", help="a 2-3 minute smoke run with small counts")
    parser.add_argument("--only", nargs="+", choices=SECTION_NAMES, metavar="SECTION", help=" ".join(SECTION_NAMES))
    parser.add_argument("--output", type=Path, default=None, help="results directory (default: bench/results)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the control planes' logs and state files")
    full = Options()
    for f in fields(Options):
        if f.name in _NOT_FLAGS:
            continue
        default = getattr(full, f.name)
        quick = QUICK.get(f.name, default)
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            type=_non_negative(type(default)),
            default=None,
            help=f"full: {default}, quick: {quick}",
        )
    args = vars(parser.parse_args(argv))
    quick = args.pop("quick")
    only = args.pop("only")
    args["sections"] = tuple(s for s in SECTION_NAMES if s in only) if only else None
    return make_options(quick=quick, overrides=args)


async def _run(bench: Bench, outcome: Outcome) -> None:
    outcome.machine = await asyncio.to_thread(describe)
    for name in bench.options.sections:
        bench.progress.say(f"== {name}")
        await _wait_quiet(bench)
        settled = await _wait_idle(bench)
        started = time.monotonic()
        before = {**await _environment(bench), **settled}
        try:
            result = await SECTIONS[name](bench)
        except (BenchError, SandboxError) as e:
            message = e.message if isinstance(e, SandboxError) else str(e)
            bench.progress.say(f"{name} FAILED: {message}")
            outcome.failures[name] = message
            bench.keep_workdir = True
            continue
        after = await _environment(bench)
        foreign = max(before["foreign_containers"], after["foreign_containers"])
        if foreign:
            outcome.perturbed[name] = int(foreign)
            bench.progress.say(f"note: {foreign} containers of others ran on this engine during {name}")
        outcome.rows += result.rows
        outcome.sections[name] = {
            **result.details,
            "seconds": round(time.monotonic() - started, 1),
            "environment": {"before": before, "after": after},
        }


async def _wait_quiet(bench: Bench) -> None:
    give_up = time.monotonic() + bench.options.quiet_wait_s
    while (foreign := await bench.foreign_containers()) and time.monotonic() < give_up:
        bench.progress.say(f"waiting for {foreign} containers of others to leave the engine")
        await asyncio.sleep(10)


async def _wait_idle(bench: Bench) -> dict[str, float]:
    """Wait, at most ``idle_wait_s``, until the machine is settled (under ``idle_busy_pct`` busy over a second):
    a section must not measure what the one before left running. The share last read, and how long it took."""
    options = bench.options
    if options.idle_wait_s <= 0:
        return {}
    started = time.monotonic()
    busy = await _busy_pct(1.0)
    if busy >= options.idle_busy_pct:
        bench.progress.say(f"waiting for the machine to settle: {busy:.0f}% busy")
    while busy >= options.idle_busy_pct and time.monotonic() - started < options.idle_wait_s:
        busy = await _busy_pct(1.0)
    if busy >= options.idle_busy_pct:
        bench.progress.say(f"the machine did not settle within {options.idle_wait_s:g} s ({busy:.0f}% busy)")
    return {"busy_pct": round(busy, 1), "settle_s": round(time.monotonic() - started, 1)}


async def _busy_pct(window_s: float) -> float:
    """The share of all the machine's cores busy over the next ``window_s`` seconds, in percent."""
    meter = CpuMeter({})
    await asyncio.to_thread(meter.start)
    await asyncio.sleep(window_s)
    return (await asyncio.to_thread(meter.read))["machine_busy_pct"]


async def _environment(bench: Bench) -> dict[str, float]:
    """What else loads the machine: other containers on the engine, the load average."""
    return {"foreign_containers": await bench.foreign_containers(), "loadavg_1m": os.getloadavg()[0]}


def _stem(options: Options, outcome: Outcome) -> str:
    """Only a full run of every section that ended well replaces ``latest``."""
    if options.quick:
        return "quick"
    complete = options.sections == SECTION_NAMES and not outcome.failures and not outcome.interrupted
    return "latest" if complete else "partial"


def _heading(outcome: Outcome, wall_s: float, options: Options) -> str:
    machine = outcome.machine.describe() if outcome.machine else "unknown machine"
    mode = "quick run" if options.quick else "full run" if options.sections == SECTION_NAMES else "partial run"
    heading = f"Benchmark ({mode}) of {outcome.started_at}, {wall_s / 60:.1f} min, on {machine}."
    if outcome.perturbed:
        during = ", ".join(f"{name} (up to {n})" for name, n in outcome.perturbed.items())
        heading += f" Other containers ran on the engine during: {during}; those numbers may be perturbed."
    return heading


def _write(outcome: Outcome, options: Options, run_id: str, wall_s: float) -> Path:
    options.output.mkdir(parents=True, exist_ok=True)
    stem = options.output / _stem(options, outcome)
    document = {
        "run_id": run_id,
        "started_at": outcome.started_at,
        "wall_s": round(wall_s, 1),
        "interrupted": outcome.interrupted,
        "machine": outcome.machine.to_json() if outcome.machine else None,
        "options": options.to_json(),
        "rows": [row.to_json() for row in outcome.rows],
        "sections": outcome.sections,
        "failures": outcome.failures,
        "perturbed": outcome.perturbed,
    }
    stem.with_suffix(".json").write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    markdown = render_markdown(outcome.rows, heading=_heading(outcome, wall_s, options))
    for name, message in outcome.failures.items():
        markdown += f"\n**{name} failed**: {message}\n"
    stem.with_suffix(".md").write_text(markdown)
    return stem


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> None:
    options = parse(argv)
    progress = Progress()
    bench = Bench(options, progress)
    outcome = Outcome(started_at=datetime.datetime.now().astimezone().isoformat(timespec="seconds"))
    progress.say(f"run {bench.run_id}: {' '.join(options.sections)}; everything it makes carries "
                 f"sandbox.owner={bench.owner}")  # fmt: skip
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    try:
        asyncio.run(_run(bench, outcome))
    except KeyboardInterrupt:
        outcome.interrupted = True
        progress.say("interrupted: cleaning up")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # clean-up runs to its end
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        bench.close()
    wall_s = time.monotonic() - started
    stem = _write(outcome, options, bench.run_id, wall_s)
    print(_heading(outcome, wall_s, options) + "\n")
    print(render_text(outcome.rows))
    for name, message in outcome.failures.items():
        print(f"{name} FAILED: {message}")
    progress.say(f"results in {stem}.json and {stem}.md")
    sys.exit(130 if outcome.interrupted else 1 if outcome.failures else 0)
