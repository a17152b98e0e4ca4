"""Concurrent creates of one spec from one ``AsyncClient`` go as one ``CreateSandboxes`` call with ``each`` set
(``sandbox/client/_creates.py``), each made and answered on its own: through the SDK on the fake backend (one call,
distinct sandboxes, one failing create failing only its caller), and the coalescer alone (who gets what, a cancelled
caller's sandbox deleted, a whole call's failure, a single create sent as itself)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandbox.capacity.admission import Grant
from sandbox.client import AsyncClient, _ops
from sandbox.client._creates import CreateCoalescer
from sandbox.errors import InvalidArgument, ResourceExhausted, SandboxError, Unavailable
from sandbox.models import SandboxInfo, SandboxKind, SandboxSpec, SandboxState
from sandbox.service import SandboxService
from sandbox.service.auth import Principal

ALICE = Principal("alpha")


def calls_of(client: AsyncClient, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The RPCs the client makes from now on, by method."""
    made: list[str] = []
    perform = client._perform

    async def spy(call: _ops.Call) -> Any:
        made.append(call.method)
        return await perform(call)

    monkeypatch.setattr(client, "_perform", spy)
    return made


async def test_creates_started_together_go_as_one_call_each_its_own_sandbox(
    alpha: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = calls_of(alpha, monkeypatch)
    made = await asyncio.gather(*(alpha.create("terminal", labels={"t": "together"}) for _ in range(6)))
    try:
        assert calls == ["CreateSandboxes"]
        assert len({sb.id for sb in made}) == 6
        for i, sb in enumerate(made):
            assert sb.info.spec.labels == {"t": "together"} and sb.info.state is SandboxState.RUNNING
            assert (await sb.exec(f"echo {i}")).stdout == f"{i}\n"
    finally:
        await asyncio.gather(*(sb.close() for sb in made))


async def test_a_lone_create_other_specs_and_waits_go_as_their_own_calls(
    alpha: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = calls_of(alpha, monkeypatch)
    lone = await alpha.create("terminal")
    mixed = await asyncio.gather(
        alpha.create("terminal", labels={"t": "a"}),
        alpha.create("terminal", labels={"t": "b"}),
        alpha.create("terminal", labels={"t": "a"}, wait_s=5),
    )
    try:
        assert calls[0] == "CreateSandbox"  # alone: as itself
        assert sorted(calls[1:]) == ["CreateSandbox", "CreateSandbox", "CreateSandbox"]  # no two of one spec, no wait
    finally:
        await asyncio.gather(lone.close(), *(sb.close() for sb in mixed))


async def test_a_bad_spec_fails_its_caller_before_any_call(alpha: AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = calls_of(alpha, monkeypatch)
    with pytest.raises(InvalidArgument, match="screen"):
        await alpha.create("desktop", screen={"width": -1, "height": 10})
    assert calls == []


async def test_one_failing_create_fails_only_its_caller(
    service: SandboxService, alpha: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each create is its own: unlike create_group, a failure takes no other sandbox with it."""
    real_create = service.leases._create
    calls = 0

    async def second_fails(principal: Principal, spec: SandboxSpec, image: str, grant: Grant) -> SandboxInfo:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise Unavailable("the engine did not answer (forced by the test)")
        return await real_create(principal, spec, image, grant)

    monkeypatch.setattr(service.leases, "_create", second_fails)
    outcomes = await asyncio.gather(
        *(alpha.create("terminal", labels={"t": "each"}) for _ in range(4)), return_exceptions=True
    )
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    made = [o for o in outcomes if not isinstance(o, BaseException)]
    try:
        assert len(failed) == 1 and isinstance(failed[0], Unavailable) and "forced by the test" in str(failed[0])
        assert len(made) == 3 and all(sb.info.state is SandboxState.RUNNING for sb in made)
    finally:
        await asyncio.gather(*(sb.close() for sb in made))


async def test_the_server_refuses_a_wait_for_creates_made_each(service: SandboxService) -> None:
    with pytest.raises(InvalidArgument, match="wait_s must be 0"):
        await service.create_each(ALICE, SandboxSpec(kind="terminal"), 2, wait_s=1)


# ------------------------------------------------------------------------------------------- the coalescer alone


def info(n: int) -> SandboxInfo:
    spec = SandboxSpec(kind=SandboxKind.TERMINAL)
    return SandboxInfo(
        id=f"sb-{n}", tenant="t", kind=spec.kind, state=SandboxState.RUNNING, spec=spec,
        created_at=0, last_active_at=0, expires_at=0,
    )  # fmt: skip


class Server:
    def __init__(self, outcomes: list[SandboxInfo | SandboxError] | Exception, *, hold: asyncio.Event | None = None):
        self.outcomes = outcomes
        self.hold = hold
        self.each_calls: list[int] = []
        self.one_calls = 0
        self.deleted: list[str] = []

    async def each(self, count: int, spec: SandboxSpec) -> list[SandboxInfo | SandboxError]:
        self.each_calls.append(count)
        if self.hold is not None:
            await self.hold.wait()
        if isinstance(self.outcomes, Exception):
            raise self.outcomes
        return self.outcomes[:count]

    async def one(self, spec: SandboxSpec) -> SandboxInfo:
        self.one_calls += 1
        return info(99)

    async def delete(self, sandbox_id: str) -> None:
        self.deleted.append(sandbox_id)

    def coalescer(self) -> CreateCoalescer:
        return CreateCoalescer(each=self.each, one=self.one, delete=self.delete)


SPEC = SandboxSpec(kind=SandboxKind.TERMINAL)


async def test_each_caller_gets_its_own_outcome_in_order() -> None:
    server = Server([info(0), ResourceExhausted("no room for this one"), info(2)])
    outcomes = await asyncio.gather(*(server.coalescer().create(SPEC) for _ in range(1)), return_exceptions=True)
    assert outcomes == [info(99)] and server.one_calls == 1 and server.each_calls == []
    coalescer = server.coalescer()
    outcomes = await asyncio.gather(*(coalescer.create(SPEC) for _ in range(3)), return_exceptions=True)
    assert server.each_calls == [3]
    assert outcomes[0] == info(0) and outcomes[2] == info(2)
    assert isinstance(outcomes[1], ResourceExhausted) and "no room" in outcomes[1].message


async def test_a_caller_that_gives_up_leaves_no_sandbox() -> None:
    hold = asyncio.Event()
    server = Server([info(0), info(1)], hold=hold)
    coalescer = server.coalescer()
    kept, given_up = asyncio.ensure_future(coalescer.create(SPEC)), asyncio.ensure_future(coalescer.create(SPEC))
    await asyncio.sleep(0.01)
    given_up.cancel()
    hold.set()
    assert await kept == info(0)
    with pytest.raises(asyncio.CancelledError):
        await given_up
    await coalescer.close()
    assert server.deleted == ["sb-1"]


async def test_a_whole_call_that_fails_fails_every_caller() -> None:
    server = Server(Unavailable("the control plane is gone"))
    coalescer = server.coalescer()
    outcomes = await asyncio.gather(*(coalescer.create(SPEC) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(o, Unavailable) for o in outcomes)
