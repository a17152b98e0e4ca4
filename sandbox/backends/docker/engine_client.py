"""The docker SDK client the backend talks to the engine with, and the way every call of the backend's reaches it:
in a worker thread, through the engine gate (``sandbox.backends.engine_gate``), the SDK's errors translated."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.transport import UnixHTTPAdapter

from sandbox.backends.engine_gate import CallKind, EngineCallSettings, EngineGate
from sandbox.errors import BackendError, NotFound, SandboxError, Unavailable

T = TypeVar("T")

ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, ConnectionError)
NO_ANSWER = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError, TimeoutError)
"""How a call ends that the engine did not answer: no sign of life for the gate's stall detection."""


def connect(base_url: str | None, **kwargs: Any) -> docker.DockerClient:
    """A client of the engine at ``base_url`` (None: the environment's ``DOCKER_HOST``, or the local socket).

    Over a unix socket, requests' per-call look-ups of proxy variables and ``~/.netrc`` are turned off: they never
    apply to a socket, and under a burst of engine calls decoding ``os.environ`` on every call was a tenth of the
    control plane's time holding the GIL. Over TCP they stay, as the docker CLI honours ``HTTPS_PROXY`` too."""
    client = docker.DockerClient(base_url=base_url, **kwargs) if base_url else docker.from_env(**kwargs)
    if isinstance(client.api.get_adapter(client.api.base_url), UnixHTTPAdapter):
        client.api.trust_env = False
    return client


def translate(e: Exception, what: str) -> SandboxError:
    if isinstance(e, docker.errors.ImageNotFound):
        return NotFound(f"{what}: image not found ({e.explanation}); build it with `sandbox images build`")
    if isinstance(e, docker.errors.NotFound):
        return NotFound(f"{what}: {e.explanation}")
    if isinstance(e, docker.errors.APIError):
        return BackendError(f"{what}: the engine refused: {e.explanation or e}")
    if isinstance(e, (requests.exceptions.ConnectionError, ConnectionError)):
        return Unavailable(f"{what}: the Docker engine does not answer: {e}")
    return BackendError(f"{what}: {e}")


class EngineCalls:
    """``await calls(what, fn, *args, kind=..., **kwargs)``: the blocking SDK call ``fn`` in a worker thread, as an
    engine call of ``kind`` (create, start, commit, remove, other) through the gate; ``what`` names it in errors."""

    def __init__(self, settings: EngineCallSettings) -> None:
        self.gate = EngineGate(settings, no_answer=NO_ANSWER)

    async def __call__(self, what: str, fn: Callable[..., T], *args: Any, kind: CallKind = "other", **kwargs: Any) -> T:
        call = partial(asyncio.to_thread, fn, *args, **kwargs)
        return await self.run(what, kind, call, patient=kind == "commit")  # a commit copies a file system

    async def run(self, what: str, kind: CallKind, call: Callable[[], Awaitable[T]], *, patient: bool = False) -> T:
        """``await call()`` through the gate (``patient``: see ``engine_gate``), its SDK errors translated."""
        try:
            return await self.gate.run(kind, call, patient=patient)
        except ENGINE_ERRORS as e:
            raise translate(e, what) from e
        except Unavailable as e:  # the gate's refusal: the engine stalled, or no slot came
            raise Unavailable(f"{what}: {e.message}") from e
