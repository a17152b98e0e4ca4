"""Ending what a command started: its process group, and (for a session's shell) the tree below a process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def kill_group_fully(pgid: int, within: float = 3.0) -> None:
    """SIGKILL a process group until it is empty: a fork bomb forks between two signals."""
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        await asyncio.sleep(0.02)


def kill_descendants(root: int) -> None:
    for pid in descendants(root):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                line = f.read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(line.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found
