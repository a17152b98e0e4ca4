"""The agent's side of direct lanes (``sandbox/agent/lanes.py``), with stand-in ops: grants (digest, lifetime,
actions), what a step is refused for, and the ledger the control plane reads (order, ``after``, ``dropped``)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from sandbox.agent import lanes as lanes_module
from sandbox.agent.errors import AgentError
from sandbox.agent.lanes import Lanes
from sandbox.protocol import ErrorCode

TICKET = "a-ticket-of-forty-three-characters-0123456"


def digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


class Ops:
    """The agent ops a lane step calls, noting what they were asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def exec(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        self.calls.append(("exec", args))
        if args["cmd"] == "boom":
            raise AgentError(ErrorCode.BAD_REQUEST, "no such command")
        return {"exit_code": 0, "stdout_bytes": 3, "timed_out": False, "duration_ms": 1.5}, b"hi\nerr"

    async def action(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        self.calls.append(("action", args))
        return {"cursor": [3, 4]}, b""

    async def screenshot(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        self.calls.append(("screenshot", args))
        return {"width": 2, "height": 1, "format": "png"}, b"PNG"

    def table(self) -> dict[str, Any]:
        return {"exec": self.exec, "action": self.action, "screenshot": self.screenshot}


@pytest.fixture
def ops() -> Ops:
    return Ops()


@pytest.fixture
async def lanes(ops: Ops) -> Lanes:
    lanes = Lanes(ops.table())
    await lanes.grant({"digest": digest(TICKET), "ttl_s": 60, "actions": ["exec", "click"]}, b"")
    return lanes


async def test_a_granted_ticket_opens_a_lane_and_no_other_does(lanes: Lanes) -> None:
    assert lanes.admits(TICKET)
    for wrong in (TICKET + "x", "", None, 42, TICKET.upper()):
        assert not lanes.admits(wrong)


async def test_a_step_runs_its_command_and_a_screenshot_after_it_in_one_answer(lanes: Lanes, ops: Ops) -> None:
    step = lanes.stepper(TICKET)
    action = {"type": "exec", "cmd": "echo hi", "timeout": 5, "unknown": 1}
    result, blob = await step({"action": action, "screenshot": {"format": "png", "quality": 80}}, b"")
    assert ops.calls == [("exec", {"cmd": "echo hi", "timeout": 5}), ("screenshot", {"format": "png", "quality": 80})]
    assert result["exec"]["stdout_bytes"] == 3 and result["screenshot"]["offset"] == len(b"hi\nerr")
    assert blob == b"hi\nerrPNG"


async def test_a_computer_action_goes_to_the_display_with_its_cursor_back(lanes: Lanes, ops: Ops) -> None:
    result, blob = await lanes.stepper(TICKET)({"action": {"type": "click", "x": 3, "y": 4}}, b"")
    assert ops.calls == [("action", {"action": {"type": "click", "x": 3, "y": 4}})]
    assert result["cursor"] == [3, 4] and blob == b""


async def test_an_action_outside_the_grant_is_refused_before_anything_runs(lanes: Lanes, ops: Ops) -> None:
    with pytest.raises(AgentError) as refused:
        await lanes.stepper(TICKET)({"action": {"type": "navigate", "url": "about:blank"}}, b"")
    assert refused.value.code == ErrorCode.BAD_REQUEST and "control plane" in refused.value.message
    assert ops.calls == []


async def test_revoked_and_expired_lanes_refuse_their_steps(lanes: Lanes, ops: Ops, monkeypatch: Any) -> None:
    step = lanes.stepper(TICKET)  # a connection opened before the revoke
    assert (await lanes.revoke({}, b""))[0] == {"revoked": 1, "connections": 0}
    with pytest.raises(AgentError) as refused:
        await step({"action": {"type": "exec", "cmd": "true"}}, b"")
    assert refused.value.code == ErrorCode.UNAUTHENTICATED and not lanes.admits(TICKET)
    await lanes.grant({"digest": digest(TICKET), "ttl_s": 60, "actions": ["exec"]}, b"")
    clock = lanes_module.time.monotonic() + 61
    monkeypatch.setattr(lanes_module.time, "monotonic", lambda: clock)
    assert not lanes.admits(TICKET)
    with pytest.raises(AgentError):
        await step({"action": {"type": "exec", "cmd": "true"}}, b"")
    assert ops.calls == []


@pytest.mark.parametrize(
    "bad",
    [
        {"digest": "zz", "ttl_s": 60, "actions": []},
        {"digest": "ab", "ttl_s": 60, "actions": []},
        {"digest": digest(TICKET), "ttl_s": 0, "actions": []},
        {"digest": digest(TICKET), "ttl_s": True, "actions": []},
        {"digest": digest(TICKET), "ttl_s": 60, "actions": "exec"},
    ],
)
async def test_a_malformed_grant_is_refused(ops: Ops, bad: dict[str, Any]) -> None:
    with pytest.raises(AgentError) as refused:
        await Lanes(ops.table()).grant(bad, b"")
    assert refused.value.code == ErrorCode.BAD_REQUEST


async def test_the_ledger_says_every_step_in_order_failed_ones_too(lanes: Lanes) -> None:
    step = lanes.stepper(TICKET)
    await step({"action": {"type": "exec", "cmd": "echo hi"}}, b"")
    with pytest.raises(AgentError):
        await step({"action": {"type": "exec", "cmd": "boom"}}, b"")
    await step({"screenshot": {"format": "png"}}, b"")
    report, _ = await lanes.report({"after": 0}, b"")
    assert report["seq"] == 3 and report["dropped"] == 0
    first, failed, observed = report["steps"]
    assert [s["seq"] for s in report["steps"]] == [1, 2, 3]
    assert first["action"]["cmd"] == "echo hi"
    assert (first["exec"]["stdout"], first["exec"]["stderr"], first["exec"]["exit_code"]) == ("hi\n", "err", 0)
    assert failed["error"] == ErrorCode.BAD_REQUEST and "exec" not in failed
    assert observed["action"] is None and observed["ms"] >= 0
    again, _ = await lanes.report({"after": 2}, b"")
    assert [s["seq"] for s in again["steps"]] == [3] and again["dropped"] == 0


async def test_the_ledger_counts_what_it_no_longer_holds(lanes: Lanes, monkeypatch: Any) -> None:
    monkeypatch.setattr(lanes_module, "LEDGER_STEPS", 2)
    step = lanes.stepper(TICKET)
    for _ in range(5):
        await step({"action": {"type": "exec", "cmd": "true"}}, b"")
    report, _ = await lanes.report({"after": 1}, b"")
    assert [s["seq"] for s in report["steps"]] == [4, 5] and report["dropped"] == 2


async def test_the_ledger_keeps_to_its_byte_budget(lanes: Lanes, monkeypatch: Any) -> None:
    """Large actions (a long text typed) push the oldest steps out, counted as dropped, never the newest."""
    monkeypatch.setattr(lanes_module, "LEDGER_BYTES", 10_000)
    step = lanes.stepper(TICKET)
    for _ in range(10):
        await step({"action": {"type": "exec", "cmd": "x" * 3000}}, b"")
    report, _ = await lanes.report({"after": 0}, b"")
    assert [s["seq"] for s in report["steps"]] == [8, 9, 10] and report["dropped"] == 7


async def test_a_grant_past_the_limit_replaces_the_one_closest_to_expiring(ops: Ops, monkeypatch: Any) -> None:
    monkeypatch.setattr(lanes_module, "MAX_GRANTS", 2)
    lanes = Lanes(ops.table())
    for ticket, ttl in (("first", 10), ("second", 60), ("third", 30)):
        await lanes.grant({"digest": digest(ticket), "ttl_s": ttl, "actions": ["exec"]}, b"")
    assert [lanes.admits(t) for t in ("first", "second", "third")] == [False, True, True]
