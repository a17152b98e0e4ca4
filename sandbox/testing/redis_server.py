"""A real ``redis-server`` child process on 127.0.0.1 and a free port, with no persistence: the Redis store's tests
and the benchmarks' replica rows run against it. Stopped by the PID it was started with, never by name; and, when
the process that started it dies without stopping it (a test run killed), by a watchdog of its own within a second.

Blocking: call it from a thread in async code (starting takes a few tens of milliseconds).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

from sandbox.testing.server import LOOPBACK, free_port

REDIS_SERVER = "redis-server"
START_TIMEOUT_S = 10.0
WATCHDOG = 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; kill "$2" 2>/dev/null'
"""``sh -c WATCHDOG _ OWNER SERVER``: stop the server (by its PID) once its owner is gone."""


class RedisUnavailable(RuntimeError):
    """``redis-server`` is not installed, or did not start (the message carries its log)."""


def ping(port: int, timeout: float = 0.5) -> bool:
    """True if a Redis server on 127.0.0.1:port answers PING."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server child process; ``start()`` again after ``stop()`` reuses the same port (empty data)."""

    def __init__(self, port: int | None = None) -> None:
        binary = shutil.which(REDIS_SERVER)
        if binary is None:
            raise RedisUnavailable(f"{REDIS_SERVER} is not installed: apt-get install -y redis-server")
        self.binary = binary
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="sbx-redis-")
        self.log_path = f"{self.dir}/redis.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("this redis-server is started already")
        command = [
            self.binary,
            "--port", str(self.port),
            "--bind", LOOPBACK,
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", self.dir,
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._watchdog = subprocess.Popen(
            ["sh", "-c", WATCHDOG, "redis-watchdog", str(os.getpid()), str(self.process.pid)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RedisUnavailable(f"redis-server on port {self.port} did not start; its log:\n{self.log()}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop this server (by its PID), and its watchdog first; idempotent."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.kill()
            watchdog.wait(timeout=10)
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
