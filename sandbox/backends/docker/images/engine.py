"""The Docker engine calls the image builder shares: a client for the duration, inspect, tag, and error text."""

from __future__ import annotations

import collections
import contextlib
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import docker
import docker.errors
import requests

from sandbox.errors import ImageBuildError

ENGINE_TIMEOUT = 600
LOG_TAIL = 40

Progress = Callable[[str], None]
"""Where build steps report, one line at a time."""

ENGINE_ERRORS = (docker.errors.DockerException, requests.RequestException)


@contextlib.contextmanager
def engine(client: docker.DockerClient | None) -> Iterator[docker.DockerClient]:
    """The caller's client, or one of our own for the duration."""
    if client is not None:
        yield client
        return
    try:
        own = docker.from_env(timeout=ENGINE_TIMEOUT)
    except ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot reach the Docker engine: {e}; is dockerd running (scripts/setup.sh)?") from e
    with contextlib.closing(own):
        yield own


def exists(client: docker.DockerClient, ref: str) -> bool:
    return image_id(client, ref) is not None


def image_id(client: docker.DockerClient, ref: str) -> str | None:
    try:
        return str(client.api.inspect_image(ref)["Id"])
    except docker.errors.ImageNotFound:
        return None
    except ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot inspect image {ref}: {explain(e)}") from e


def add_tag(client: docker.DockerClient, ref: str, repository: str, tag: str) -> None:
    try:
        client.api.tag(ref, repository, tag, force=True)
    except ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot tag {ref} as {repository}:{tag}: {explain(e)}") from e


def size_mb(client: docker.DockerClient, ref: str) -> int:
    try:
        return int(client.api.inspect_image(ref)["Size"] / 1e6)
    except ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot inspect image {ref}: {explain(e)}") from e


def explain(e: Exception) -> str:
    """The engine's own words for an error, when it gave some."""
    return str(getattr(e, "explanation", None) or e)


def failure(headline: str, tail: Iterable[str]) -> str:
    """An error message ending with the last lines a failed step logged."""
    lines = list(tail)
    if not lines:
        return headline
    return "\n".join([headline, f"--- last {len(lines)} log lines ---", *lines])


def run_logged(
    say: Progress, name: str, command: list[str], cwd: Path, *, image: str = "the control-plane image"
) -> None:
    """Run a host step of an image build, its output as progress lines (its last lines in the error if it fails)."""
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    with subprocess.Popen(
        command,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            if line:
                tail.append(line)
                say(f"{name} | {line}")
    if proc.returncode != 0:
        raise ImageBuildError(failure(f"{name} for {image} exited with {proc.returncode}", tail))
