"""A real `sandbox server` process for tests; the helper lives in the package (``sandbox.testing``), shared with the
benchmarks, and is re-exported here for the tests that import it from this module."""

from __future__ import annotations

from sandbox.testing.server import SANDBOX_BIN, ServerProcess, free_port

__all__ = ["SANDBOX_BIN", "ServerProcess", "free_port"]
