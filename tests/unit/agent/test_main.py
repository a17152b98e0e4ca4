"""The agent's entry point picks uvloop's event loop when the image has it, and asyncio's own when it does not."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest

from sandbox.agent.__main__ import loop_factory


def test_without_uvloop_the_agent_runs_on_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an image without python3-uvloop has: an ImportError
    assert loop_factory() is None


def test_with_uvloop_the_agent_runs_on_its_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("uvloop")
    fake.new_event_loop = asyncio.new_event_loop  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "uvloop", fake)
    assert loop_factory() is asyncio.new_event_loop
