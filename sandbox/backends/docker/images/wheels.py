"""Wheels of a sandbox image's pinned pure-Python packages (``images/<kind>/requirements.txt``).

Image builds run with no network, so ``pip wheel`` makes the wheels on the host, with hashes required (what is
installed is exactly what was pinned), without dependencies (those come from Debian packages in ``packages.txt``).
Only pure-Python wheels are accepted: the image unpacks them into python3's site-packages, which is a complete
install for a wheel with no compiled code.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from sandbox.backends.docker.images.engine import Progress, run_logged
from sandbox.backends.docker.images.recipe import FileEntry, Recipe
from sandbox.errors import ImageBuildError

PIP_OPTIONS = ("--disable-pip-version-check", "--progress-bar", "off", "--no-deps", "--require-hashes")
PURE_TAGS = ("-none-any.whl",)


def requirement_wheels(recipe: Recipe, say: Progress) -> list[FileEntry]:
    """The build context's ``wheels/`` for ``recipe.requirements`` (in memory)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sandbox-wheels-") as tmp:
        requirements, wheels = Path(tmp) / "requirements.txt", Path(tmp) / "wheels"
        requirements.write_bytes(recipe.requirements)
        command = [sys.executable, "-m", "pip", "wheel", *PIP_OPTIONS, "-w", str(wheels), "-r", str(requirements)]
        run_logged(say, "pip wheel", command, Path(tmp), image=f"the {recipe.kind} image")
        found = sorted(wheels.glob("*.whl"))
        compiled = [p.name for p in found if not p.name.endswith(PURE_TAGS)]
        if compiled:
            raise ImageBuildError(
                f"images/{recipe.kind}/requirements.txt: {', '.join(compiled)} is not pure Python; install it from a "
                "Debian package (packages.txt) instead"
            )
        if not found:
            raise ImageBuildError(f"pip wheel made no wheel from images/{recipe.kind}/requirements.txt")
        entries = [(f"wheels/{p.name}", p.read_bytes(), 0o644) for p in found]
    size = sum(len(content) for _, content, _ in entries) / 1e3
    say(f"wheels: {len(entries)} wheels, {size:.0f} kB in {time.monotonic() - started:.1f}s")
    return entries
