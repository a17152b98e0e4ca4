"""Direct lanes end to end on the fake backend (real agents as local processes, terminal sandboxes): ``OpenLane``
over gRPC and REST, steps over the lane with the SDK, the control plane reading the ledger into its metrics, recent
actions, output tail and idle clock, tenancy, a refused ticket, the ops a lane refuses, the reopen after a reset,
and an episode's steps going through the control plane. Real containers: ``tests/docker/test_lanes.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sandbox.client import AsyncClient, AsyncSandbox, Client, _ops
from sandbox.errors import FailedPrecondition, NotFound
from sandbox.models import LaneInfo
from sandbox.protocol import HELLO_OP
from sandbox.service import Principal, SandboxService
from sandbox.testing.lane_wire import exchange
from tests.unit.conftest import ALPHA, ALPHA_TOKEN
from tests.unit.service.test_episodes import TASK


@pytest_asyncio.fixture
async def sandbox(alpha: AsyncClient) -> AsyncIterator[AsyncSandbox]:
    async with await alpha.create("terminal", labels={"test": "lanes"}) as sb:
        yield sb


def lane_steps(service: SandboxService, outcome: str = "ok") -> float:
    return (
        service.metrics.registry.get_sample_value("sandbox_lane_steps_total", {"kind": "terminal", "outcome": outcome})
        or 0.0
    )


async def test_a_step_over_the_lane_is_seen_by_the_control_plane_a_round_later(
    sandbox: AsyncSandbox, service: SandboxService, alpha: AsyncClient
) -> None:
    before = lane_steps(service)
    async with sandbox.lane() as lane:
        obs = await lane.step({"type": "exec", "cmd": "echo over-the-lane; echo oops >&2; exit 3"})
        assert lane.info is not None and lane.info.address.startswith("unix:") and lane.info.actions == ["exec"]
    assert obs.exec is not None
    assert (obs.exec.exit_code, obs.exec.stdout, obs.exec.stderr) == (3, "over-the-lane\n", "oops\n")
    assert obs.timings_ms["total"] >= obs.timings_ms["action"] > 0
    idle_since = (await sandbox.refresh()).last_active_at
    await service.lanes.collect()
    assert lane_steps(service) == before + 1
    recent = await service.recent_actions(alpha_principal(service), sandbox.id)
    assert recent[-1]["action"]["cmd"] == "echo over-the-lane; echo oops >&2; exit 3"
    tail = await service.output_tail(alpha_principal(service), sandbox.id)
    assert tail[-4:] == ["$ echo over-the-lane; echo oops >&2; exit 3", "over-the-lane", "oops", "[exit 3]"]
    assert (await sandbox.refresh()).last_active_at >= idle_since


async def test_steps_the_lane_does_not_carry_go_through_the_control_plane(sandbox: AsyncSandbox) -> None:
    async with sandbox.lane() as lane:
        with pytest.raises(FailedPrecondition, match="no display"):  # as sb.step says it
            await lane.step({"type": "click", "x": 1, "y": 1})
        observed = await lane.observe()
        assert observed.screenshot is None  # a terminal's observe, from the control plane


async def test_another_tenants_sandbox_opens_no_lane(sandbox: AsyncSandbox, beta: AsyncClient) -> None:
    with pytest.raises(NotFound):
        await _open(beta, sandbox.id)
    with pytest.raises(NotFound):  # nor does its lane step go anywhere but to that refusal
        await AsyncSandbox(beta, sandbox.info).lane().step({"type": "exec", "cmd": "true"})


async def test_rest_opens_the_same_lane(sandbox: AsyncSandbox, api: Any) -> None:
    response = await api.post(f"/v1/sandboxes/{sandbox.id}/lane", headers=ALPHA)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["sandbox_id"] == sandbox.id and body["address"].startswith("unix:") and len(body["ticket"]) >= 40
    missing = await api.post("/v1/sandboxes/nope/lane", headers=ALPHA)
    assert missing.status_code == 404


async def test_a_wrong_ticket_is_refused_and_a_lane_reaches_no_other_op(sandbox: AsyncSandbox) -> None:
    async with sandbox.lane() as lane:
        await lane.step({"type": "exec", "cmd": "true"})
        assert lane.info is not None
        path = lane.info.address.removeprefix("unix:")
        ticket = lane.info.ticket
    refused = await asyncio.to_thread(exchange, path, [{"op": HELLO_OP, "args": {"lane": "not-" + ticket}}])
    assert refused[0]["ok"] is False and refused[0]["error"]["code"] == "unauthenticated"
    answers = await asyncio.to_thread(
        exchange,
        path,
        [
            {"op": HELLO_OP, "args": {"lane": ticket}},
            {"op": "file_read", "args": {"path": "/etc/passwd"}},
            {"op": "lane_grant", "args": {"digest": "00" * 32, "ttl_s": 60, "actions": ["exec"]}},
            {"op": "tunnel", "args": {"port": 5900}},
        ],
    )
    assert answers[0]["ok"] is True
    for answer in answers[1:]:
        assert answer["ok"] is False and "unknown op" in answer["error"]["message"]


async def test_after_a_reset_the_lane_opens_again_on_the_new_instance(
    sandbox: AsyncSandbox, service: SandboxService
) -> None:
    async with sandbox.lane() as lane:
        await lane.step({"type": "exec", "cmd": "echo one > /workspace/f"})
        first = lane.info
        await sandbox.reset()
        obs = await lane.step({"type": "exec", "cmd": "cat /workspace/f 2>/dev/null || echo gone"})
        assert obs.exec is not None and obs.exec.stdout == "gone\n"  # the reset's fresh file system
        assert lane.info is not None and first is not None and lane.info.ticket != first.ticket
        record = await service.records.read(sandbox.id)
        assert record is not None and service.lanes.has_lanes(sandbox.id)
        assert service.lanes._open[sandbox.id].instance == record.instance  # the new instance's lane is read


async def test_an_episodes_steps_go_through_the_control_plane(sandbox: AsyncSandbox, alpha: AsyncClient) -> None:
    async with sandbox.lane() as lane:
        await lane.step({"type": "exec", "cmd": "true"})
        assert lane.info is not None
        await sandbox.reset(task=TASK)
        obs = await lane.step({"type": "exec", "cmd": "echo hello > hello.txt"})
        assert lane.info is None  # refused while the episode runs
        assert obs.info["steps"] == 1 and obs.info["task_id"] == TASK["id"]  # counted by the episode
        with pytest.raises(FailedPrecondition, match="episode"):
            await _open(alpha, sandbox.id)


async def test_the_sync_lane_steps_too(target: str, sandbox: AsyncSandbox) -> None:
    def steps() -> tuple[str, str]:
        with Client(target, token=ALPHA_TOKEN, timeout=60) as client, client.get(sandbox.id).lane() as lane:
            first = lane.step({"type": "exec", "cmd": "echo sync"})
            second = lane.step({"type": "exec", "cmd": "echo again", "session": "s1"})
            assert lane.info is not None and first.exec is not None and second.exec is not None
            return first.exec.stdout, second.exec.stdout

    assert await asyncio.to_thread(steps) == ("sync\n", "again\n")


# ------------------------------------------------------------------------------------------- helpers


def alpha_principal(service: SandboxService) -> Principal:
    return Principal(tenant="alpha")


async def _open(client: AsyncClient, sandbox_id: str) -> LaneInfo:
    return await client._run(_ops.open_lane(sandbox_id))


async def test_a_lane_it_cannot_reach_leaves_the_steps_to_the_control_plane(
    sandbox: AsyncSandbox, service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def elsewhere(instance_id: str) -> str:
        return "unix:/nonexistent/lane.sock"  # as a Docker host's socket seen from another host

    monkeypatch.setattr(service.backend, "lane_address", elsewhere)
    async with sandbox.lane() as lane:
        obs = await lane.step({"type": "exec", "cmd": "echo through-the-api"})
        assert obs.exec is not None and obs.exec.stdout == "through-the-api\n"
        assert lane.info is None  # not asked again for REOPEN_AFTER_S
    recent = await service.recent_actions(alpha_principal(service), sandbox.id)
    assert recent[-1]["action"]["cmd"] == "echo through-the-api"  # the control plane's own step, seen at once


async def test_a_ledger_read_twice_at_once_counts_each_step_once(
    sandbox: AsyncSandbox, service: SandboxService
) -> None:
    """The collector and a reset's last read may ask at the same moment: each step is merged once."""
    before = lane_steps(service)
    async with sandbox.lane() as lane:
        await lane.step({"type": "exec", "cmd": "echo once"})
    record = await service.records.read(sandbox.id)
    assert record is not None
    await asyncio.gather(service.lanes.collect(), service.lanes.close_lanes(record), service.lanes.collect())
    assert lane_steps(service) == before + 1
    recent = await service.recent_actions(alpha_principal(service), sandbox.id)
    assert [a["action"]["cmd"] for a in recent].count("echo once") == 1
    assert not service.lanes.has_lanes(sandbox.id)
