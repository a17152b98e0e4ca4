"""The agent learns of its children's exits through pidfds, not a thread per child (Python 3.11's default)."""

from __future__ import annotations

import asyncio
import sys
import threading
import warnings
from collections.abc import Iterator

import pytest

from sandbox.agent.children import watch_children_by_pidfd


@pytest.fixture
def restored_watcher() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(None)  # type: ignore[arg-type]  # the next call makes the default again


def _waiting_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if "waitpid-" in t.name]


async def test_children_exit_without_a_waiting_thread(restored_watcher: None) -> None:
    assert watch_children_by_pidfd(asyncio.get_running_loop()) is True, "this kernel has pidfds (Linux 5.3+)"
    seen: list[str] = []

    async def child(code: int) -> int:
        proc = await asyncio.create_subprocess_exec("sh", "-c", f"sleep 0.2; exit {code}")
        seen.extend(_waiting_threads())
        return await proc.wait()

    codes = await asyncio.gather(*(child(n) for n in range(8)))
    assert codes == list(range(8))
    assert seen == [], f"threads waited for children: {seen}"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12+ watches children by pidfd by itself")
def test_the_default_would_start_a_thread_per_child() -> None:
    """The check above can fail: without the pidfd watcher, Python 3.11 starts a thread a child."""

    async def run() -> list[str]:
        proc = await asyncio.create_subprocess_exec("sleep", "0.2")
        names = _waiting_threads()
        await proc.wait()
        return names

    assert asyncio.run(run()), "expected the threaded watcher's waitpid thread"
