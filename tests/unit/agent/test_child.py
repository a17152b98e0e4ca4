"""A one-shot command's process as the agent runs it: exit by pidfd (or a thread), output and input by the loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.agent import child as child_module
from sandbox.agent.child import Child
from sandbox.agent.shell import _Output


def _start(argv: list[str], tmp_path: Path, *, stdin: bool = False) -> tuple[Child, _Output, _Output]:
    out, err = _Output(1 << 26), _Output(1 << 26)
    return Child.start(argv, stdin=stdin, cwd=str(tmp_path), env=dict(os.environ), sinks=(out, err)), out, err


def _reaped(pid: int) -> bool:
    """Whether ``pid`` is gone for good: exited and reaped (no zombie left behind)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return not os.path.exists(f"/proc/{pid}")


async def _until_reaped(pid: int) -> None:
    for _ in range(200):
        if _reaped(pid):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"process {pid} was not reaped")


def _open_fds() -> set[tuple[str, str]]:
    """This process's pipes and pidfds: (fd, what it is open on, e.g. ``pipe:[4242]``). Only those kinds: the
    descriptors a child opens; other threads of the test process (a client's socket, a log file) come and go."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith(("pipe:", "anon_inode:[pidfd]")):
            found.add((fd, target))
    return found


async def test_exit_code_and_both_outputs(tmp_path: Path) -> None:
    before = _open_fds()
    child, out, err = _start(["sh", "-c", "printf out; printf err >&2; pwd >&2; exit 3"], tmp_path)
    opened = _open_fds() - before  # the child's two pipes and its pidfd (each a new pipe or pidfd inode)
    assert opened
    try:
        assert await child.run(b"") == 3
        await asyncio.wait_for(child.drained(), 5)
    finally:
        child.close()
    assert (out.data(), err.data()) == (b"out", b"err" + str(tmp_path).encode() + b"\n")
    assert child.returncode == 3
    await _until_reaped(child.pid)
    assert not opened & _open_fds(), "the pipes and the pidfd are closed"


async def test_a_signal_is_a_negative_return_code(tmp_path: Path) -> None:
    child, _, _ = _start(["sh", "-c", "kill -TERM $$"], tmp_path)
    try:
        assert await child.run(b"") == -15
    finally:
        child.close()


async def test_stdin_larger_than_a_pipe_reaches_the_command_whole(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)  # far more than a pipe holds: the write must wait for the reader
    child, out, _ = _start(["cat"], tmp_path, stdin=True)
    try:
        assert await asyncio.wait_for(child.run(data), 30) == 0
        await asyncio.wait_for(child.drained(), 5)
    finally:
        child.close()
    assert out.data() == data


async def test_stdin_the_command_never_reads_does_not_hang(tmp_path: Path) -> None:
    child, _, _ = _start(["true"], tmp_path, stdin=True)
    try:
        assert await asyncio.wait_for(child.run(os.urandom(4 << 20)), 30) == 0
    finally:
        child.close()


async def test_a_cancelled_run_still_reaps_the_process_later(tmp_path: Path) -> None:
    child, _, _ = _start(["sleep", "0.3"], tmp_path)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(child.run(b""), 0.05)
    child.close()
    assert child.returncode is None
    await asyncio.sleep(0.5)
    await _until_reaped(child.pid)
    assert child.returncode == 0


async def test_a_background_child_holding_the_pipes_leaves_drained_waiting(tmp_path: Path) -> None:
    child, out, _ = _start(["sh", "-c", "echo started; sleep 5 & exit 0"], tmp_path)
    try:
        assert await child.run(b"") == 0
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(child.drained(), 0.2)
    finally:
        os.killpg(child.pid, 9)
        child.close()
    assert out.data() == b"started\n"


async def test_without_pidfds_a_thread_waits_for_the_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    watched: list[int] = []
    in_thread = child_module._watch_exit_in_thread

    def spy(loop: asyncio.AbstractEventLoop, pid: int, reaped: Callable[[int], None]) -> None:
        watched.append(pid)
        in_thread(loop, pid, reaped)

    monkeypatch.setattr(child_module.os, "pidfd_open", refuse)
    monkeypatch.setattr(child_module, "_watch_exit_in_thread", spy)
    child, out, _ = _start(["sh", "-c", "echo hi; exit 4"], tmp_path)
    try:
        assert await asyncio.wait_for(child.run(b""), 5) == 4
        await asyncio.wait_for(child.drained(), 5)
    finally:
        child.close()
    assert watched == [child.pid]
    assert out.data() == b"hi\n"
    await _until_reaped(child.pid)


async def test_a_program_that_cannot_start_leaves_no_descriptor_behind(tmp_path: Path) -> None:
    before = _open_fds()
    with pytest.raises(FileNotFoundError):
        _start(["/no/such/program"], tmp_path)
    assert _open_fds() <= before


async def test_a_cancelled_wait_leaves_the_value_to_the_other_waiters() -> None:
    once: child_module._Once[int] = child_module._Once(asyncio.get_running_loop())
    first = asyncio.create_task(once.wait())
    second = asyncio.create_task(once.wait())
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await once.wait()
    first.cancel()
    await asyncio.sleep(0)
    assert not once.done()
    once.set(7)
    once.set(8)  # set once: a later value is ignored
    assert await second == 7 and await once.wait() == 7 and first.cancelled()
