"""The image recipes, hashes, build contexts and push helpers, with no Docker engine."""

from __future__ import annotations

import json
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from sandbox.backends.docker.images import controlplane as image_controlplane
from sandbox.backends.docker.images import layer as image_layer
from sandbox.backends.docker.images import push as image_push
from sandbox.backends.docker.images import rootfs as image_rootfs
from sandbox.backends.docker.images.builder import CONTROLPLANE, IMAGE_KINDS, load_recipe, recipe_hash
from sandbox.backends.docker.images.recipe import (
    DEFAULT_RECIPES_DIR,
    IMPORT_CHANGES,
    KINDS,
    MMDEBSTRAP_OPTIONS,
    SUITE,
    VARIANTS,
    Recipe,
    base_digest,
    digest,
)
from sandbox.cli.images import _image_kinds
from sandbox.errors import BackendError, ImageBuildError, InvalidArgument, Unavailable

PROJECT_ROOT = DEFAULT_RECIPES_DIR.parent


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's pyproject.toml and package, to change without touching the checkout."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PROJECT_ROOT / "pyproject.toml", root)
    shutil.copytree(PROJECT_ROOT / "sandbox", root / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_sandbox_base_hashes_do_not_depend_on_hook_support() -> None:
    """A recipe without hooks hashes exactly as before hooks existed, so no sandbox base is rebuilt for them."""
    for kind in KINDS:
        recipe = load_recipe(kind)
        assert recipe.hooks == ()
        legacy = {"suite": SUITE, "packages": recipe.packages, "options": MMDEBSTRAP_OPTIONS, "changes": IMPORT_CHANGES}
        assert recipe.base_hash == digest([json.dumps(legacy, sort_keys=True).encode()])


def test_hooks_change_the_base_hash() -> None:
    packages = ("python3",)
    plain = base_digest(packages, [])
    hooked = base_digest(packages, [("customize10-x", b"#!/bin/sh\ntrue\n", 0o755)])
    changed = base_digest(packages, [("customize10-x", b"#!/bin/sh\nfalse\n", 0o755)])
    assert len({plain, hooked, changed}) == 3


def test_the_controlplane_recipe() -> None:
    recipe = load_recipe(CONTROLPLANE)
    assert recipe.repository == "sandbox/controlplane"
    assert recipe.stage == "app"
    assert {"python3", "python3-venv", "tini", "ca-certificates"} <= set(recipe.packages)
    assert "docker.io" not in recipe.packages
    assert [name for name, _, _ in recipe.hooks] == ["customize50-novnc"]
    names = {name for name, _, _ in recipe.project}
    assert {"pyproject.toml", "sandbox/server.py", "sandbox/api/web/static/list.html"} <= names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    dockerfile = recipe.dockerfile
    assert f"FROM {recipe.base_tag} AS install" in dockerfile
    assert "pip install --no-index --find-links /tmp/wheels" in dockerfile
    assert "USER 10001:10001" in dockerfile
    assert "EXPOSE 50051 8080" in dockerfile
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "sandbox", "server"]' in dockerfile
    assert recipe_hash(CONTROLPLANE) == recipe.image_hash


def test_controlplane_hash_follows_the_source_not_the_readme(project: Path) -> None:
    first = image_controlplane.load_controlplane_recipe(project_root=project)
    (project / "README.md").write_text("a README change rebuilds nothing")
    assert image_controlplane.load_controlplane_recipe(project_root=project).image_hash == first.image_hash
    (project / "sandbox" / "server.py").write_text((project / "sandbox" / "server.py").read_text() + "\n# edit\n")
    edited = image_controlplane.load_controlplane_recipe(project_root=project)
    assert edited.image_hash != first.image_hash
    assert edited.base_hash == first.base_hash
    (project / "sandbox" / "api" / "web" / "static" / "style.css").write_text("body {}")
    assert image_controlplane.load_controlplane_recipe(project_root=project).image_hash != edited.image_hash


def test_controlplane_installs_every_extra_but_the_developers_and_the_clients(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    assert "[project.optional-dependencies]" in text
    extra = '[project.optional-dependencies]\ncloud = ["httpx"]\nzeta = ["httpx"]\n'
    pyproject.write_text(text.replace("[project.optional-dependencies]\n", extra, 1))
    recipe = image_controlplane.load_controlplane_recipe(project_root=project)
    installed = recipe.dockerfile.split("--quiet ", 1)[1].split()[0]
    assert installed.startswith("'sandbox[") and installed.endswith("]'")
    extras = installed[len("'sandbox[") : -len("]'")].split(",")
    assert extras == sorted(extras) and {"cloud", "zeta"} <= set(extras) and "dev" not in extras
    # the harnesses sandbox.compat adapts run on the client side: their packages (desktop-env pulls torch) never
    # go into the control plane's image
    assert "kubernetes" in extras and not {"osworld", "swerex", "gym"} & set(extras)


def test_controlplane_needs_the_grpc_stubs(project: Path) -> None:
    (project / "sandbox" / "wire" / "grpc_gen" / "sandbox_pb2.py").unlink()
    with pytest.raises(ImageBuildError, match=r"gen_proto\.sh"):
        image_controlplane.load_controlplane_recipe(project_root=project)


def test_a_wheel_without_the_web_view_pages_is_refused(tmp_path: Path) -> None:
    project = (
        ("pyproject.toml", b'[project]\nname = "sandbox"\n', 0o644),
        ("sandbox/server.py", b"", 0o644),
        ("sandbox/api/web/static/list.html", b"<html>", 0o644),
        ("sandbox/wire/grpc_gen/sandbox_pb2.pyi", b"", 0o644),
    )
    with zipfile.ZipFile(tmp_path / "sandbox-0.1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("sandbox/server.py", "")
    with pytest.raises(ImageBuildError, match=r"sandbox/api/web/static/list\.html.*package-data"):
        image_controlplane._check_package_data(project, tmp_path, "sandbox")
    with zipfile.ZipFile(tmp_path / "sandbox-0.1.0-py3-none-any.whl", "a") as wheel:
        wheel.writestr("sandbox/api/web/static/list.html", "<html>")
    image_controlplane._check_package_data(project, tmp_path, "sandbox")  # the .pyi stub is not needed


def test_image_kinds_and_defaults() -> None:
    assert (*KINDS, *VARIANTS, CONTROLPLANE) == IMAGE_KINDS
    assert _image_kinds(None) == [*KINDS, *VARIANTS], "`sandbox images build`: kinds and variants, no controlplane"
    with pytest.raises(InvalidArgument, match="controlplane"):
        load_recipe("nope")


def test_mmdebstrap_gets_the_hook_directory(tmp_path: Path) -> None:
    recipe = load_recipe(CONTROLPLANE)
    hooks = image_rootfs._write_hooks(recipe, tmp_path / "hooks")
    assert hooks is not None
    script = hooks / "customize50-novnc"
    assert script.stat().st_mode & 0o111
    assert script.read_bytes() == recipe.hooks[0][1]
    command = image_rootfs._mmdebstrap_command(recipe, tmp_path / "out.tar", hooks)
    assert f"--hook-directory={hooks}" in command
    assert command[-2:] == [SUITE, str(tmp_path / "out.tar")]
    terminal = load_recipe("terminal")
    assert image_rootfs._write_hooks(terminal, tmp_path / "none") is None
    assert not any(arg.startswith("--hook-directory") for arg in image_rootfs._mmdebstrap_command(terminal, tmp_path))


def test_build_context_holds_the_wheels() -> None:
    recipe = load_recipe(CONTROLPLANE)
    wheel = ("wheels/x-1-py3-none-any.whl", b"PK", 0o644)
    with tarfile.open(fileobj=image_layer._build_context(recipe, [wheel])) as tar:
        names = tar.getnames()
        dockerfile = tar.extractfile("Dockerfile")
        assert dockerfile is not None and dockerfile.read().decode() == recipe.dockerfile
    assert names == ["Dockerfile", "wheels/x-1-py3-none-any.whl"]


@pytest.mark.parametrize("good", ["127.0.0.1:5000", "localhost:5000", "registry.example.com", "r.io:443/team/ml"])
def test_registry_names(good: str) -> None:
    assert image_push.check_registry(good + "/") == good


@pytest.mark.parametrize("bad", ["http://127.0.0.1:5000", "", "host:port", "-bad.example", "r.io/Team", "a b"])
def test_bad_registry_names(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        image_push.check_registry(bad)


def test_tags() -> None:
    assert image_push.check_tag("0.1.0") == "0.1.0"
    for bad in ("", ".x", "-x", "a:b", "x" * 129):
        with pytest.raises(InvalidArgument):
            image_push.check_tag(bad)


def test_push_progress_prints_each_layer_status_once() -> None:
    seen: set[tuple[str, str]] = set()
    chunks: list[dict[str, Any]] = [
        {"status": "The push refers to repository [r/sandbox/terminal]"},
        {"status": "Preparing", "id": "a1"},
        {"status": "Pushing", "id": "a1", "progressDetail": {"current": 1}},
        {"status": "Pushing", "id": "a1", "progressDetail": {"current": 2}},
        {"status": "Pushed", "id": "a1"},
        {"progressDetail": {}, "aux": {"Tag": "latest", "Digest": "sha256:0", "Size": 1}},
    ]
    lines = [image_push._progress_line(chunk, seen) for chunk in chunks]
    assert lines == [
        "The push refers to repository [r/sandbox/terminal]",
        "a1: Preparing",
        "a1: Pushing",
        None,
        "a1: Pushed",
        None,
    ]


def test_push_errors_name_the_registry() -> None:
    refused = image_push._push_error("r:1/sandbox/terminal:x", "r:1", 'Get "http://r:1/v2/": dial tcp: refused')
    assert isinstance(refused, Unavailable)
    assert "cannot reach the registry r:1" in refused.message
    denied = image_push._push_error("r:1/sandbox/terminal:x", "r:1", "denied: requested access is denied")
    assert type(denied) is BackendError
    assert "registry r:1" in denied.message


def test_push_of_an_unbuilt_image_says_how_to_build() -> None:
    class NoImages:
        class api:  # stands in for docker.APIClient
            @staticmethod
            def inspect_image(ref: str) -> dict[str, str]:
                raise docker.errors.ImageNotFound(ref)

    recipe: Recipe = load_recipe("terminal")
    with pytest.raises(ImageBuildError, match="sandbox images build terminal"):
        image_push.push_recipe(NoImages(), recipe, "127.0.0.1:5000", print)


def test_recipe_files_are_hashed_length_prefixed() -> None:
    assert digest([b"ab", b"c"]) != digest([b"a", b"bc"])


def test_the_desktop_image_pins_pyautogui_by_hash_and_unpacks_its_wheels(tmp_path: Path) -> None:
    desktop = load_recipe("desktop")
    pins = [line for line in desktop.requirements.decode().splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("pyautogui==") for line in pins)
    assert all("==" in line and "--hash=sha256:" in line for line in pins), pins
    assert "COPY wheels/ /tmp/wheels/" in desktop.dockerfile and "python3-tk" in desktop.packages
    assert load_recipe("terminal").requirements == b"" and "wheels" not in load_recipe("terminal").dockerfile

    recipes = tmp_path / "images"
    shutil.copytree(DEFAULT_RECIPES_DIR, recipes)
    assert load_recipe("desktop", recipes_dir=recipes).image_hash == desktop.image_hash
    pinned = recipes / "desktop" / "requirements.txt"
    pinned.write_text(pinned.read_text().replace("pytweening==1.2.0", "pytweening==1.1.0"))
    changed = load_recipe("desktop", recipes_dir=recipes)
    assert changed.image_hash != desktop.image_hash and changed.base_hash == desktop.base_hash


def test_mmdebstraps_output_is_progress_and_its_failure_quotes_its_last_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin" / "mmdebstrap"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "I: resolving $#"\necho "E: cannot reach the mirror" >&2\nexit 3\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    lines: list[str] = []
    with pytest.raises(ImageBuildError) as failed:
        image_rootfs._run_mmdebstrap(load_recipe("terminal"), tmp_path / "rootfs.tar", None, lines.append)
    assert lines[0].startswith("mmdebstrap | I: resolving ") and lines[1] == "mmdebstrap | E: cannot reach the mirror"
    assert "mmdebstrap for terminal exited with 3" in failed.value.message
    assert "E: cannot reach the mirror" in failed.value.message
