"""The android image's recipe: the common agent image plus an Android SDK that cannot come from Debian.

``sandbox images build android`` takes the SDK from ``SANDBOX_ANDROID_SDK``: a directory, or a ``.tar``,
``.tar.gz``/``.tgz`` or ``.zip`` archive of one, holding ``emulator/``, ``platform-tools/`` and one x86_64 system
image under ``system-images/<api>/<tag>/x86_64/``. Without it the build fails naming what is missing; the three
other kinds never need it. The SDK's files land at ``/opt/android-sdk``; the image hash covers every one of them
(path, mode, content) so a different SDK or system image is a different image. The emulator runs with KVM, which
the container gets from the host's ``/dev/kvm`` (docs/android.md).
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from sandbox import environment
from sandbox.backends.docker.images.recipe import (
    BASE_REPO,
    DEFAULT_RECIPES_DIR,
    DOCKERFILE_TEMPLATE,
    HASH_LEN,
    SANDBOX_UID,
    FileEntry,
    Recipe,
    _agent_files,
    _overlay_files,
    base_digest,
    digest,
    flatten,
    hook_files,
    read,
    read_packages,
)
from sandbox.errors import ImageBuildError

ANDROID = "android"
SDK_ENV = environment.ANDROID_SDK
SDK_DIR = "/opt/android-sdk"
REQUIRED = ("emulator/emulator", "platform-tools/adb")
ARCHIVES = (".tar", ".tar.gz", ".tgz", ".zip")
ENV = {
    "SANDBOX_KIND": ANDROID,
    "PYTHONPATH": "/opt/sandbox-agent",
    "LANG": "C.UTF-8",
    "HOME": "/home/sandbox",
    "ANDROID_SDK_ROOT": SDK_DIR,
    "ANDROID_HOME": SDK_DIR,
    "ANDROID_AVD_HOME": "/home/sandbox/.android/avd",
    "PATH": f"{SDK_DIR}/emulator:{SDK_DIR}/platform-tools:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
}
MISSING_SDK = (
    "the android image needs an Android SDK, and {what}: set {env} to a directory (or .tar/.tar.gz/.zip of one) "
    "holding emulator/, platform-tools/ and system-images/<api>/<tag>/x86_64/ (see docs/android.md)"
)


def sdk_path(sdk: str | Path | None = None) -> Path:
    """The SDK given (or ``$SANDBOX_ANDROID_SDK``); ImageBuildError naming what is missing."""
    given = sdk if sdk is not None else (environment.android_sdk() or "")
    if not str(given).strip():
        raise ImageBuildError(MISSING_SDK.format(what=f"{SDK_ENV} is not set", env=SDK_ENV))
    path = Path(given).expanduser()
    if not path.exists():
        raise ImageBuildError(MISSING_SDK.format(what=f"{path} does not exist", env=SDK_ENV))
    if path.is_file() and not path.name.endswith(ARCHIVES):
        raise ImageBuildError(MISSING_SDK.format(what=f"{path} is neither a directory nor an archive", env=SDK_ENV))
    return path


def sdk_files(path: Path) -> list[FileEntry]:
    """The SDK's files as (path under the SDK, content, mode), sorted; an archive's single top directory is
    dropped. Checks the required components are there."""
    entries = sorted(_directory(path) if path.is_dir() else _archive(path))
    names = {name for name, _, _ in entries}
    tops = {name.split("/", 1)[0] for name in names}
    if len(tops) == 1 and not any(req in names for req in REQUIRED):  # an archive of one directory: drop it
        top = tops.pop() + "/"
        entries = [(name[len(top) :], content, mode) for name, content, mode in entries]
        names = {name for name, _, _ in entries}
    missing = [req for req in REQUIRED if req not in names]
    if not any(_is_system_image(name) for name in names):
        missing.append("system-images/<api>/<tag>/x86_64/system.img")
    if missing:
        raise ImageBuildError(f"the Android SDK {path} ({SDK_ENV}) lacks {', '.join(missing)} (see docs/android.md)")
    return entries


def _is_system_image(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 5 and parts[0] == "system-images" and parts[3] == "x86_64" and parts[4] == "system.img"


def _directory(root: Path) -> Iterator[FileEntry]:
    for p in root.rglob("*"):
        if p.is_file():
            yield p.relative_to(root).as_posix(), read(p), 0o755 if p.stat().st_mode & 0o111 else 0o644


def _archive(path: Path) -> Iterator[FileEntry]:
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    if not info.is_dir():
                        mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
                        yield info.filename.lstrip("./"), z.read(info), mode
            return
        with tarfile.open(path) as t:
            for member in t.getmembers():
                handle = t.extractfile(member) if member.isfile() else None
                if handle is not None:
                    yield member.name.removeprefix("./"), handle.read(), 0o755 if member.mode & 0o111 else 0o644
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as e:
        raise ImageBuildError(f"cannot read the Android SDK archive {path}: {e}") from e


def dockerfile(base_tag: str, *, has_overlay: bool) -> str:
    return DOCKERFILE_TEMPLATE.format(
        base_tag=base_tag,
        uid=SANDBOX_UID,
        copy_rootfs="COPY rootfs/ /\n" if has_overlay else "",
        install_wheels="",
        env=" ".join(f"{k}={v}" for k, v in ENV.items()),
    )


def load_recipe(*, recipes_dir: Path | None = None, sdk: str | Path | None = None) -> Recipe:
    """The android recipe; fails first (before reading anything) when the SDK is missing."""
    source = sdk_path(sdk)
    recipe_dir = (recipes_dir or DEFAULT_RECIPES_DIR) / ANDROID
    packages = read_packages(recipe_dir / "packages.txt")
    hooks = hook_files(recipe_dir / "hooks")
    base_hash = base_digest(packages, hooks)
    base_tag = f"{BASE_REPO}/{ANDROID}:{base_hash[:HASH_LEN]}"
    overlay = _overlay_files(recipe_dir / "rootfs")
    files = (
        *overlay,
        ("opt/sandbox/lib.sh", read(recipe_dir.parent / "common" / "lib.sh"), 0o644),
        ("opt/sandbox/entrypoint.sh", read(recipe_dir / "entrypoint.sh"), 0o755),
        *_agent_files(),
        *((f"opt/android-sdk/{name}", content, mode) for name, content, mode in sdk_files(source)),
    )
    text = dockerfile(base_tag, has_overlay=bool(overlay))
    image_hash = digest([base_hash.encode(), text.encode(), *flatten(files)])
    return Recipe(ANDROID, packages, base_hash, text, tuple(files), image_hash, hooks=tuple(hooks))
