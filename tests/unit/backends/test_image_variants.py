"""Image variants (``images/<variant>/``, ``image_recipe.VARIANTS``): a kind's recipe plus the variant's own, built,
checked and pruned with the kinds by default, running as the kind. No Docker engine."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sandbox.backends.docker.images.builder import SANDBOX_IMAGES, load_recipe
from sandbox.backends.docker.images.recipe import DEFAULT_RECIPES_DIR, KINDS, VARIANTS, image_tag
from sandbox.cli.images import _image_kinds
from sandbox.errors import ImageBuildError, InvalidArgument

JUPYTER = "terminal-jupyter"


@pytest.fixture
def recipes(tmp_path: Path) -> Path:
    """A copy of images/ to change without touching the checkout."""
    root = tmp_path / "images"
    shutil.copytree(DEFAULT_RECIPES_DIR, root)
    return root


def test_the_jupyter_variant_is_the_terminal_recipe_plus_jupyter() -> None:
    assert VARIANTS[JUPYTER] == "terminal" and set(VARIANTS.values()) <= set(KINDS)
    variant, terminal = load_recipe(JUPYTER), load_recipe("terminal")
    assert set(variant.packages) == {*terminal.packages, "jupyter-notebook", "python3-ipykernel"}
    assert variant.kind == JUPYTER and variant.repository == "sandbox/terminal-jupyter"
    assert variant.base_tag.startswith("sandbox-base/terminal-jupyter:")
    assert image_tag(JUPYTER) == "sandbox/terminal-jupyter:latest"
    # It runs as a terminal sandbox: the terminal's entrypoint, agent and environment, on its own base.
    assert "ENV SANDBOX_KIND=terminal " in variant.dockerfile
    assert variant.dockerfile.replace(variant.base_tag, "BASE") == terminal.dockerfile.replace(
        terminal.base_tag, "BASE"
    )
    assert variant.files == terminal.files
    assert variant.base_hash != terminal.base_hash and variant.image_hash != terminal.image_hash


def test_variants_are_built_checked_and_pruned_by_default() -> None:
    assert (*KINDS, *VARIANTS) == SANDBOX_IMAGES
    assert _image_kinds(None) == list(SANDBOX_IMAGES)  # setup's `sandbox images check` / `build` with no argument
    assert _image_kinds([JUPYTER]) == [JUPYTER]
    with pytest.raises(InvalidArgument, match=JUPYTER):
        load_recipe("terminal-nope")


def test_a_variants_files_add_to_its_kinds_and_its_entrypoint_replaces_it(recipes: Path) -> None:
    terminal = load_recipe("terminal", recipes_dir=recipes)
    before = load_recipe(JUPYTER, recipes_dir=recipes)
    (recipes / JUPYTER / "packages.txt").write_text("jupyter-notebook\npython3-ipykernel\nhtop\n")
    more = load_recipe(JUPYTER, recipes_dir=recipes)
    assert "htop" in more.packages and more.base_hash != before.base_hash
    assert load_recipe("terminal", recipes_dir=recipes).image_hash == terminal.image_hash  # the kind is untouched

    (recipes / JUPYTER / "rootfs" / "etc" / "jupyter").mkdir(parents=True)
    (recipes / JUPYTER / "rootfs" / "etc" / "jupyter" / "jupyter_notebook_config.py").write_text("c = 1\n")
    (recipes / JUPYTER / "entrypoint.sh").write_text("#!/bin/bash\necho variant\n")
    (recipes / JUPYTER / "hooks").mkdir()
    (recipes / JUPYTER / "hooks" / "customize10-x").write_text("#!/bin/sh\ntrue\n")
    own = load_recipe(JUPYTER, recipes_dir=recipes)
    files = {name: content for name, content, _ in own.files}
    assert files["rootfs/etc/jupyter/jupyter_notebook_config.py"] == b"c = 1\n"
    assert files["opt/sandbox/entrypoint.sh"] == b"#!/bin/bash\necho variant\n"
    assert "COPY rootfs/ /" in own.dockerfile
    assert [name for name, _, _ in own.hooks] == ["customize10-x"] and own.base_hash != more.base_hash
    assert load_recipe("terminal", recipes_dir=recipes).image_hash == terminal.image_hash


def test_a_variant_without_its_own_packages_is_refused(recipes: Path) -> None:
    (recipes / JUPYTER / "packages.txt").write_text("# nothing\n")
    with pytest.raises(ImageBuildError, match="lists no packages"):
        load_recipe(JUPYTER, recipes_dir=recipes)
