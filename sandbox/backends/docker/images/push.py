"""Pushing built images to a registry: each image is tagged ``<registry>/<repository>:<tag>`` (its hash tag,
``latest`` and any extra tags) and pushed by the engine (``docker push``), its progress reported line by line. The
tags of pushed images stay, as after ``docker tag`` and ``docker push``; a failed push removes the tag it made.

The engine talks to the registry, so the registry must be reachable from the engine, and a plain-HTTP one must be
in the engine's ``insecure-registries`` unless it is on 127.0.0.0/8 (which Docker allows by default).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

import docker

from sandbox.backends.docker.images.engine import ENGINE_ERRORS, Progress, add_tag, exists, explain
from sandbox.backends.docker.images.recipe import Recipe
from sandbox.errors import BackendError, ImageBuildError, InvalidArgument, SandboxError, Unavailable

_REGISTRY = re.compile(
    r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:]+\])(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<path>(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)$"
)
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_UNREACHABLE = (
    "connection refused",
    "no such host",
    "i/o timeout",
    "dial tcp",
    "server gave http response to https client",
    "tls: ",
    "connection reset",
)


def check_registry(registry: str) -> str:
    """``host[:port][/path]`` as docker names it (no scheme); returns it without a trailing slash."""
    value = registry.strip().rstrip("/")
    if "://" in value:
        raise InvalidArgument(f"registry {registry!r}: give host[:port] without a scheme, e.g. 127.0.0.1:5000")
    if not _REGISTRY.match(value):
        raise InvalidArgument(f"registry {registry!r} is not host[:port][/path], e.g. registry.example.com:5000/team")
    return value


def check_tag(tag: str) -> str:
    if not _TAG.match(tag):
        raise InvalidArgument(f"tag {tag!r}: letters, digits, '_', '.' and '-', at most 128, not starting with . or -")
    return tag


def push_recipe(
    client: docker.DockerClient, recipe: Recipe, registry: str, say: Progress, extra_tags: Sequence[str] = ()
) -> dict[str, str]:
    """Tag ``recipe``'s built image for ``registry`` and push it; returns each pushed reference → its digest."""
    source = recipe.versioned_tag
    if not exists(client, source):
        raise ImageBuildError(
            f"{source} is not built from the current recipe; run `sandbox images build {recipe.kind}` first"
        )
    repository = f"{registry}/{recipe.repository}"
    tags = dict.fromkeys([source.rsplit(":", 1)[1], "latest", *extra_tags])
    pushed: dict[str, str] = {}
    for tag in tags:
        add_tag(client, source, repository, tag)
        try:
            pushed[f"{repository}:{tag}"] = _push(client, repository, tag, registry, say)
        except SandboxError:
            _untag(client, f"{repository}:{tag}")  # a failed push leaves no tag behind; pushed ones stay
            raise
    return pushed


def _untag(client: docker.DockerClient, ref: str) -> None:
    with contextlib.suppress(*ENGINE_ERRORS):
        client.api.remove_image(ref, noprune=True)


def _push(client: docker.DockerClient, repository: str, tag: str, registry: str, say: Progress) -> str:
    ref = f"{repository}:{tag}"
    say(f"push: {ref}")
    seen: set[tuple[str, str]] = set()
    digest = ""
    try:
        for chunk in client.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk or "errorDetail" in chunk:
                raise _push_error(ref, registry, _error_text(chunk))
            digest = str(chunk.get("aux", {}).get("Digest") or digest)
            line = _progress_line(chunk, seen)
            if line:
                say(f"push | {line}")
    except ENGINE_ERRORS as e:
        raise _push_error(ref, registry, explain(e)) from e
    if not digest:
        raise BackendError(f"pushing {ref} to registry {registry}: the engine reported no digest")
    return digest


def _progress_line(chunk: dict[str, Any], seen: set[tuple[str, str]]) -> str | None:
    """Each layer's status once ("Preparing", "Pushed", "Layer already exists", ...), not every byte count."""
    status = str(chunk.get("status") or "")
    if not status:
        return None
    layer = str(chunk.get("id") or "")
    if (layer, status) in seen:
        return None
    seen.add((layer, status))
    return f"{layer}: {status}" if layer else status


def _error_text(chunk: dict[str, Any]) -> str:
    detail = chunk.get("errorDetail")
    message = detail.get("message") if isinstance(detail, dict) else None
    return str(message or chunk.get("error") or chunk)


def _push_error(ref: str, registry: str, message: str) -> BackendError | Unavailable:
    if any(marker in message.lower() for marker in _UNREACHABLE):
        return Unavailable(
            f"cannot reach the registry {registry} to push {ref}: {message}; is a registry listening there, "
            "reachable from the Docker engine? (a plain-HTTP registry outside 127.0.0.0/8 must be listed in the "
            "engine's insecure-registries)"
        )
    return BackendError(f"pushing {ref} to the registry {registry} failed: {message}")
