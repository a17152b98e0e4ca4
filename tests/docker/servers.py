"""A real `sandbox server` process for tests; the helper lives in the package (``sandbox.testing``), shared with the
benchmarks, and is re-exported here for the tests that import it from this module, with :func:`started`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sandbox.testing.server import SANDBOX_BIN, ServerProcess, free_port

__all__ = ["SANDBOX_BIN", "ServerProcess", "free_port", "started"]


@contextlib.contextmanager
def started(server: ServerProcess) -> Iterator[ServerProcess]:
    """``server`` started and, at the end, stopped (also when it never came up) and the tail of its log printed
    (pytest shows it with a failure)."""
    try:
        yield server.start()
    finally:
        server.stop()
        print(server.log_tail())
