"""Offline downloads for OSWorld's harness: its own download cache, filled from a task's fixtures beforehand.

``DesktopEnv`` fetches what a task downloads over the network unless the file is already in its cache
(``cache_dir/<task id>/``): a ``download`` setup step looks for ``<uuid5(URL namespace, url)>_<basename of the
path>``, a ``cloud_file`` getter for its ``dest``. :func:`seed_download_cache` writes each of those from the
platform's :class:`~sandbox.tasks.runtime.Fixtures` (the ``fixtures/`` mirror and map beside the task files, the
same files ``sandbox.reset(task=...)`` sends along), so the harness finds everything and fetches nothing; a URL
without a fixture is an error here, before the harness would go to the network for it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sandbox.tasks.runtime import Fixtures


def download_cache_name(url: str, path: str) -> str:
    """The file name OSWorld's setup controller caches a ``download`` of ``url`` to ``path`` under."""
    return f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}"


def _steps(task: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    evaluator = task.get("evaluator") or {}
    for step in [*(task.get("config") or []), *(evaluator.get("postconfig") or [])]:
        if isinstance(step, Mapping):
            yield step


def _getters(task: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    evaluator = task.get("evaluator") or {}
    for key in ("result", "expected"):
        value = evaluator.get(key)
        for getter in value if isinstance(value, list) else [value]:
            if isinstance(getter, Mapping):
                yield getter


def cached_files(task: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(url, file name in the task's cache folder)`` for everything the harness would download for ``task``."""
    found: list[tuple[str, str]] = []
    for step in _steps(task):
        if step.get("type") == "download":
            for f in (step.get("parameters") or {}).get("files") or []:
                found.append((str(f["url"]), download_cache_name(str(f["url"]), str(f["path"]))))
    for getter in _getters(task):
        if getter.get("type") == "cloud_file":
            multi = bool(getter.get("multi", False))
            urls = getter["path"] if multi else [getter["path"]]
            dests = getter["dest"] if multi else [getter["dest"]]
            found.extend((str(u), str(d)) for u, d in zip(urls, dests, strict=True))
    return found


def seed_download_cache(task: Mapping[str, Any], cache_dir: str | os.PathLike[str], fixtures: Fixtures) -> list[Path]:
    """Write the files ``task`` downloads into ``DesktopEnv``'s cache (its ``cache_dir``), from ``fixtures``; the
    paths written. ``TaskError`` naming a URL that has no fixture."""
    folder = Path(cache_dir) / str(task["id"])
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for url, name in cached_files(task):
        target = folder / name
        target.write_bytes(fixtures.resolve(url))
        written.append(target)
    return written
