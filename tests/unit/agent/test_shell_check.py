"""The agent's shell health check: it starts a process at most every ``SPAWN_PROOF_S``, and a process started
meanwhile (by a command or an earlier check) answers for it; a start that failed is never reused."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sandbox.agent import shell as shell_module
from sandbox.agent.errors import AgentError
from sandbox.agent.shell import Shell
from sandbox.protocol import ErrorCode


@pytest_asyncio.fixture
async def shell(tmp_path: Path) -> AsyncIterator[Shell]:
    shell = Shell(default_cwd=str(tmp_path), logger=logging.getLogger("test-agent-shell-check"))
    yield shell
    await shell.close()


@pytest.fixture
def check_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The programs the check starts (it starts them through asyncio; commands go through ``Child``)."""
    started: list[str] = []
    real = asyncio.create_subprocess_exec

    async def counting(program: str, *args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        started.append(program)
        return await real(program, *args, **kwargs)

    monkeypatch.setattr(shell_module.asyncio, "create_subprocess_exec", counting)
    return started


async def test_a_check_reuses_the_last_start_for_a_while(
    shell: Shell, check_starts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await shell.check() == {"ok": True, "detail": "spawns processes"}
    again = await shell.check()
    assert again["ok"] and "ago" in again["detail"], again
    assert check_starts == ["true"]
    monkeypatch.setattr(shell_module, "SPAWN_PROOF_S", 0.0)  # that start is now too old to answer
    assert await shell.check() == {"ok": True, "detail": "spawns processes"}
    assert check_starts == ["true", "true"]


async def test_a_command_started_answers_for_the_check(shell: Shell, check_starts: list[str]) -> None:
    result, _ = await shell.exec({"cmd": ["true"]}, b"")
    assert result["exit_code"] == 0
    checked = await shell.check()
    assert checked["ok"] and "ago" in checked["detail"], checked
    assert check_starts == []


async def test_a_command_that_cannot_start_makes_the_next_check_start_one(
    shell: Shell, check_starts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await shell.check())["ok"]

    def out_of_processes(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    with monkeypatch.context() as patched:
        patched.setattr(shell_module.Child, "start", out_of_processes)
        with pytest.raises(AgentError) as refused:
            await shell.exec({"cmd": ["true"]}, b"")
        assert refused.value.code is ErrorCode.BAD_REQUEST
    assert await shell.check() == {"ok": True, "detail": "spawns processes"}
    assert check_starts == ["true", "true"]


async def test_a_check_that_cannot_start_is_not_reused(shell: Shell, monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[str] = []

    async def out_of_processes(program: str, *_args: Any, **_kwargs: Any) -> None:
        attempts.append(program)
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(shell_module.asyncio, "create_subprocess_exec", out_of_processes)
    for _ in range(2):
        checked = await shell.check()
        assert not checked["ok"] and "cannot start a process" in checked["detail"], checked
    assert attempts == ["true", "true"]
