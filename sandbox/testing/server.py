"""A real ``sandbox server`` process, for the Docker tests and the benchmarks.

Started on loopback with free ports, its own owner label and socket root (so its containers, and only them, carry
the caller's run id), and stopped by the PID it was started with. Blocking: call it from a thread in async code.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from sandbox.errors import Unavailable

SANDBOX_BIN = str(Path(sys.executable).with_name("sandbox"))
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, workdir: Path, *, owner: str, socket_root: str, name: str = "server", **options: Any) -> None:
        """``options``: ``tokens`` (dict), ``settings`` (dict for --config), ``redis_url``, ``state`` (path)."""
        self.workdir = workdir
        self.owner = owner
        self.socket_root = socket_root
        self.name = name
        self.options = options
        self.grpc_port, self.http_port = free_port(), free_port()
        self.log = workdir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def grpc_target(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise Unavailable(f"{self.name} is not started")
        return self.process.pid

    def argv(self) -> list[str]:
        argv = [
            SANDBOX_BIN, "server", "--host", LOOPBACK, "--grpc-port", str(self.grpc_port),
            "--http-port", str(self.http_port), "--owner", self.owner, "--socket-root", self.socket_root,
        ]  # fmt: skip
        if "tokens" in self.options:
            tokens = self.workdir / f"{self.name}-tokens.json"
            tokens.write_text(json.dumps(self.options["tokens"]))
            argv += ["--tokens-file", str(tokens)]
        if "settings" in self.options:
            config = self.workdir / f"{self.name}-config.json"
            config.write_text(json.dumps(self.options["settings"]))
            argv += ["--config", str(config)]
        if "redis_url" in self.options:
            argv += ["--redis-url", self.options["redis_url"]]
        else:
            argv += ["--state", str(self.options.get("state", self.workdir / f"{self.name}-state.json"))]
        return argv

    def start(self, timeout: float = 30) -> ServerProcess:
        """Start it and wait until its HTTP health check answers; ``Unavailable`` (with its log) otherwise."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Unavailable(f"{self.name} exited: {self.log_tail()}")
            try:
                if httpx.get(f"{self.http_url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        raise Unavailable(f"{self.name} never answered: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def kill9(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self, grace: float = 30) -> None:
        """SIGTERM to the process this object started (never by name), SIGKILL after ``grace`` seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def env(self, token: str | None = None) -> dict[str, str]:
        env = {**os.environ, "SANDBOX_TARGET": self.grpc_target}
        if token:
            env["SANDBOX_TOKEN"] = token
        return env
