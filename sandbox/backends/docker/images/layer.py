"""The top layer: a generated Dockerfile ``FROM`` the base adds the ``sandbox`` user, the recipe's files and the
in-sandbox agent (the control plane's: the platform's wheels, see :mod:`.controlplane`); built from an in-memory
context with no network (everything it needs is in the context) and tagged ``<repository>:<image hash>``."""

from __future__ import annotations

import collections
import io
import tarfile
import time
from collections.abc import Sequence
from typing import Any

import docker

from sandbox.backends.docker.images.engine import ENGINE_ERRORS, LOG_TAIL, Progress, explain, failure, size_mb
from sandbox.backends.docker.images.recipe import (
    LABEL_HASH,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_STAGE,
    MANAGED_BY,
    FileEntry,
    Recipe,
)
from sandbox.errors import ImageBuildError

_BUILD_CHATTER = (" ---> ", "Removing intermediate container")


def build_layer(
    client: docker.DockerClient, recipe: Recipe, say: Progress, force: bool, extra: Sequence[FileEntry] = ()
) -> None:
    """Make ``recipe.versioned_tag`` on top of ``recipe.base_tag``; ``force`` disables the build cache; ``extra``
    joins the recipe's files in the build context (the control plane's wheels)."""
    say(f"{recipe.stage}: building {recipe.versioned_tag}")
    started = time.monotonic()
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_KIND: recipe.kind,
        LABEL_STAGE: recipe.stage,
        LABEL_HASH: recipe.image_hash,
    }
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    try:
        stream = client.api.build(
            fileobj=_build_context(recipe, extra),
            custom_context=True,
            tag=recipe.versioned_tag,
            pull=False,
            rm=True,
            forcerm=True,
            nocache=force,
            labels=labels,
            network_mode="none",
            decode=True,
        )
        for chunk in stream:
            _follow_build(chunk, tail, say, recipe)
    except ENGINE_ERRORS as e:
        raise ImageBuildError(failure(f"building {recipe.versioned_tag} failed: {explain(e)}", tail)) from e
    elapsed = time.monotonic() - started
    say(f"{recipe.stage}: done in {elapsed:.1f}s ({recipe.versioned_tag}, {size_mb(client, recipe.versioned_tag)} MB)")


def _follow_build(chunk: dict[str, Any], tail: collections.deque[str], say: Progress, recipe: Recipe) -> None:
    if "error" in chunk:
        raise ImageBuildError(failure(f"building {recipe.versioned_tag} failed: {chunk['error']}", tail))
    for line in str(chunk.get("stream", "")).splitlines():
        if line.strip():
            tail.append(line)
            if not line.startswith(_BUILD_CHATTER):
                say(f"docker build | {line}")


def _build_context(recipe: Recipe, extra: Sequence[FileEntry] = ()) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content, mode in (("Dockerfile", recipe.dockerfile.encode(), 0o644), *recipe.files, *extra):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    buf.seek(0)
    return buf
