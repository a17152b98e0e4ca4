"""osworld: OSWorld's own harness on the platform — ``DesktopEnv.reset`` to a task and one ``step`` through it —
beside the platform's own reset to the same task and the same step through the SDK.

The harness runs in .venv-osworld (``python -m sandbox.compat.osworld --bench N``): its ``reset`` is the platform's
reset (``revert_to_snapshot``), the in-VM API coming up again, and OSWorld's setup controller running the task's
``config`` over HTTP through the preview forwarders; its ``step`` is OSWorld's ``/execute`` of the pyautogui code in
the sandbox. The platform's own path is ``sandbox.reset(task=...)`` (its post-setup snapshot swapped in, the
window steps run again) and ``sandbox.step(code)``. Skipped, with the reason printed, without .venv-osworld
(``bash scripts/venv_osworld.sh``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from bench import BenchError
from bench.harness import Bench, SectionResult
from bench.report import Row
from bench.stats import Summary, speedup

NAME = "osworld"
ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-osworld" / "bin" / "python"
TASK = ROOT / "tasks" / "osworld" / "osworld-rename-draft.json"
BASELINE_RESET = "the platform: sandbox.reset(task=)"
BASELINE_STEP = "the platform: sandbox.step(code)"
ACTION = "pyautogui.typewrite('ls\\n')"
"""The step timed on both paths: a command typed into the task's terminal."""
HARNESS_TIMEOUT_S = 900


def _harness(target: str, samples: int) -> dict[str, Any]:
    argv = [str(VENV_PYTHON), "-m", "sandbox.compat.osworld", "--target", target, "--bench", str(samples)]
    argv += ["--bench-action", ACTION, str(TASK)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=HARNESS_TIMEOUT_S, cwd=ROOT, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    found = [line for line in lines if "bench" in line]
    if done.returncode != 0 or not found:
        raise BenchError(f"the OSWorld harness failed ({done.returncode}): {done.stderr[-1500:]}")
    return found[0]


async def run(bench: Bench) -> SectionResult:
    """Register with ``"osworld": osworld.run`` in bench/sections/__init__.py and ``"osworld"`` in SECTION_NAMES."""
    progress = bench.progress
    if not VENV_PYTHON.exists():
        reason = f"skipped: {VENV_PYTHON} is missing (bash scripts/venv_osworld.sh makes it)"
        progress.say(f"osworld: {reason}")
        return SectionResult([], {"skipped": reason})
    samples = 3 if bench.options.quick else 10
    async with bench.platform("osworld") as platform:
        progress.say(f"osworld: {samples} resets + steps through OSWorld's DesktopEnv")
        harness = await asyncio.to_thread(_harness, platform.server.grpc_target, samples)
        progress.say(f"osworld: {samples} resets + steps through the SDK")
        sandbox = await platform.client.create(kind="desktop")
        ours_reset, ours_step = [], []
        try:
            await sandbox.reset(task=TASK)  # the first reset runs the setup and takes the task's snapshot
            for _ in range(samples):
                started = asyncio.get_running_loop().time()
                await sandbox.reset(task=TASK)
                ours_reset.append(asyncio.get_running_loop().time() - started)
                started = asyncio.get_running_loop().time()
                await sandbox.step(ACTION)
                ours_step.append(asyncio.get_running_loop().time() - started)
        finally:
            await sandbox.close()
    h_reset, h_step = Summary.of(harness["reset_s"]), Summary.of(harness["step_s"])
    p_reset, p_step = Summary.of(ours_reset), Summary.of(ours_step)
    rows = [
        Row(NAME, "DesktopEnv.reset(task) through the harness", h_reset, p_reset, BASELINE_RESET,
            speedup(p_reset.p50, h_reset.p50), note="revert (platform reset) + OSWorld's setup controller over HTTP"),
        Row(NAME, "DesktopEnv.step(pyautogui) through the harness", h_step, p_step, BASELINE_STEP,
            speedup(p_step.p50, h_step.p50), note="OSWorld's /execute starts a python3 with pyautogui per step"),
    ]  # fmt: skip
    return SectionResult(rows, {"task": harness["bench"], "action": harness["action"]})
