"""The Docker backend's readiness probe asks the engine's info (a deadlocked dockerd still answers /_ping), one
probe at a time: callers that give up on a stuck engine do not each hold a worker thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.errors import Unavailable


class StuckEngine:
    """Answers /_ping at once and its info only when released, counting the info calls."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.info_calls = 0
        self.fail: Exception | None = None

    def ping(self) -> bool:
        return True

    def info(self) -> dict[str, Any]:
        self.info_calls += 1
        self.released.wait(10)
        if self.fail is not None:
            raise self.fail
        return {"ServerVersion": "20.10.24"}

    def close(self) -> None:
        pass


def _backend(engine: StuckEngine) -> DockerBackend:
    backend = DockerBackend(DockerConfig(owner="ping-test", socket_root="/tmp/ping-test"))
    backend._client = engine  # type: ignore[assignment]
    return backend


async def test_a_stuck_engine_fails_the_probe_with_one_call_in_flight() -> None:
    engine = StuckEngine()
    backend = _backend(engine)
    try:
        for _ in range(3):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(backend.ping(), 0.1)
        assert engine.info_calls == 1, "each probe that gave up left another call on the stuck engine"
        engine.released.set()
        await asyncio.wait_for(backend.ping(), 5)
        assert engine.info_calls == 1  # the one in flight answered the waiting caller
        await backend.ping()
        assert engine.info_calls == 2  # a finished probe is not reused
    finally:
        engine.released.set()
        await backend.close()


async def test_an_engine_that_refuses_fails_the_probe_with_unavailable() -> None:
    engine = StuckEngine()
    engine.released.set()
    engine.fail = ConnectionError("connection refused")
    backend = _backend(engine)
    try:
        with pytest.raises(Unavailable, match="does not answer"):
            await backend.ping()
    finally:
        await backend.close()
