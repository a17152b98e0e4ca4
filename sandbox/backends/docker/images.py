"""Builds the sandbox images without a container registry, in two cached stages.

1. base: ``mmdebstrap`` makes a Debian root file system from ``images/<kind>/packages.txt``; it is imported into
   Docker as ``sandbox-base/<kind>:<hash12>``, the hash covering the package list and the mmdebstrap options.
2. agent: a generated Dockerfile ``FROM`` that base adds the ``sandbox`` user (uid 1000), the files under
   ``images/<kind>/rootfs/`` (if any, at the same paths), ``images/<kind>/entrypoint.sh`` and the in-sandbox agent
   (``sandbox/__init__.py``, ``sandbox/protocol.py``, ``sandbox/agent/``). It is tagged ``sandbox/<kind>:<hash12>``
   and ``sandbox/<kind>:latest``, the hash covering the base hash, the Dockerfile and every file copied in.

A stage whose tag already exists is skipped, so a rebuild with no change takes well under a second. Synchronous:
call it from a thread in async code. ``python -m sandbox.backends.docker.images [KIND...] [--force] [--prune]``
builds; ``--check`` only reports what is out of date (exit 1).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

import sandbox
from sandbox.errors import ImageBuildError, InvalidArgument, SandboxError

__all__ = [
    "KINDS",
    "ImageBuildError",
    "build_images",
    "image_tag",
    "outdated",
    "prune",
    "recipe_hash",
]

KINDS = ("terminal", "desktop", "browser")
SUITE = "bookworm"
BASE_REPO = "sandbox-base"
IMAGE_REPO = "sandbox"
HASH_LEN = 12
LOG_TAIL = 40
SANDBOX_UID = 1000
ENGINE_TIMEOUT = 600

LABEL_MANAGED_BY = "sandbox.managed-by"
LABEL_KIND = "sandbox.image.kind"
LABEL_HASH = "sandbox.image.recipe-hash"
LABEL_BASE_HASH = "sandbox.image.base-hash"
LABEL_STAGE = "sandbox.image.stage"
MANAGED_BY = "sandbox"

DEFAULT_RECIPES_DIR = Path(__file__).resolve().parents[3] / "images"
PACKAGE_DIR = Path(sandbox.__file__).resolve().parent

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

KIND_ENV: dict[str, dict[str, str]] = {
    "desktop": {"DISPLAY": ":0", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/tmp/sandbox-dbus/session"},
    "browser": {"DISPLAY": ":0"},
}
"""Environment for the kind's image, so ``docker exec`` sessions reach the X server and session bus too."""

DOCKERFILE_TEMPLATE = """\
FROM {base_tag}
RUN groupadd --gid {uid} sandbox \\
 && useradd --uid {uid} --gid {uid} --create-home --home-dir /home/sandbox --shell /bin/bash sandbox \\
 && install -d -o {uid} -g {uid} -m 0755 /workspace /run/sandbox /home/sandbox/.config \\
 && install -d -o 0 -g 0 -m 1777 /tmp/.X11-unix
{copy_rootfs}COPY opt/ /opt/
RUN python3 -m compileall -q /opt/sandbox-agent
ENV {env}
USER {uid}:{uid}
WORKDIR /workspace
CMD ["/opt/sandbox/entrypoint.sh"]
"""

Progress = Callable[[str], None]

_BUILD_CHATTER = (" ---> ", "Removing intermediate container")
_ENGINE_ERRORS = (docker.errors.DockerException, requests.RequestException)


@dataclass(frozen=True)
class Recipe:
    """Everything that goes into one kind's images, and the hashes that name them."""

    kind: str
    packages: tuple[str, ...]
    base_hash: str
    dockerfile: str
    files: tuple[tuple[str, bytes, int], ...]
    """The build context besides the Dockerfile: (path in the context, content, mode)."""
    image_hash: str

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
    """The tag a sandbox of ``kind`` runs by default."""
    _check_kind(kind)
    return f"{IMAGE_REPO}/{kind}:latest"


def recipe_hash(kind: str, *, recipes_dir: Path | None = None) -> str:
    """The full hash of ``kind``'s current recipe; images carry it in the ``sandbox.image.recipe-hash`` label."""
    return load_recipe(kind, recipes_dir=recipes_dir).image_hash


def build_images(
    kinds: Sequence[str],
    *,
    client: docker.DockerClient | None = None,
    progress: Progress = print,
    force: bool = False,
    recipes_dir: Path | None = None,
) -> dict[str, str]:
    """Build (or find up to date) the images of ``kinds``; returns kind → the hash-versioned image tag."""
    recipes = [load_recipe(kind, recipes_dir=recipes_dir) for kind in kinds]
    with _engine(client) as engine:
        return {recipe.kind: _build_kind(engine, recipe, progress, force) for recipe in recipes}


def outdated(
    kinds: Sequence[str], *, client: docker.DockerClient | None = None, recipes_dir: Path | None = None
) -> list[str]:
    """The kinds among ``kinds`` whose ``:latest`` image is missing or not built from the current recipe."""
    recipes = [load_recipe(kind, recipes_dir=recipes_dir) for kind in kinds]
    with _engine(client) as engine:
        return [recipe.kind for recipe in recipes if not _is_current(engine, recipe)]


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
    recipes = [load_recipe(kind, recipes_dir=recipes_dir) for kind in kinds]
    with _engine(client) as engine:
        return [ref for recipe in recipes for ref in _prune_kind(engine, recipe, _prefixed(progress, recipe.kind))]


def load_recipe(kind: str, *, recipes_dir: Path | None = None) -> Recipe:
    _check_kind(kind)
    recipe_dir = (recipes_dir or DEFAULT_RECIPES_DIR) / kind
    packages = _read_packages(recipe_dir / "packages.txt")
    base_hash = _digest(
        [
            json.dumps(
                {"suite": SUITE, "packages": packages, "options": MMDEBSTRAP_OPTIONS, "changes": IMPORT_CHANGES},
                sort_keys=True,
            ).encode()
        ]
    )
    base_tag = f"{BASE_REPO}/{kind}:{base_hash[:HASH_LEN]}"
    overlay = _overlay_files(recipe_dir / "rootfs")
    dockerfile = _dockerfile(kind, base_tag, has_overlay=bool(overlay))
    files = (
        *overlay,
        ("opt/sandbox/lib.sh", _read(recipe_dir.parent / "common" / "lib.sh"), 0o644),
        ("opt/sandbox/entrypoint.sh", _read(recipe_dir / "entrypoint.sh"), 0o755),
        *_agent_files(),
    )
    image_hash = _digest([base_hash.encode(), dockerfile.encode(), *_flatten(files)])
    return Recipe(kind, packages, base_hash, dockerfile, files, image_hash)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InvalidArgument(f"unknown image kind {kind!r}; expected one of {', '.join(KINDS)}")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ImageBuildError(f"cannot read image recipe file {path}: {e}") from e


def _read_packages(path: Path) -> tuple[str, ...]:
    names = (line.split("#", 1)[0].strip() for line in _read(path).decode().splitlines())
    packages = tuple(sorted({name for name in names if name}))
    if not packages:
        raise ImageBuildError(f"{path} lists no packages")
    return packages


def _dockerfile(kind: str, base_tag: str, *, has_overlay: bool) -> str:
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
        copy_rootfs="COPY rootfs/ /\n" if has_overlay else "",
        env=" ".join(f"{k}={v}" for k, v in env.items()),
    )


def _overlay_files(root: Path) -> list[tuple[str, bytes, int]]:
    """Files under ``images/<kind>/rootfs/`` land at the same path in the image, owned by root, modes kept."""
    if not root.is_dir():
        return []
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    return [
        (f"rootfs/{p.relative_to(root).as_posix()}", _read(p), 0o755 if p.stat().st_mode & 0o111 else 0o644)
        for p in paths
    ]


def _agent_files() -> list[tuple[str, bytes, int]]:
    sources = [PACKAGE_DIR / "__init__.py", PACKAGE_DIR / "protocol.py"]
    sources += sorted(p for p in (PACKAGE_DIR / "agent").rglob("*") if p.is_file() and _is_source(p))
    return [(f"opt/sandbox-agent/sandbox/{p.relative_to(PACKAGE_DIR).as_posix()}", _read(p), 0o644) for p in sources]


def _is_source(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix not in {".pyc", ".pyo"}


def _flatten(files: Iterable[tuple[str, bytes, int]]) -> Iterator[bytes]:
    for name, content, mode in files:
        yield name.encode()
        yield f"{mode:o}".encode()
        yield content


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


@contextlib.contextmanager
def _engine(client: docker.DockerClient | None) -> Iterator[docker.DockerClient]:
    """The caller's client, or one of our own for the duration."""
    if client is not None:
        yield client
        return
    try:
        own = docker.from_env(timeout=ENGINE_TIMEOUT)
    except _ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot reach the Docker engine: {e}; is dockerd running (scripts/setup.sh)?") from e
    with contextlib.closing(own):
        yield own


def _build_kind(client: docker.DockerClient, recipe: Recipe, progress: Progress, force: bool) -> str:
    say = _prefixed(progress, recipe.kind)
    if not force and _exists(client, recipe.versioned_tag):
        say(f"base: skip ({recipe.base_tag})")
        say(f"agent: skip ({recipe.versioned_tag} exists)")
    else:
        if force or not _exists(client, recipe.base_tag):
            _build_base(client, recipe, say)
        else:
            say(f"base: skip ({recipe.base_tag} exists)")
        _build_agent(client, recipe, say, force)
    _tag(client, recipe.versioned_tag, recipe.repository, "latest")
    return recipe.versioned_tag


def _prefixed(progress: Progress, kind: str) -> Progress:
    return lambda line: progress(f"[{kind}] {line}")


def _exists(client: docker.DockerClient, ref: str) -> bool:
    return _image_id(client, ref) is not None


def _image_id(client: docker.DockerClient, ref: str) -> str | None:
    try:
        return str(client.api.inspect_image(ref)["Id"])
    except docker.errors.ImageNotFound:
        return None
    except _ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot inspect image {ref}: {_explain(e)}") from e


def _is_current(client: docker.DockerClient, recipe: Recipe) -> bool:
    versioned = _image_id(client, recipe.versioned_tag)
    return versioned is not None and versioned == _image_id(client, f"{recipe.repository}:latest")


def _prune_kind(client: docker.DockerClient, recipe: Recipe, say: Progress) -> list[str]:
    keep = {_image_id(client, ref) for ref in (recipe.versioned_tag, recipe.base_tag, f"{recipe.repository}:latest")}
    removed: list[str] = []
    for stage in ("agent", "base"):
        for image in _own_images(client, recipe.kind, stage):
            if image["Id"] not in keep:
                removed += _remove_image(client, image, say)
    return removed


def _own_images(client: docker.DockerClient, kind: str, stage: str) -> list[dict[str, Any]]:
    labels = [f"{LABEL_MANAGED_BY}={MANAGED_BY}", f"{LABEL_KIND}={kind}", f"{LABEL_STAGE}={stage}"]
    try:
        return list(client.api.images(filters={"label": labels}))
    except _ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot list {kind} images: {_explain(e)}") from e


def _remove_image(client: docker.DockerClient, image: dict[str, Any], say: Progress) -> list[str]:
    refs = [t for t in image.get("RepoTags") or [] if t != "<none>:<none>"] or [image["Id"]]
    removed = []
    for ref in refs:
        try:
            client.api.remove_image(ref)
        except docker.errors.APIError as e:
            if e.status_code != 409:
                raise ImageBuildError(f"cannot remove image {ref}: {_explain(e)}") from e
            say(f"prune: kept {ref} ({_explain(e)})")
            continue
        except _ENGINE_ERRORS as e:
            raise ImageBuildError(f"cannot remove image {ref}: {_explain(e)}") from e
        say(f"prune: removed {ref}")
        removed.append(ref)
    return removed


def _tag(client: docker.DockerClient, ref: str, repository: str, tag: str) -> None:
    try:
        client.api.tag(ref, repository, tag, force=True)
    except _ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot tag {ref} as {repository}:{tag}: {_explain(e)}") from e


def _size_mb(client: docker.DockerClient, ref: str) -> int:
    try:
        return int(client.api.inspect_image(ref)["Size"] / 1e6)
    except _ENGINE_ERRORS as e:
        raise ImageBuildError(f"cannot inspect image {ref}: {_explain(e)}") from e


def _explain(e: Exception) -> str:
    return str(getattr(e, "explanation", None) or e)


def _build_base(client: docker.DockerClient, recipe: Recipe, say: Progress) -> None:
    say(f"base: building {recipe.base_tag} with mmdebstrap ({len(recipe.packages)} packages)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sandbox-image-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        _run_mmdebstrap(recipe, rootfs, say)
        say(f"base: importing {rootfs.stat().st_size / 1e6:.0f} MB root file system")
        _import_rootfs(client, recipe, rootfs)
    elapsed = time.monotonic() - started
    say(f"base: done in {elapsed:.1f}s ({recipe.base_tag}, {_size_mb(client, recipe.base_tag)} MB)")


def _mmdebstrap_command(recipe: Recipe, output: Path) -> list[str]:
    return ["mmdebstrap", *MMDEBSTRAP_OPTIONS, f"--include={','.join(recipe.packages)}", SUITE, str(output)]


def _run_mmdebstrap(recipe: Recipe, output: Path, say: Progress) -> None:
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildError("mmdebstrap is not installed; run scripts/setup.sh or `apt-get install mmdebstrap`")
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    with subprocess.Popen(
        _mmdebstrap_command(recipe, output),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            tail.append(line)
            say(f"mmdebstrap | {line}")
    if proc.returncode != 0:
        raise ImageBuildError(_failure(f"mmdebstrap for {recipe.kind} exited with {proc.returncode}", tail))


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
    except _ENGINE_ERRORS as e:
        raise ImageBuildError(f"docker import of {recipe.base_tag} failed: {_explain(e)}") from e
    errors = [m["error"] for m in _json_lines(result) if "error" in m]
    if errors:
        raise ImageBuildError(f"docker import of {recipe.base_tag} failed: {errors[-1]}")


def _json_lines(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            if isinstance(message, dict):
                yield message


def _build_agent(client: docker.DockerClient, recipe: Recipe, say: Progress, force: bool) -> None:
    say(f"agent: building {recipe.versioned_tag}")
    started = time.monotonic()
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_KIND: recipe.kind,
        LABEL_STAGE: "agent",
        LABEL_HASH: recipe.image_hash,
    }
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    try:
        stream = client.api.build(
            fileobj=_build_context(recipe),
            custom_context=True,
            tag=recipe.versioned_tag,
            pull=False,
            rm=True,
            forcerm=True,
            nocache=force,
            labels=labels,
            decode=True,
        )
        for chunk in stream:
            _follow_build(chunk, tail, say, recipe)
    except _ENGINE_ERRORS as e:
        raise ImageBuildError(_failure(f"building {recipe.versioned_tag} failed: {_explain(e)}", tail)) from e
    elapsed = time.monotonic() - started
    say(f"agent: done in {elapsed:.1f}s ({recipe.versioned_tag}, {_size_mb(client, recipe.versioned_tag)} MB)")


def _follow_build(chunk: dict[str, Any], tail: collections.deque[str], say: Progress, recipe: Recipe) -> None:
    if "error" in chunk:
        raise ImageBuildError(_failure(f"building {recipe.versioned_tag} failed: {chunk['error']}", tail))
    for line in str(chunk.get("stream", "")).splitlines():
        if line.strip():
            tail.append(line)
            if not line.startswith(_BUILD_CHATTER):
                say(f"docker build | {line}")


def _build_context(recipe: Recipe) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content, mode in (("Dockerfile", recipe.dockerfile.encode(), 0o644), *recipe.files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    buf.seek(0)
    return buf


def _failure(headline: str, tail: Iterable[str]) -> str:
    lines = list(tail)
    if not lines:
        return headline
    return "\n".join([headline, f"--- last {len(lines)} log lines ---", *lines])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox.backends.docker.images", description=__doc__.split("\n")[0]
    )
    parser.add_argument("kinds", nargs="*", metavar="KIND", help=f"kinds to build (default: all of {', '.join(KINDS)})")
    parser.add_argument("--force", action="store_true", help="rebuild both stages even when their tags exist")
    parser.add_argument("--recipes-dir", type=Path, default=None, help=f"default: {DEFAULT_RECIPES_DIR}")
    parser.add_argument("--check", action="store_true", help="build nothing; exit 1 when an image is out of date")
    parser.add_argument("--prune", action="store_true", help="then remove superseded images no container uses")
    ns = parser.parse_args(argv)
    kinds = ns.kinds or KINDS
    if ns.check:
        return _check(kinds, ns.recipes_dir)
    started = time.monotonic()
    try:
        tags = build_images(kinds, force=ns.force, recipes_dir=ns.recipes_dir, progress=_print)
        if ns.prune:
            prune(kinds, recipes_dir=ns.recipes_dir, progress=_print)
    except SandboxError as e:
        print(f"image build failed: {e}", file=sys.stderr)
        return 1
    for kind, tag in tags.items():
        print(f"{kind}: {tag} (also {image_tag(kind)})")
    print(f"images ready in {time.monotonic() - started:.1f}s")
    return 0


def _print(line: str) -> None:
    print(line, flush=True)


def _check(kinds: Sequence[str], recipes_dir: Path | None) -> int:
    try:
        stale = outdated(kinds, recipes_dir=recipes_dir)
    except SandboxError as e:
        print(f"image check failed: {e}", file=sys.stderr)
        return 2
    for kind in stale:
        print(f"{kind}: out of date")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
