"""What goes into one kind's images, and the hashes that name them (no Docker engine needed).

The base stage hashes the package list of ``images/<kind>/packages.txt``, the mmdebstrap hook scripts of
``images/<kind>/hooks/`` (if any), the Debian suite and the mmdebstrap and import options; the top layer hashes the
base hash, the generated Dockerfile and every file copied in: the ``images/<kind>/rootfs/`` overlay,
``images/common/lib.sh``, ``images/<kind>/entrypoint.sh`` and the in-sandbox agent (``sandbox/__init__.py``,
``sandbox/protocol.py`` and every source file under ``sandbox/agent/``), and in the browser and desktop images the
games of ``sandbox/games/``. The control-plane image's recipe is
:mod:`.controlplane`'s, made of the same parts.

A variant (``VARIANTS``: ``images/<variant>/`` → the kind it extends) is the kind's recipe plus its own: its
``packages.txt`` adds to the kind's, its ``rootfs/``, ``hooks/`` and ``requirements.txt`` (if any) add to the kind's,
its ``entrypoint.sh`` (if any) replaces the kind's. Its image, ``sandbox/<variant>:latest``, runs as that kind
(``SANDBOX_KIND``): a spec names it, ``{"kind": "terminal", "image": "sandbox/terminal-jupyter:latest"}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import sandbox
from sandbox import games
from sandbox.errors import ImageBuildError, InvalidArgument

KINDS = ("terminal", "desktop", "browser")
"""The sandbox kinds whose images ``sandbox images build`` makes by default."""
VARIANTS: dict[str, str] = {"terminal-jupyter": "terminal"}
"""Image variants → the sandbox kind each extends and runs as (``images/<variant>/``, see the module's docstring)."""
SANDBOX_IMAGES = (*KINDS, *VARIANTS)
"""What ``sandbox images build`` (and ``check``, ``prune``, and so setup) makes by default: kinds and variants."""
CONTROLPLANE = "controlplane"
IMAGE_KINDS = (*SANDBOX_IMAGES, CONTROLPLANE)
"""Every image the platform builds: the sandbox kinds, their variants and the control plane (built on demand)."""
SUITE = "bookworm"
BASE_REPO = "sandbox-base"
IMAGE_REPO = "sandbox"
HASH_LEN = 12
SANDBOX_UID = 1000

LABEL_MANAGED_BY = "sandbox.managed-by"
LABEL_KIND = "sandbox.image.kind"
LABEL_HASH = "sandbox.image.recipe-hash"
LABEL_BASE_HASH = "sandbox.image.base-hash"
LABEL_STAGE = "sandbox.image.stage"
MANAGED_BY = "sandbox"

PACKAGE_DIR = Path(sandbox.__file__).resolve().parent
DEFAULT_RECIPES_DIR = PACKAGE_DIR.parent / "images"

MMDEBSTRAP_OPTIONS: tuple[str, ...] = (
    "--variant=apt",
    '--aptopt=APT::Install-Recommends "false"',
    '--aptopt=Acquire::Languages "none"',
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-include=/usr/share/locale/locale.alias",
    "--dpkgopt=path-exclude=/usr/share/lintian/*",
    "--dpkgopt=path-exclude=/usr/lib/chromium/locales/*",
    "--dpkgopt=path-include=/usr/lib/chromium/locales/en-US.pak",
)

IMPORT_CHANGES: tuple[str, ...] = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)

OSWORLD_USER = "user"
OSWORLD_HOME = "/home/user"
XDG_FOLDERS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Public", "Templates", "Videos")
"""The standard folders of a freshly made Ubuntu user's home, which OSWorld's tasks assume exist."""

KIND_ENV: dict[str, dict[str, str]] = {
    "desktop": {
        "DISPLAY": ":0",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/tmp/sandbox-dbus/session",
        "HOME": OSWORLD_HOME,
        "USER": OSWORLD_USER,
    },
    "browser": {"DISPLAY": ":0"},
}
"""Environment for the kind's image, so ``docker exec`` sessions reach the X server and session bus too."""

DOCKERFILE_TEMPLATE = """\
FROM {base_tag}
RUN groupadd --gid {uid} sandbox \\
 && useradd --uid {uid} --gid {uid} --create-home --home-dir /home/sandbox --shell /bin/bash sandbox \\
 && install -d -o {uid} -g {uid} -m 0755 /workspace /run/sandbox /home/sandbox/.config /home/sandbox/Desktop \\
 && install -d -o 0 -g 0 -m 1777 /tmp/.X11-unix
{copy_rootfs}COPY opt/ /opt/
RUN python3 -m compileall -q /opt/sandbox-agent
{install_wheels}ENV {env}
USER {uid}:{uid}
WORKDIR /workspace
CMD ["/opt/sandbox/entrypoint.sh"]
"""


FileEntry = tuple[str, bytes, int]
"""(path, content, mode) of a file that goes into a build."""


@dataclass(frozen=True)
class Recipe:
    """Everything that goes into one kind's images, and the hashes that name them."""

    kind: str
    packages: tuple[str, ...]
    base_hash: str
    dockerfile: str
    files: tuple[FileEntry, ...]
    """The build context besides the Dockerfile: (path in the context, content, mode)."""
    image_hash: str
    hooks: tuple[FileEntry, ...] = ()
    """mmdebstrap hook scripts (``images/<kind>/hooks/``), given to it as ``--hook-directory``."""
    project: tuple[FileEntry, ...] = ()
    """The control plane's: the project files (pyproject.toml, the package) that ``pip wheel`` turns into the
    wheels the top layer installs; the wheels join the build context under ``wheels/`` at build time."""
    requirements: bytes = b""
    """``images/<kind>/requirements.txt``: pure-Python packages, pinned by hash, whose wheels ``pip wheel`` makes on
    the host at build time (:mod:`.wheels`); the top layer unpacks them into python3's site-packages."""
    stage: str = "agent"
    """The top layer's name in progress lines and in the ``sandbox.image.stage`` label."""

    @property
    def base_tag(self) -> str:
        return f"{BASE_REPO}/{self.kind}:{self.base_hash[:HASH_LEN]}"

    @property
    def repository(self) -> str:
        return f"{IMAGE_REPO}/{self.kind}"

    @property
    def versioned_tag(self) -> str:
        return f"{self.repository}:{self.image_hash[:HASH_LEN]}"


def image_tag(kind: str) -> str:
    """The tag a sandbox of ``kind`` runs by default (a variant's: the tag a spec names to run it)."""
    check_kind(kind)
    return f"{IMAGE_REPO}/{kind}:latest"


def recipe_hash(kind: str, *, recipes_dir: Path | None = None) -> str:
    """The full hash of ``kind``'s current recipe; images carry it in the ``sandbox.image.recipe-hash`` label."""
    return load_recipe(kind, recipes_dir=recipes_dir).image_hash


def load_recipe(kind: str, *, recipes_dir: Path | None = None) -> Recipe:
    """The recipe of a sandbox kind's image or of a variant's (its kind's recipe plus its own directory's)."""
    check_kind(kind)
    root = recipes_dir or DEFAULT_RECIPES_DIR
    runs_as = VARIANTS.get(kind, kind)
    dirs = [root / runs_as, *([root / kind] if kind != runs_as else [])]
    packages = read_packages(dirs[0] / "packages.txt")
    if len(dirs) > 1:
        packages = tuple(sorted({*packages, *read_packages(dirs[1] / "packages.txt")}))
    hooks = [hook for d in dirs for hook in hook_files(d / "hooks")]
    base_hash = base_digest(packages, hooks)
    base_tag = f"{BASE_REPO}/{kind}:{base_hash[:HASH_LEN]}"
    overlay = list({entry[0]: entry for d in dirs for entry in _overlay_files(d / "rootfs")}.values())
    requirements = b"".join(read(d / "requirements.txt") for d in dirs if (d / "requirements.txt").is_file())
    own = dirs[-1] / "entrypoint.sh"
    entrypoint = own if own.is_file() else dirs[0] / "entrypoint.sh"
    dockerfile = _dockerfile(runs_as, base_tag, has_overlay=bool(overlay), has_wheels=bool(requirements))
    files = (
        *overlay,
        ("opt/sandbox/lib.sh", read(root / "common" / "lib.sh"), 0o644),
        ("opt/sandbox/entrypoint.sh", read(entrypoint), 0o755),
        *_agent_files(),
        *(_game_files() if runs_as in games.IMAGE_KINDS else ()),
    )
    pinned = [b"requirements.txt", requirements] if requirements else []  # the wheels follow from the pins
    image_hash = digest([base_hash.encode(), dockerfile.encode(), *flatten(files), *pinned])
    return Recipe(
        kind, packages, base_hash, dockerfile, files, image_hash, hooks=tuple(hooks), requirements=requirements
    )


def check_kind(kind: str) -> None:
    if kind not in SANDBOX_IMAGES:
        raise InvalidArgument(f"unknown image kind {kind!r}; expected one of {', '.join(SANDBOX_IMAGES)}")


def base_digest(packages: tuple[str, ...], hooks: Iterable[FileEntry]) -> str:
    """The base stage's hash; hooks count only when there are some, so a recipe without any keeps its hash."""
    recipe: dict[str, object] = {
        "suite": SUITE,
        "packages": packages,
        "options": MMDEBSTRAP_OPTIONS,
        "changes": IMPORT_CHANGES,
    }
    hook_list = list(hooks)
    if hook_list:
        recipe["hooks"] = digest(flatten(hook_list))
    return digest([json.dumps(recipe, sort_keys=True).encode()])


def hook_files(root: Path) -> list[FileEntry]:
    """``images/<kind>/hooks/*``: mmdebstrap runs those named ``setup*``, ``extract*``, ``essential*`` or
    ``customize*`` at that stage, in name order, with the root file system's directory as ``$1``."""
    if not root.is_dir():
        return []
    paths = sorted(p for p in root.iterdir() if p.is_file())
    return [(p.name, read(p), 0o755) for p in paths]


def read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ImageBuildError(f"cannot read image recipe file {path}: {e}") from e


def read_packages(path: Path) -> tuple[str, ...]:
    names = (line.split("#", 1)[0].strip() for line in read(path).decode().splitlines())
    packages = tuple(sorted({name for name in names if name}))
    if not packages:
        raise ImageBuildError(f"{path} lists no packages")
    return packages


INSTALL_WHEELS = """\
COPY wheels/ /tmp/wheels/
RUN site=$(python3 -c 'import site; print(site.getsitepackages()[0])') && mkdir -p "$site" \\
 && for wheel in /tmp/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$site" || exit 1; done \\
 && python3 -m compileall -q "$site" && rm -rf /tmp/wheels
"""
"""Pure-Python wheels are zip files laid out as installed: unpacked, they are installed (no pip in the image)."""

OSWORLD_USER_SETUP = f"""\
RUN usermod --login {OSWORLD_USER} --home {OSWORLD_HOME} --move-home sandbox \\
 && groupmod --new-name {OSWORLD_USER} sandbox \\
 && ln -s {OSWORLD_USER} /home/sandbox \\
 && install -d -o {{uid}} -g {{uid}} -m 0755 {" ".join(f"{OSWORLD_HOME}/{d}" for d in XDG_FOLDERS)} \\
 && ln -s chromium {OSWORLD_HOME}/.config/google-chrome \\
 && printf 'XDG_%s_DIR="$HOME/%s"\\n' {" ".join(f"{d.upper()} {d}" for d in XDG_FOLDERS)} \\
    | sed 's/XDG_PUBLIC_DIR/XDG_PUBLICSHARE_DIR/' > {OSWORLD_HOME}/.config/user-dirs.dirs \\
 && chown -h {{uid}}:{{uid}} {OSWORLD_HOME}/.config/google-chrome {OSWORLD_HOME}/.config/user-dirs.dirs
"""
"""The desktop image follows OSWorld's VM: the sandbox user is ``user`` (same uid) with home ``/home/user`` and the
standard XDG folders; ``/home/sandbox`` stays a link to it, so the platform's paths name the same files; Chrome's
profile folder is Chromium's."""


def _dockerfile(kind: str, base_tag: str, *, has_overlay: bool, has_wheels: bool = False) -> str:
    env = {
        "SANDBOX_KIND": kind,
        "PYTHONPATH": "/opt/sandbox-agent",
        "LANG": "C.UTF-8",
        "HOME": "/home/sandbox",
        **KIND_ENV.get(kind, {}),
    }
    return DOCKERFILE_TEMPLATE.format(
        base_tag=base_tag,
        uid=SANDBOX_UID,
        # The desktop's user setup runs right after the user is made, before the overlay lands.
        copy_rootfs=(OSWORLD_USER_SETUP.format(uid=SANDBOX_UID) if kind == "desktop" else "")
        + ("COPY rootfs/ /\n" if has_overlay else ""),
        install_wheels=INSTALL_WHEELS if has_wheels else "",
        env=" ".join(f"{k}={v}" for k, v in env.items()),
    )


def _overlay_files(root: Path) -> list[FileEntry]:
    """Files under ``images/<kind>/rootfs/`` land at the same path in the image, owned by root, modes kept."""
    if not root.is_dir():
        return []
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    return [
        (f"rootfs/{p.relative_to(root).as_posix()}", read(p), 0o755 if p.stat().st_mode & 0o111 else 0o644)
        for p in paths
    ]


def _agent_files() -> list[FileEntry]:
    sources = [PACKAGE_DIR / "__init__.py", PACKAGE_DIR / "protocol.py"]
    sources += sorted(p for p in (PACKAGE_DIR / "agent").rglob("*") if p.is_file() and is_source(p))
    return [(f"opt/sandbox-agent/sandbox/{p.relative_to(PACKAGE_DIR).as_posix()}", read(p), 0o644) for p in sources]


def _game_files() -> list[FileEntry]:
    """The browser games (``sandbox/games``), at ``/opt/sandbox/games`` in the image."""
    root = games.IMAGE_DIR.lstrip("/")
    return [(f"{root}/{name}", content, 0o644) for name, content in games.asset_files()]


def is_source(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix not in {".pyc", ".pyo"}


def flatten(files: Iterable[FileEntry]) -> Iterator[bytes]:
    for name, content, mode in files:
        yield name.encode()
        yield f"{mode:o}".encode()
        yield content


def digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()
