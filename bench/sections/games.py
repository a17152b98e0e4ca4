"""games: how densely game rollouts pack. One browser sandbox hosts ``games_pages`` game sessions, one page each
with its own paused clock (``page_open``); every page plays one scripted episode at the same time through the SDK,
half of them Reflex (step the clock 250 ms, read ``game.state()``, click the first target, until the game's 8 s are
up), half Tiles (an arrow key and a state read, 60 times). Reported: episodes per second, the latency of those
steps, and the sandbox's memory (its cgroup's, less inactive file pages, as ``docker stats`` counts it) before the
pages opened and with all of them open: game sessions per sandbox and per GiB.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench import BenchError
from bench.harness import Bench, SectionResult
from bench.machine import GIB, MIB
from bench.report import Row
from bench.stats import Summary, Value
from sandbox.client import AsyncSandbox
from sandbox.games import GAMES, STATE_JS

NAME = "games"
REFLEX_MS = 8000
REFLEX_STEP_MS = 250
TILES_MOVES = 60
TILES_KEYS = ("ArrowDown", "ArrowLeft", "ArrowDown", "ArrowRight")
MEMORY_PY = """
import pathlib
def read(p):
    f = pathlib.Path('/sys/fs/cgroup', p)
    return f.read_text() if f.exists() else None
v2 = read('memory.current')
usage = int(v2) if v2 is not None else int(read('memory/memory.usage_in_bytes'))
stat = dict(line.split() for line in (read('memory.stat') or read('memory/memory.stat')).splitlines())
print(usage - int(stat.get('inactive_file', stat.get('total_inactive_file', 0))))
"""


async def _memory(sandbox: AsyncSandbox) -> int:
    """The sandbox's memory in bytes, as ``docker stats`` counts it (cgroup v1 or v2)."""
    result = await sandbox.exec(["python3", "-c", MEMORY_PY])
    if not result.ok:
        raise BenchError(f"cannot read the sandbox's memory: {result.stderr.strip()}")
    return int(result.stdout)


async def _timed(sandbox: AsyncSandbox, action: dict[str, Any], latencies: list[float]) -> Any:
    started = time.perf_counter()
    obs = await sandbox.step(action)
    latencies.append(time.perf_counter() - started)
    return obs.value


async def _reflex(sandbox: AsyncSandbox, page: str, latencies: list[float]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for _ in range(REFLEX_MS // REFLEX_STEP_MS):
        await _timed(sandbox, {"type": "clock", "op": "step", "ms": REFLEX_STEP_MS, "page": page}, latencies)
        state = await _timed(sandbox, {"type": "evaluate", "expression": STATE_JS, "page": page}, latencies)
        if state["targets"]:
            target = state["targets"][0]
            click = {"type": "page_click", "x": target["x"], "y": target["y"], "page": page}
            await _timed(sandbox, click, latencies)
    if not state.get("over"):
        raise BenchError(f"a Reflex episode did not end after {REFLEX_MS} ms of its clock: {state}")
    return state


async def _tiles(sandbox: AsyncSandbox, page: str, latencies: list[float]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for i in range(TILES_MOVES):
        await _timed(sandbox, {"type": "page_key", "key": TILES_KEYS[i % len(TILES_KEYS)], "page": page}, latencies)
        state = await _timed(sandbox, {"type": "evaluate", "expression": STATE_JS, "page": page}, latencies)
    return state


async def run(bench: Bench) -> SectionResult:
    pages = bench.options.games_pages
    progress = bench.progress
    latencies: list[float] = []
    async with bench.platform("games") as platform:
        sandbox = await platform.client.create(kind="browser")
        idle = await _memory(sandbox)
        opened: list[tuple[str, str]] = []
        started = time.perf_counter()
        for i in range(pages):
            name = "reflex" if i % 2 == 0 else "tiles"
            params = {"duration": REFLEX_MS} if name == "reflex" else {}
            url = GAMES[name].url(seed=i + 1, **params)
            obs = await sandbox.step({"type": "page_open", "url": url, "clock": "paused"})
            opened.append((name, obs.value["page"]))
            progress.count("games: pages opened", i + 1, pages)
        open_s = (time.perf_counter() - started) / pages
        held = await _memory(sandbox)
        started = time.perf_counter()
        finals = await asyncio.gather(
            *((_reflex if name == "reflex" else _tiles)(sandbox, page, latencies) for name, page in opened)
        )
        elapsed = time.perf_counter() - started
        after = await _memory(sandbox)
        await sandbox.close()
    per_page = max(held, after) - idle
    peak = max(held, after)
    idle_mib = f"{idle / MIB:.0f}"
    rows = [
        Row(
            NAME,
            f"{pages} game episodes at once in one browser sandbox",
            Value(pages / elapsed, "episodes/s", pages),
            note="every page shares the sandbox's CPU quota (1 CPU by default): the bound on these two rows",
        ),
        Row(NAME, "a game step (clock step, state read, key or click) during them", Summary.of(latencies)),
        Row(NAME, "page_open of a game, paused clock", Value(open_s * 1000, "ms", pages)),
        Row(NAME, "game sessions per browser sandbox", Value(pages, "sessions"), note="all played at once"),
        Row(NAME, f"browser sandbox memory with {pages} game pages", Value(peak / MIB, "MiB", pages)),
        Row(NAME, "memory per game page", Value(per_page / pages / MIB, "MiB", pages), note=f"idle: {idle_mib} MiB"),
        Row(NAME, "game sessions per GiB", Value(pages / (peak / GIB), "sessions/GiB", pages)),
    ]
    details = {
        "pages": pages,
        "memory_bytes": {"idle": idle, "pages_open": held, "after_episodes": after},
        "episode_s": elapsed,
        "scores": [f.get("score") for f in finals],
    }
    return SectionResult(rows, details)
