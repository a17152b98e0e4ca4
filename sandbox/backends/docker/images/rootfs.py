"""The base stage: ``mmdebstrap`` makes a Debian root file system from the recipe's package list (running the
recipe's hook scripts, if any), and ``docker import`` turns it into ``sandbox-base/<kind>:<base hash>``."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker

from sandbox.backends.docker.images.engine import ENGINE_ERRORS, Progress, explain, run_logged, size_mb
from sandbox.backends.docker.images.recipe import (
    IMPORT_CHANGES,
    LABEL_BASE_HASH,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_STAGE,
    MANAGED_BY,
    MMDEBSTRAP_OPTIONS,
    SUITE,
    Recipe,
)
from sandbox.errors import ImageBuildError


def build_base(client: docker.DockerClient, recipe: Recipe, say: Progress) -> None:
    """Make ``recipe.base_tag``: mmdebstrap into a temporary tar, then ``docker import`` with the base labels."""
    say(f"base: building {recipe.base_tag} with mmdebstrap ({len(recipe.packages)} packages)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sandbox-image-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        hooks = _write_hooks(recipe, Path(tmp) / "hooks")
        _run_mmdebstrap(recipe, rootfs, hooks, say)
        say(f"base: importing {rootfs.stat().st_size / 1e6:.0f} MB root file system")
        _import_rootfs(client, recipe, rootfs)
    elapsed = time.monotonic() - started
    say(f"base: done in {elapsed:.1f}s ({recipe.base_tag}, {size_mb(client, recipe.base_tag)} MB)")


def _write_hooks(recipe: Recipe, directory: Path) -> Path | None:
    """The recipe's hook scripts, exactly the bytes hashed, in a directory for ``--hook-directory``."""
    if not recipe.hooks:
        return None
    directory.mkdir()
    for name, content, mode in recipe.hooks:
        path = directory / name
        path.write_bytes(content)
        path.chmod(mode)
    return directory


def _mmdebstrap_command(recipe: Recipe, output: Path, hooks: Path | None = None) -> list[str]:
    hook_options = [f"--hook-directory={hooks}"] if hooks else []
    include = f"--include={','.join(recipe.packages)}"
    return ["mmdebstrap", *MMDEBSTRAP_OPTIONS, *hook_options, include, SUITE, str(output)]


def _run_mmdebstrap(recipe: Recipe, output: Path, hooks: Path | None, say: Progress) -> None:
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildError("mmdebstrap is not installed; run scripts/setup.sh or `apt-get install mmdebstrap`")
    run_logged(say, "mmdebstrap", _mmdebstrap_command(recipe, output, hooks), Path.cwd(), image=recipe.kind)


def _import_rootfs(client: docker.DockerClient, recipe: Recipe, rootfs: Path) -> None:
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_KIND: recipe.kind,
        LABEL_STAGE: "base",
        LABEL_BASE_HASH: recipe.base_hash,
    }
    changes = [*IMPORT_CHANGES, *(f"LABEL {k}={v}" for k, v in labels.items())]
    repository, tag = recipe.base_tag.split(":")
    try:
        result = client.api.import_image_from_file(str(rootfs), repository=repository, tag=tag, changes=changes)
    except ENGINE_ERRORS as e:
        raise ImageBuildError(f"docker import of {recipe.base_tag} failed: {explain(e)}") from e
    errors = [m["error"] for m in _json_lines(result) if "error" in m]
    if errors:
        raise ImageBuildError(f"docker import of {recipe.base_tag} failed: {errors[-1]}")


def _json_lines(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            if isinstance(message, dict):
                yield message
