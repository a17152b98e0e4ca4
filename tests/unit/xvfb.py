"""A throwaway Xvfb for unit tests that need a real X server (screen damage, the desktop's look.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def running_xvfb(width: int, height: int) -> Iterator[str]:
    """An Xvfb of ``width`` x ``height`` on a display number it picks itself; its name (``:N``) until the block ends."""
    read, write = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    try:
        with os.fdopen(read) as announced:
            number = announced.readline().strip()
        assert number.isdigit(), f"Xvfb did not start (exit code {server.poll()})"
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(10)
