"""A real redis-server for tests, on 127.0.0.1 and a free port, with no persistence.

Use the session fixture from a conftest::

    from tests.redis_server import redis_server  # noqa: F401

or, in a test module whose tests take ``redis_server`` as a parameter (ruff's F811 otherwise)::

    from tests import redis_server as redis_fixtures
    redis_server = redis_fixtures.redis_server

A missing ``redis-server`` FAILS the test that asks for it (never a skip). ``RedisServer`` can also be made
directly, e.g. to stop and restart a private server inside one test; it is stopped by its PID only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

REDIS_SERVER = "redis-server"
START_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ping(port: int, timeout: float = 0.5) -> bool:
    """True if a Redis server on 127.0.0.1:port answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server child process; ``start()`` again after ``stop()`` reuses the same port (empty data)."""

    def __init__(self, port: int | None = None) -> None:
        binary = shutil.which(REDIS_SERVER)
        if binary is None:
            pytest.fail(
                f"{REDIS_SERVER} is not installed (the Redis store is tested against a real server): "
                "apt-get install -y redis-server",
                pytrace=False,
            )
        self.binary = binary
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="sbx-redis-")
        self.log_path = os.path.join(self.dir, "redis.log")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self.process is None, "already started"
        command = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", self.dir,
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"redis-server on port {self.port} did not start; its log:\n{self.log()}", pytrace=False)
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop this server (by its PID); idempotent."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return "(no log)"

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server shared by the whole session. Tests keep apart by key namespace; do not FLUSHALL."""
    with RedisServer() as server:
        yield server
