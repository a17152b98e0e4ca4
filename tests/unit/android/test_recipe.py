"""The android image's recipe: its structure, and the clear failure without an Android SDK."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.backends.docker.images import android as image_android
from sandbox.backends.docker.images.builder import IMAGE_KINDS, load_recipe
from sandbox.backends.docker.images.recipe import KINDS
from sandbox.cli import app
from sandbox.errors import ImageBuildError

RECIPE = Path(__file__).resolve().parents[3] / "images" / "android"


def fake_sdk(root: Path) -> Path:
    for name, content in {
        "emulator/emulator": "#!/bin/sh\n",
        "platform-tools/adb": "#!/bin/sh\n",
        "system-images/android-34/google_apis/x86_64/system.img": "img",
        "system-images/android-34/google_apis/x86_64/source.properties": "Pkg.Revision=14\n",
    }.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        if name.endswith(("emulator", "adb")):
            path.chmod(0o755)
    return root


def test_without_an_sdk_the_build_fails_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(image_android.SDK_ENV, raising=False)
    with pytest.raises(ImageBuildError, match="SANDBOX_ANDROID_SDK is not set"):
        load_recipe("android")
    missing = tmp_path / "no-sdk"
    monkeypatch.setenv(image_android.SDK_ENV, str(missing))
    with pytest.raises(ImageBuildError, match=f"{missing} does not exist"):
        load_recipe("android")
    result = CliRunner().invoke(app, ["images", "build", "android"])
    assert result.exit_code != 0 and str(missing) in " ".join(result.output.split())


def test_an_incomplete_sdk_is_named(tmp_path: Path) -> None:
    sdk = fake_sdk(tmp_path / "sdk")
    (sdk / "emulator/emulator").unlink()
    with pytest.raises(ImageBuildError, match="lacks emulator/emulator"):
        image_android.load_recipe(sdk=sdk)


def test_the_other_kinds_are_unchanged() -> None:
    assert KINDS == ("terminal", "desktop", "browser") and "android" not in IMAGE_KINDS


def test_recipe_structure(tmp_path: Path) -> None:
    recipe = image_android.load_recipe(sdk=fake_sdk(tmp_path / "sdk"))
    files = {name: mode for name, _, mode in recipe.files}
    assert files["opt/android-sdk/emulator/emulator"] == 0o755
    assert "opt/android-sdk/system-images/android-34/google_apis/x86_64/system.img" in files
    assert files["opt/sandbox/entrypoint.sh"] == 0o755
    assert "opt/sandbox-agent/sandbox/agent/android/driver.py" in files
    assert "opt/sandbox-agent/sandbox/agent/android/emulator_controller.proto" in files
    assert "python3-grpcio" in recipe.packages and "python3" in recipe.packages
    assert "ANDROID_SDK_ROOT=/opt/android-sdk" in recipe.dockerfile and "SANDBOX_KIND=android" in recipe.dockerfile
    assert recipe.kind == "android" and recipe.versioned_tag.startswith("sandbox/android:")
    entrypoint = (RECIPE / "entrypoint.sh").read_text()
    for flag in ("-no-window", "-grpc", "/dev/kvm", "start_agent", "x86_64"):
        assert flag in entrypoint


def test_the_hash_follows_the_sdk_and_an_archive_equals_its_directory(tmp_path: Path) -> None:
    sdk = fake_sdk(tmp_path / "sdk")
    first = image_android.load_recipe(sdk=sdk).image_hash
    archive = tmp_path / "sdk.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(sdk, arcname="android-sdk")
    assert image_android.load_recipe(sdk=archive).image_hash == first
    (sdk / "system-images/android-34/google_apis/x86_64/system.img").write_text("another image")
    assert image_android.load_recipe(sdk=sdk).image_hash != first
