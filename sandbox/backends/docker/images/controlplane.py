"""The control-plane image ``sandbox/controlplane:<hash>``: the platform on Debian's own Python, built with no registry.

- base: ``mmdebstrap`` of ``images/controlplane/packages.txt`` (python3, python3-venv, tini, ...), with the hooks of
  ``images/controlplane/hooks/`` (noVNC's static files for the web view, without the nodejs and numpy its Debian
  package would pull in), imported as ``sandbox-base/controlplane:<hash>``, like the sandbox images' bases.
- app: on the host, ``pip wheel`` turns a staged copy of the project (``pyproject.toml`` and the ``sandbox``
  package, exactly the bytes hashed) into wheels, fetching the dependencies' wheels from the package index. It runs
  under Debian's ``/usr/bin/python3`` (in a throwaway venv), the interpreter the image runs on a bookworm host, so
  environment markers such as redis's ``async-timeout; python_full_version < "3.11.3"`` come out as they will in
  the image (the project's venv may be another 3.11 release). A generated two-stage Dockerfile, built with no
  network, installs them with ``pip install --no-index`` into a venv at ``/opt/sandbox`` (the project with every
  optional dependency group but the developers', e.g. ``sandbox[kubernetes]``) and copies that venv onto a clean
  base, so no wheel stays in a layer. The image runs ``tini -- sandbox server`` as uid 10001 and exposes 50051
  (gRPC) and 8080 (HTTP).

The app stage's hash covers the base hash, the Dockerfile, ``pyproject.toml`` and every file of the package (sources,
generated gRPC stubs, the web view's static files), so an unchanged checkout rebuilds nothing. Dependencies are
resolved by ``pip wheel`` when the stage is built; the image keeps what it got until the hash changes (or
``--force``).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

from sandbox.backends.docker.images.engine import Progress, run_logged
from sandbox.backends.docker.images.recipe import (
    BASE_REPO,
    CONTROLPLANE,
    DEFAULT_RECIPES_DIR,
    HASH_LEN,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    LABEL_STAGE,
    MANAGED_BY,
    PACKAGE_DIR,
    FileEntry,
    Recipe,
    base_digest,
    digest,
    flatten,
    hook_files,
    is_source,
    read,
    read_packages,
)
from sandbox.errors import ImageBuildError

CONTROLPLANE_UID = 10001
GRPC_PORT = 50051
HTTP_PORT = 8080
VENV = "/opt/sandbox"
HOME = "/var/lib/sandbox"
SOCKET_ROOT = "/run/sandbox-platform"
IMAGE_PYTHON = (3, 11)
"""Debian bookworm's python3: the host's ``pip wheel`` must pick wheels for the same Python."""
DEBIAN_PYTHON = Path("/usr/bin/python3")
PROJECT_ROOT = PACKAGE_DIR.parent
INSTALL_STAGE = "install"
"""The Dockerfile's first stage (wheels in, venv out); its untagged image carries this stage label for ``prune``."""
GRPC_STUBS = "wire/grpc_gen/sandbox_pb2.py"
PIP_OPTIONS = ("--disable-pip-version-check", "--progress-bar", "off")
DEV_EXTRAS = frozenset({"dev", "test", "tests", "docs", "lint", "gym", "osworld", "swerex"})
"""Optional dependency groups the image leaves out; it installs every other one (e.g. ``kubernetes``). The control
plane needs none of these: the developers', and the client side's (gym: numpy and pyarrow; osworld and swerex: the
harnesses that ``sandbox.compat`` adapts, run where the rollouts run, not in the control plane)."""

DOCKERFILE_TEMPLATE = """\
FROM {base_tag} AS install
LABEL {install_labels}
COPY wheels/ /tmp/wheels/
RUN python3 -m venv {venv} \\
 && {venv}/bin/python -m pip install --no-index --find-links /tmp/wheels --no-cache-dir --disable-pip-version-check \\
      --quiet {project} \\
 && {venv}/bin/python -m pip uninstall --yes --quiet --disable-pip-version-check pip setuptools \\
 && {venv}/bin/python -c 'import sandbox.server, sandbox.api.web.view'

FROM {base_tag}
RUN groupadd --gid {uid} sandbox \\
 && useradd --uid {uid} --gid {uid} --no-create-home --home-dir {home} --shell /usr/sbin/nologin sandbox \\
 && install -d -o {uid} -g {uid} -m 0750 {home} {socket_root}
COPY --from=install {venv} {venv}
ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME={home} \\
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER {uid}:{uid}
WORKDIR {home}
EXPOSE {grpc_port} {http_port}
ENTRYPOINT ["/usr/bin/tini", "--", "sandbox", "server"]
CMD []
"""


def load_controlplane_recipe(*, recipes_dir: Path | None = None, project_root: Path | None = None) -> Recipe:
    recipe_dir = (recipes_dir or DEFAULT_RECIPES_DIR) / CONTROLPLANE
    packages = read_packages(recipe_dir / "packages.txt")
    hooks = hook_files(recipe_dir / "hooks")
    base_hash = base_digest(packages, hooks)
    base_tag = f"{BASE_REPO}/{CONTROLPLANE}:{base_hash[:HASH_LEN]}"
    root = project_root or PROJECT_ROOT
    project = project_files(root)
    dockerfile = _dockerfile(base_tag, _project_name(project) + _extras(project))
    image_hash = digest([base_hash.encode(), dockerfile.encode(), *flatten(project)])
    return Recipe(
        CONTROLPLANE, packages, base_hash, dockerfile, (), image_hash, hooks=tuple(hooks), project=project, stage="app"
    )


def project_files(root: Path) -> tuple[FileEntry, ...]:
    """``pyproject.toml`` and every file of the package but byte code: what the image's wheel is made of."""
    package = root / "sandbox"
    if not (package / GRPC_STUBS).is_file():
        raise ImageBuildError(f"{package / GRPC_STUBS} is missing; generate the gRPC stubs with scripts/gen_proto.sh")
    paths = sorted(p for p in package.rglob("*") if p.is_file() and is_source(p))
    files = [(f"sandbox/{p.relative_to(package).as_posix()}", read(p), 0o644) for p in paths]
    return (("pyproject.toml", read(root / "pyproject.toml"), 0o644), *files)


def build_wheels(recipe: Recipe, say: Progress) -> list[FileEntry]:
    """``pip wheel`` of the recipe's project, on the host: the build context's ``wheels/`` (in memory)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sandbox-wheels-") as tmp:
        source, wheels = Path(tmp) / "project", Path(tmp) / "wheels"
        python = _debian_venv(Path(tmp) / "venv", say)
        _stage(recipe.project, source)
        target = "." + _extras(recipe.project)  # the project with its extras, from the staged copy
        pip_wheel = [str(python), "-m", "pip", "wheel", *PIP_OPTIONS, "-w", str(wheels), target]
        run_logged(say, "pip wheel", pip_wheel, source)
        _check_package_data(recipe.project, wheels, _project_name(recipe.project))
        entries = [(f"wheels/{p.name}", p.read_bytes(), 0o644) for p in sorted(wheels.glob("*.whl"))]
    size = sum(len(content) for _, content, _ in entries) / 1e6
    say(f"wheels: {len(entries)} wheels, {size:.0f} MB in {time.monotonic() - started:.1f}s")
    return entries


def _stage(project: tuple[FileEntry, ...], dest: Path) -> None:
    for name, content, mode in project:
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    readme = _readme(project)
    if readme and not (dest / readme).exists():
        (dest / readme).parent.mkdir(parents=True, exist_ok=True)
        (dest / readme).write_text("")  # the long description is not worth a rebuild whenever the README changes


def _debian_venv(venv: Path, say: Progress) -> Path:
    """A venv of Debian's python3, whose pip resolves the dependencies as the image's python3 would."""
    want = ".".join(map(str, IMAGE_PYTHON))
    try:
        found = subprocess.run(
            [str(DEBIAN_PYTHON), "-c", "import sys; print(*sys.version_info[:3], sep='.')"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise ImageBuildError(
            f"the control-plane image's wheels are resolved with Debian's {DEBIAN_PYTHON} (Python {want}), "
            f"which does not run here ({e}); install it: apt-get install python3 python3-venv"
        ) from e
    if not found.startswith(f"{want}."):
        raise ImageBuildError(
            f"{DEBIAN_PYTHON} is Python {found}; the control-plane image runs Debian bookworm's Python {want}, and "
            "its wheels must be resolved with that version (build on Debian bookworm)"
        )
    say(f"wheels: resolving for Python {found} ({DEBIAN_PYTHON}, as in the image)")
    run_logged(say, "venv", [str(DEBIAN_PYTHON), "-m", "venv", str(venv)], venv.parent)
    return venv / "bin" / "python"


def _check_package_data(project: tuple[FileEntry, ...], wheels: Path, name: str) -> None:
    """Every package file but type stubs must be in the wheel: a missing web view page breaks the server."""
    found = sorted(wheels.glob(f"{name.replace('-', '_')}-*.whl"))
    if not found:
        raise ImageBuildError(f"pip wheel made no wheel of the project {name!r} in {wheels}")
    with zipfile.ZipFile(found[0]) as wheel:
        inside = set(wheel.namelist())
    missing = [n for n, _, _ in project if n.startswith("sandbox/") and not n.endswith(".pyi") and n not in inside]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ImageBuildError(
            f"the project's wheel lacks package files the server needs: {shown}; declare them as package data "
            'in pyproject.toml, table tool.setuptools.package-data: sandbox = ["api/web/static/*"]'
        )


def _pyproject(project: tuple[FileEntry, ...]) -> dict[str, object]:
    content = next(content for name, content, _ in project if name == "pyproject.toml")
    try:
        section = tomllib.loads(content.decode()).get("project", {})
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ImageBuildError(f"cannot read pyproject.toml: {e}") from e
    return section if isinstance(section, dict) else {}


def _project_name(project: tuple[FileEntry, ...]) -> str:
    name = _pyproject(project).get("name")
    if not isinstance(name, str) or not name:
        raise ImageBuildError("pyproject.toml names no [project] name")
    return name


def _readme(project: tuple[FileEntry, ...]) -> str | None:
    readme = _pyproject(project).get("readme")
    if isinstance(readme, dict):
        readme = readme.get("file")
    return readme if isinstance(readme, str) else None


def _extras(project: tuple[FileEntry, ...]) -> str:
    """``[a,b]``: every optional dependency group but the developers' (the Kubernetes backend's, ...), or ``""``."""
    groups = _pyproject(project).get("optional-dependencies")
    names = sorted(name for name in groups if name not in DEV_EXTRAS) if isinstance(groups, dict) else []
    return f"[{','.join(names)}]" if names else ""


def _dockerfile(base_tag: str, requirement: str) -> str:
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_KIND: CONTROLPLANE, LABEL_STAGE: INSTALL_STAGE}
    return DOCKERFILE_TEMPLATE.format(
        base_tag=base_tag,
        install_labels=" ".join(f"{k}={v}" for k, v in labels.items()),
        venv=VENV,
        project=f"'{requirement}'",
        uid=CONTROLPLANE_UID,
        home=HOME,
        socket_root=SOCKET_ROOT,
        grpc_port=GRPC_PORT,
        http_port=HTTP_PORT,
    )
