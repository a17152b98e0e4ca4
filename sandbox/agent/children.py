"""How the agent's event loop learns that a child exited.

On Python 3.11 asyncio's default watcher starts a thread per child, which waits in ``waitpid``: for an exec step
that starts ``true`` the thread's start and its hand-back cost the agent about 0.2 ms of CPU, as much as the rest of
its share of the step. A pidfd (Linux 5.3+) turns the exit into a readable file descriptor the loop already polls.
Python 3.12 does this by itself where the kernel allows."""

from __future__ import annotations

import asyncio
import os
import sys
import warnings


def watch_children_by_pidfd(loop: asyncio.AbstractEventLoop) -> bool:
    """Use a pidfd child watcher on ``loop`` when this Python needs telling and the kernel has pidfds."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an old kernel, or a seccomp profile that refuses the call
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = asyncio.PidfdChildWatcher()
        asyncio.set_child_watcher(watcher)
    watcher.attach_loop(loop)
    return True
