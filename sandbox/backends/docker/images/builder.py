"""Builds the sandbox images without a container registry, in two cached stages.

1. base (:mod:`.rootfs`): ``mmdebstrap`` makes a Debian root file system from ``images/<kind>/packages.txt``; it is
   imported into Docker as ``sandbox-base/<kind>:<hash12>``, the hash covering the package list and the mmdebstrap
   options.
2. agent (:mod:`.layer`): a generated Dockerfile ``FROM`` that base adds the ``sandbox`` user (uid 1000), the files
   under ``images/<kind>/rootfs/`` (if any, at the same paths), ``images/<kind>/entrypoint.sh`` and the in-sandbox
   agent (``sandbox/__init__.py``, ``sandbox/protocol.py``, ``sandbox/agent/``). It is tagged
   ``sandbox/<kind>:<hash12>`` and ``sandbox/<kind>:latest``, the hash covering the base hash, the Dockerfile and every
   file copied in.

A variant (``terminal-jupyter``) is built the same way from its kind's recipe plus its own (:mod:`.recipe`).

The control-plane image (``controlplane``, not built by default) has the same base stage and, on top, the platform
installed from wheels built on the host (:mod:`.controlplane`). ``push_images`` tags images for a registry and
pushes them (:mod:`.push`).

What goes in and the hashes are :mod:`.recipe`'s. A stage whose tag already exists is skipped, so a rebuild with no
change takes well under a second. Synchronous: call it from a thread in async code. The command line is
``sandbox images build|check|prune|push`` (sandbox/cli/images.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandbox import __version__
from sandbox.backends.docker.images.controlplane import INSTALL_STAGE, build_wheels, load_controlplane_recipe
from sandbox.backends.docker.images.engine import (
    ENGINE_ERRORS,
    Progress,
    add_tag,
    engine,
    exists,
    explain,
    image_id,
)
from sandbox.backends.docker.images.layer import build_layer
from sandbox.backends.docker.images.push import check_registry, check_tag, push_recipe
from sandbox.backends.docker.images.recipe import (
    CONTROLPLANE,
    IMAGE_KINDS,
    KINDS,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_STAGE,
    MANAGED_BY,
    SANDBOX_IMAGES,
    VARIANTS,
    Recipe,
    image_tag,
)
from sandbox.backends.docker.images.recipe import load_recipe as load_sandbox_recipe
from sandbox.backends.docker.images.rootfs import build_base
from sandbox.backends.docker.images.wheels import requirement_wheels
from sandbox.errors import ImageBuildError, InvalidArgument

__all__ = [
    "CONTROLPLANE",
    "IMAGE_KINDS",
    "KINDS",
    "SANDBOX_IMAGES",
    "VARIANTS",
    "ImageBuildError",
    "Progress",
    "Recipe",
    "build_images",
    "image_tag",
    "load_recipe",
    "outdated",
    "prune",
    "push_images",
    "recipe_hash",
]


def load_recipe(kind: str, *, recipes_dir: Path | None = None) -> Recipe:
    """The recipe of one of ``IMAGE_KINDS``: a sandbox kind, a variant or the control plane."""
    if kind == CONTROLPLANE:
        return load_controlplane_recipe(recipes_dir=recipes_dir)
    if kind == "android":  # built only when named, from an Android SDK given in $SANDBOX_ANDROID_SDK
        from sandbox.backends.docker.images.android import load_recipe as load_android_recipe

        return load_android_recipe(recipes_dir=recipes_dir)
    if kind not in SANDBOX_IMAGES:
        raise InvalidArgument(f"unknown image {kind!r}; expected one of {', '.join(IMAGE_KINDS)}")
    return load_sandbox_recipe(kind, recipes_dir=recipes_dir)


def recipe_hash(kind: str, *, recipes_dir: Path | None = None) -> str:
    """The full hash of ``kind``'s current recipe; images carry it in the ``sandbox.image.recipe-hash`` label."""
    return load_recipe(kind, recipes_dir=recipes_dir).image_hash


def _load_all(kinds: Iterable[str], recipes_dir: Path | None) -> list[Recipe]:
    return [load_recipe(kind, recipes_dir=recipes_dir) for kind in dict.fromkeys(kinds)]


def build_images(
    kinds: Sequence[str],
    *,
    client: docker.DockerClient | None = None,
    progress: Progress = print,
    force: bool = False,
    recipes_dir: Path | None = None,
) -> dict[str, str]:
    """Build (or find up to date) the images of ``kinds``; returns kind → the hash-versioned image tag."""
    recipes = _load_all(kinds, recipes_dir)
    with engine(client) as docker_client:
        return {recipe.kind: _build_kind(docker_client, recipe, progress, force) for recipe in recipes}


def outdated(
    kinds: Sequence[str], *, client: docker.DockerClient | None = None, recipes_dir: Path | None = None
) -> list[str]:
    """The kinds among ``kinds`` whose ``:latest`` image is missing or not built from the current recipe."""
    recipes = _load_all(kinds, recipes_dir)
    with engine(client) as docker_client:
        return [recipe.kind for recipe in recipes if not _is_current(docker_client, recipe)]


def prune(
    kinds: Sequence[str],
    *,
    client: docker.DockerClient | None = None,
    progress: Progress = print,
    recipes_dir: Path | None = None,
) -> list[str]:
    """Remove this platform's superseded images of ``kinds``; returns the references removed.

    Keeps the current recipe's images, whatever ``:latest`` points to, and anything a container still uses.
    Not part of ``build_images``: another checkout sharing the engine may be using an older recipe.
    """
    recipes = _load_all(kinds, recipes_dir)
    with engine(client) as docker_client:
        return [
            ref for recipe in recipes for ref in _prune_kind(docker_client, recipe, _prefixed(progress, recipe.kind))
        ]


def push_images(
    registry: str,
    kinds: Sequence[str],
    *,
    client: docker.DockerClient | None = None,
    progress: Progress = print,
    build: bool = True,
    extra_tags: Sequence[str] = (),
    recipes_dir: Path | None = None,
) -> dict[str, str]:
    """Tag the images of ``kinds`` as ``<registry>/sandbox/<kind>:<hash>``, ``:latest`` and ``:<platform version>``
    (the Helm chart's default tag, its appVersion), and ``extra_tags``, and push them; returns each pushed reference
    -> its digest. ``build`` first builds what is missing or out of date (cached: seconds when nothing changed);
    without it, an image not built from the current recipe is an error. Stops at the first failure: ``Unavailable``
    when the registry cannot be reached, ``BackendError`` otherwise."""
    registry = check_registry(registry)
    tags = list(dict.fromkeys(check_tag(tag) for tag in (*extra_tags, __version__)))
    recipes = _load_all(kinds, recipes_dir)
    pushed: dict[str, str] = {}
    with engine(client) as docker_client:
        for recipe in recipes:
            say = _prefixed(progress, recipe.kind)
            if build:
                _build_kind(docker_client, recipe, progress, force=False)
            pushed.update(push_recipe(docker_client, recipe, registry, say, tags))
    return pushed


def _build_kind(client: docker.DockerClient, recipe: Recipe, progress: Progress, force: bool) -> str:
    say = _prefixed(progress, recipe.kind)
    if not force and exists(client, recipe.versioned_tag):
        say(f"base: skip ({recipe.base_tag})")
        say(f"{recipe.stage}: skip ({recipe.versioned_tag} exists)")
    else:
        if force or not exists(client, recipe.base_tag):
            build_base(client, recipe, say)
        else:
            say(f"base: skip ({recipe.base_tag} exists)")
        if recipe.project:
            extra = build_wheels(recipe, say)
        else:
            extra = requirement_wheels(recipe, say) if recipe.requirements else []
        build_layer(client, recipe, say, force, extra)
    add_tag(client, recipe.versioned_tag, recipe.repository, "latest")
    return recipe.versioned_tag


def _prefixed(progress: Progress, kind: str) -> Progress:
    return lambda line: progress(f"[{kind}] {line}")


def _is_current(client: docker.DockerClient, recipe: Recipe) -> bool:
    versioned = image_id(client, recipe.versioned_tag)
    return versioned is not None and versioned == image_id(client, f"{recipe.repository}:latest")


def _prune_kind(client: docker.DockerClient, recipe: Recipe, say: Progress) -> list[str]:
    keep = {image_id(client, ref) for ref in (recipe.versioned_tag, recipe.base_tag, f"{recipe.repository}:latest")}
    removed: list[str] = []
    for stage in (recipe.stage, INSTALL_STAGE, "base"):
        for image in _own_images(client, recipe.kind, stage):
            if image["Id"] not in keep:
                removed += _remove_image(client, image, say)
    return removed


def _own_images(client: docker.DockerClient, kind: str, stage: str) -> list[dict[str, Any]]:
    labels = [f"{LABEL_MANAGED_BY}={MANAGED_BY}", f"{LABEL_KIND}={kind}", f"{LABEL_STAGE}={stage}"]
    try:
        return list(client.api.images(filters={"label": labels}))
    except ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot list {kind} images: {explain(e)}") from e


def _remove_image(client: docker.DockerClient, image: dict[str, Any], say: Progress) -> list[str]:
    refs = [t for t in image.get("RepoTags") or [] if t != "<none>:<none>"] or [image["Id"]]
    removed = []
    for ref in refs:
        try:
            client.api.remove_image(ref)
        except docker.errors.APIError as e:
            if e.status_code != 409:
                raise ImageBuildError(f"cannot remove image {ref}: {explain(e)}") from e
            say(f"prune: kept {ref} ({explain(e)})")
            continue
        except ENGINE_ERRORS as e:
            raise ImageBuildError(f"cannot remove image {ref}: {explain(e)}") from e
        say(f"prune: removed {ref}")
        removed.append(ref)
    return removed
