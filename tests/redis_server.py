"""A real redis-server for tests (``sandbox.testing.redis_server``), on 127.0.0.1 and a free port, with no
persistence.

Use the session fixture from a conftest::

    from tests.redis_server import redis_server  # noqa: F401

or, in a test module whose tests take ``redis_server`` as a parameter (ruff's F811 otherwise)::

    from tests import redis_server as redis_fixtures
    redis_server = redis_fixtures.redis_server

A missing ``redis-server`` FAILS the test that asks for it (never a skip). ``RedisServer`` can also be made
directly, e.g. to stop and restart a private server inside one test; it is stopped by its PID only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.testing import redis_server as redis_process
from sandbox.testing.server import free_port

__all__ = ["RedisServer", "free_port", "redis_server"]


class RedisServer(redis_process.RedisServer):
    """The package's redis-server process, whose failure to be found or to start fails the test."""

    def __init__(self, port: int | None = None) -> None:
        try:
            super().__init__(port)
        except redis_process.RedisUnavailable as e:
            pytest.fail(str(e), pytrace=False)

    def start(self) -> None:
        try:
            super().start()
        except redis_process.RedisUnavailable as e:
            pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server shared by the whole session. Tests keep apart by key namespace; do not FLUSHALL."""
    with RedisServer() as server:
        yield server
