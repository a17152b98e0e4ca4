"""A fork bomb and a memory hog are stopped by the sandbox's own limits; nothing else suffers."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from tests.conftest import SandboxFactory

pytestmark = pytest.mark.docker


async def _answers_quickly(agent_exec: object, within: float = 5.0) -> float:
    started = time.monotonic()
    result = await asyncio.wait_for(agent_exec, within)  # type: ignore[arg-type]
    assert result.exit_code == 0 and result.stdout.strip() == "alive"
    return time.monotonic() - started


def _host_answers() -> None:
    started = time.monotonic()
    out = subprocess.run(["echo", "alive"], capture_output=True, text=True, timeout=5, check=True)
    assert out.stdout.strip() == "alive" and time.monotonic() - started < 5


async def test_fork_bomb_is_stopped_by_the_pids_limit(make_sandbox: SandboxFactory) -> None:
    victim = await make_sandbox("terminal", resources={"pids": 128, "cpus": 0.5})
    bystander = await make_sandbox("terminal")
    bomb = asyncio.create_task(victim.agent.exec("bomb() { bomb | bomb & }; bomb; sleep 8", timeout=8))
    await asyncio.sleep(2)
    await _answers_quickly(bystander.agent.exec("echo alive"))
    await asyncio.to_thread(_host_answers)
    pids = await asyncio.to_thread(lambda: victim.container().stats(stream=False)["pids_stats"].get("current", 0))
    assert pids <= 128, f"{pids} processes in a sandbox limited to 128"
    result = await bomb
    assert "Resource temporarily unavailable" in result.stderr, result.stderr[-500:]
    # The bomb is gone with its timeout, and the sandbox itself recovers.
    await asyncio.sleep(1)
    await _answers_quickly(victim.agent.exec("echo alive"), within=15)


async def test_memory_hog_is_killed_by_the_memory_limit(make_sandbox: SandboxFactory) -> None:
    victim = await make_sandbox("terminal", resources={"memory_mb": 200})
    bystander = await make_sandbox("terminal")
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 2**20))\n"
    started = time.monotonic()
    result = await victim.agent.exec(["python3", "-c", hog], timeout=60)
    assert result.exit_code == 137 and not result.timed_out, result
    assert time.monotonic() - started < 30
    await _answers_quickly(bystander.agent.exec("echo alive"))
    await _answers_quickly(victim.agent.exec("echo alive"))
    await asyncio.to_thread(_host_answers)
