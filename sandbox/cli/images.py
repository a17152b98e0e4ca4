"""``sandbox images build|check|prune|push``: the platform's images, built from Debian packages (no registry needed)
by :mod:`sandbox.backends.docker.images.builder`, imported when a command runs (a client-only install lacks
``docker``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from sandbox.cli.common import console, fail
from sandbox.errors import SandboxError

images_app = typer.Typer(help="Build the platform's images from Debian packages (no registry needed) and push them.")

KindsArg = Annotated[
    list[str] | None,
    typer.Argument(help="terminal, desktop, browser, terminal-jupyter, controlplane (default: all but controlplane)."),
]
PushKindsArg = Annotated[
    list[str] | None, typer.Argument(help="terminal, desktop, browser, terminal-jupyter, controlplane (default: all).")
]
RecipesDirOpt = Annotated[
    Path | None, typer.Option(help="Directory of the image recipes (default: the checkout's images/).")
]


def _image_kinds(kinds: list[str] | None) -> list[str]:
    from sandbox.backends.docker.images.builder import SANDBOX_IMAGES

    return kinds or list(SANDBOX_IMAGES)


def _progress(line: str) -> None:
    # Build output is not markup: '[desktop] ...' and mmdebstrap's brackets must print as they are.
    console.print(line, markup=False, highlight=False, soft_wrap=True)


@images_app.command("build")
def images_build(
    kinds: KindsArg = None,
    force: Annotated[bool, typer.Option(help="Rebuild even when the recipe is unchanged.")] = False,
    recipes_dir: RecipesDirOpt = None,
) -> None:
    """Build images (controlplane only when named); unchanged recipes are skipped in seconds."""
    from sandbox.backends.docker.images.builder import build_images

    started = time.monotonic()
    try:
        built = build_images(_image_kinds(kinds), force=force, recipes_dir=recipes_dir, progress=_progress)
    except SandboxError as e:
        fail(e)
    for kind, tag in built.items():
        console.print(f"{kind}: [green]{tag}[/green] (also {tag.rsplit(':', 1)[0]}:latest)")
    console.print(f"images ready in {time.monotonic() - started:.1f}s")


@images_app.command("check")
def images_check(kinds: KindsArg = None, recipes_dir: RecipesDirOpt = None) -> None:
    """Build nothing: exit 0 when every image is built from its current recipe, 1 (naming the stale ones) if not."""
    from sandbox.backends.docker.images.builder import outdated

    wanted = _image_kinds(kinds)
    try:
        stale = outdated(wanted, recipes_dir=recipes_dir)
    except SandboxError as e:
        fail(e)
    for kind in wanted:
        if kind in stale:
            console.print(f"{kind}: [yellow]out of date[/yellow] (run `sandbox images build {kind}`)")
        else:
            console.print(f"{kind}: up to date")
    if stale:
        raise typer.Exit(1)


@images_app.command("prune")
def images_prune(kinds: KindsArg = None, recipes_dir: RecipesDirOpt = None) -> None:
    """Remove superseded images of this platform that no container uses; the current recipe's images stay."""
    from sandbox.backends.docker.images.builder import prune

    try:
        removed = prune(_image_kinds(kinds), recipes_dir=recipes_dir, progress=_progress)
    except SandboxError as e:
        fail(e)
    console.print(f"removed {len(removed)} image reference{'' if len(removed) == 1 else 's'}")


@images_app.command("push")
def images_push(
    registry: Annotated[str, typer.Argument(help="host[:port][/path] of the registry, e.g. 127.0.0.1:5000.")],
    kinds: PushKindsArg = None,
    build: Annotated[
        bool, typer.Option(help="Build what is missing or out of date first (--no-build: fail on it instead).")
    ] = True,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Push under this tag too, e.g. the chart's appVersion.")
    ] = None,
    recipes_dir: RecipesDirOpt = None,
) -> None:
    """Tag images as REGISTRY/sandbox/<kind>:<hash>, :latest and :<platform version> (the Helm chart's and the kustomize
    base's default tag) and push them; exit 1 on the first failure."""
    from sandbox.backends.docker.images.builder import IMAGE_KINDS, push_images

    started = time.monotonic()
    try:
        pushed = push_images(
            registry,
            kinds or list(IMAGE_KINDS),
            build=build,
            extra_tags=tag or [],
            recipes_dir=recipes_dir,
            progress=_progress,
        )
    except SandboxError as e:
        fail(e)
    for ref, digest in pushed.items():
        console.print(f"[green]{ref}[/green] {digest}", highlight=False, soft_wrap=True)
    console.print(f"pushed {len(pushed)} references in {time.monotonic() - started:.1f}s")
