"""Health reports see a dead agent, a dead X server and a dead browser."""

from __future__ import annotations

import asyncio

import pytest

from sandbox.backends.base import probe_health
from sandbox.errors import Unavailable
from sandbox.models import Health
from tests.conftest import Sandbox, SandboxFactory
from tests.polling import eventually

pytestmark = pytest.mark.docker


async def _pid_of(sb: object, name: str) -> int:
    result = await sb.agent.exec(["ps", "-C", name, "-o", "pid="])  # type: ignore[attr-defined]
    pids = result.stdout.split()
    assert pids, f"no {name} process in the sandbox"
    return int(pids[0])


async def _failing(sb: Sandbox, check: str) -> Health:
    """The health report once ``check`` fails (a process killed a moment ago may take a moment to be gone)."""
    reports: list[Health] = []

    async def failed() -> bool:
        reports.append(await probe_health(sb.backend, sb.id))
        return check in reports[-1].checks and not reports[-1].checks[check].ok

    await eventually(failed, 10, f"the {check} check failing")
    return reports[-1]


async def test_healthy_desktop_reports_every_probe(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop")
    health = await probe_health(sb.backend, sb.id)
    assert health.ok, health.failures
    assert {"container", "agent", "shell", "workspace", "x_server", "window_manager"} <= set(health.checks)


async def test_killing_xvfb_shows_in_health(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop")
    xvfb = await _pid_of(sb, "Xvfb")
    await sb.agent.exec(f"kill -9 {xvfb}")
    health = await _failing(sb, "x_server")
    assert not health.ok
    assert not health.checks["x_server"].ok, health.checks
    assert health.checks["agent"].ok and health.checks["shell"].ok


async def test_killing_the_agent_shows_in_health(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    with pytest.raises(Unavailable):  # the agent dies while answering
        await sb.agent.exec("kill -9 $PPID", timeout=5)
    health = await _failing(sb, "agent")
    assert not health.ok
    assert health.checks["container"].ok, "the container outlives its agent, so the death is visible"
    assert not health.checks["agent"].ok and "does not answer" in health.checks["agent"].detail


async def test_killing_the_browser_shows_in_health(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("browser")
    chromium = await sb.agent.exec("ps -eo pid=,args= | awk '$2 ~ /chromium$/ && !/--type=/ {print $1}'")
    pid = chromium.stdout.split()[0]
    await sb.agent.exec(f"kill -9 {pid}")
    health = await _failing(sb, "browser")
    assert not health.ok and not health.checks["browser"].ok, health.checks


async def test_a_stopped_container_shows_in_health(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    await asyncio.to_thread(lambda: sb.container().kill())
    health = await probe_health(sb.backend, sb.id)
    assert not health.ok and "exited" in health.checks["container"].detail
