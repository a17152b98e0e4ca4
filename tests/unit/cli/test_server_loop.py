"""Which event loop ``sandbox server`` runs on: uvloop where installed, asyncio's own when asked."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from sandbox.aio import server_loop_factory
from sandbox.environment import EVENT_LOOP


def test_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP, raising=False)
    factory = server_loop_factory()
    assert factory is not None
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
        assert runner.run(asyncio.sleep(0, result="ran")) == "ran"


def test_asyncio_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP, " AsyncIO ")
    assert server_loop_factory() is None


def test_an_unknown_loop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP, "trio")
    with pytest.raises(ValueError, match="SANDBOX_EVENT_LOOP must be uvloop or asyncio, not 'trio'"):
        server_loop_factory()
