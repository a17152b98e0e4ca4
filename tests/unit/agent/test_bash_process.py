"""A session's bash driven through its pipes: one marker line answers each line sent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sandbox.agent.bash_process import BashProcess, SessionEnded

MARKER = b"__test_marker__"


async def _bash(tmp_path: Path) -> BashProcess:
    return BashProcess.start(["bash", "--noprofile", "--norc"], cwd=str(tmp_path), marker=MARKER)


async def test_each_line_is_answered_by_its_marker_even_after_other_output(tmp_path: Path) -> None:
    bash = await _bash(tmp_path)
    try:
        answer = bash.expect()
        await bash.send(b"printf 'noise without a newline '; (exit 3); printf '%s %d\\n' __test_marker__ $?\n")
        assert await asyncio.wait_for(answer, 10) == 3
        answer = bash.expect()
        await bash.send(b"echo one line; printf '%s %d\\n' __test_marker__ 0\n")
        assert await asyncio.wait_for(answer, 10) == 0
    finally:
        bash.close()
        await bash.wait()


async def test_a_bash_that_exits_fails_the_wait_and_every_later_one(tmp_path: Path) -> None:
    bash = await _bash(tmp_path)
    answer = bash.expect()
    await bash.send(b"exit 4\n")
    with pytest.raises(SessionEnded):
        await asyncio.wait_for(answer, 10)
    assert await asyncio.wait_for(bash.wait(), 10) == 4
    with pytest.raises(SessionEnded):
        await bash.expect()
    with pytest.raises(SessionEnded):
        await bash.send(b"true\n")
    bash.close()


async def test_a_wait_cut_short_leaves_the_marker_to_the_next_one(tmp_path: Path) -> None:
    bash = await _bash(tmp_path)
    try:
        answer = bash.expect()
        await bash.send(b"sleep 0.3; printf '%s %d\\n' __test_marker__ 5\n")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await answer
        assert await asyncio.wait_for(bash.expect(), 10) == 5
    finally:
        bash.close()
        await bash.wait()
