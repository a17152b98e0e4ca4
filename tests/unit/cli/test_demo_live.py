"""`sandbox demo live` without a server: what it makes (all three or none), what it holds (renewed leases, a sandbox
deleted elsewhere dropped) and that it deletes everything it made when told to stop. The real server's path is
tests/docker/test_demo_live.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.cli import demo as cli_demo
from sandbox.errors import NotFound, ResourceExhausted, Unavailable
from sandbox.games import GAMES


class FakeSandbox:
    def __init__(self, kind: str, number: int) -> None:
        self.id = f"sb-{kind[:4]}-{number}"
        self.info = SimpleNamespace(kind=SimpleNamespace(value=kind))
        self.steps: list[dict[str, Any]] = []
        self.renewals: list[float | None] = []
        self.closed = False
        self.gone = False
        self.undeletable = False
        self.renewed = asyncio.Event()

    async def step(self, action: dict[str, Any]) -> None:
        self.steps.append(action)

    async def exec(self, cmd: str) -> None:
        self.steps.append({"type": "exec", "cmd": cmd})

    async def renew(self, ttl_s: float | None = None) -> None:
        if self.gone:
            raise NotFound(f"no sandbox {self.id}")
        self.renewals.append(ttl_s)
        self.renewed.set()

    async def renewed_times(self, count: int) -> None:
        while len(self.renewals) < count:
            self.renewed.clear()
            await self.renewed.wait()

    async def close(self) -> None:
        if self.undeletable:
            raise Unavailable("no control plane answers")
        self.closed = True


class FakeClient:
    """What ``live_session`` calls of an ``AsyncClient``."""

    def __init__(self, refuse: str | None = None) -> None:
        self.refuse = refuse
        self.made: list[FakeSandbox] = []
        self.specs: list[dict[str, Any]] = []
        self.all_made = asyncio.Event()

    async def create(self, kind: str, **spec: Any) -> FakeSandbox:
        await asyncio.sleep(0)
        if kind == self.refuse:
            raise ResourceExhausted(f"no room for a {kind}")
        self.specs.append(spec)
        self.made.append(FakeSandbox(kind, len(self.made)))
        if len(self.made) == len(cli_demo.LIVE_KINDS):
            self.all_made.set()
        return self.made[-1]


def _kind(sandbox: FakeSandbox) -> str:
    return str(sandbox.info.kind.value)


def fake(refuse: str | None = None) -> Any:
    return FakeClient(refuse)


async def test_it_makes_a_desktop_a_browser_showing_the_game_and_a_terminal_and_deletes_them_at_stop() -> None:
    client, stop = fake(), asyncio.Event()
    session = asyncio.create_task(cli_demo.live_session(client, stop, renew_s=0.01))
    await asyncio.wait_for(client.all_made.wait(), 5)
    await asyncio.wait_for(asyncio.gather(*(sb.renewed_times(1) for sb in client.made)), 5)
    assert sorted(sb.info.kind.value for sb in client.made) == ["browser", "desktop", "terminal"]
    assert not any(sb.closed for sb in client.made)
    assert all(spec["labels"] == {"sandbox.demo": "live"} for spec in client.specs)
    assert all(spec["ttl_s"] == cli_demo.LIVE_LEASE_S for spec in client.specs), "a killed holder's expire"
    assert all(sb.renewals[0] == cli_demo.LIVE_LEASE_S for sb in client.made)
    desktop, browser, terminal = (next(sb for sb in client.made if _kind(sb) == k) for k in cli_demo.LIVE_KINDS)
    game = GAMES[cli_demo.LIVE_GAME].url(seed=cli_demo.LIVE_SEED)
    assert browser.steps == [{"type": "navigate", "url": game}, cli_demo.LIVE_PAGE_CLICK]
    assert terminal.steps == [{"type": "exec", "cmd": cli_demo.LIVE_SHELL_GREETING}] and desktop.steps == []

    stop.set()
    deleted = await asyncio.wait_for(session, 5)
    assert deleted == {sb.id: True for sb in client.made}
    assert all(sb.closed for sb in client.made)


async def test_one_refused_leaves_none() -> None:
    client = fake(refuse="browser")
    with pytest.raises(ResourceExhausted):
        await cli_demo.live_session(client, asyncio.Event())
    assert len(client.made) == 2 and all(sb.closed for sb in client.made)


async def test_a_sandbox_deleted_elsewhere_is_dropped_and_with_none_left_the_hold_ends() -> None:
    client, stop = fake(), asyncio.Event()
    session = asyncio.create_task(cli_demo.live_session(client, stop, renew_s=0.01))
    await asyncio.wait_for(client.all_made.wait(), 5)
    client.made[0].gone = True
    await asyncio.wait_for(client.made[1].renewed_times(3), 5)
    assert not session.done()
    for sb in client.made[1:]:
        sb.gone = True
    deleted = await asyncio.wait_for(session, 5)
    assert deleted == {}, "nothing left to delete"
    assert not stop.is_set()


async def test_told_to_stop_while_starting_it_deletes_them_without_holding() -> None:
    client, stop = fake(), asyncio.Event()
    stop.set()
    deleted = await asyncio.wait_for(cli_demo.live_session(client, stop), 5)
    assert list(deleted.values()) == [True] * 3 and all(sb.closed and not sb.renewals for sb in client.made)


async def test_a_sandbox_that_cannot_be_deleted_keeps_none_of_the_others_and_is_reported() -> None:
    client, stop = fake(), asyncio.Event()
    session = asyncio.create_task(cli_demo.live_session(client, stop))
    await asyncio.wait_for(client.all_made.wait(), 5)
    client.made[1].undeletable = True
    stop.set()
    deleted = await asyncio.wait_for(session, 5)
    assert deleted == {client.made[0].id: True, client.made[1].id: False, client.made[2].id: True}
    assert client.made[0].closed and client.made[2].closed


def test_the_demo_command_keeps_its_options_and_has_the_live_command() -> None:
    runner = CliRunner()
    demo = runner.invoke(app, ["demo", "--help"])
    assert demo.exit_code == 0 and "--episodes" in demo.output and "live" in demo.output
    live = runner.invoke(app, ["demo", "live", "--help"])
    assert live.exit_code == 0 and "--view" in live.output and "--target" in live.output
