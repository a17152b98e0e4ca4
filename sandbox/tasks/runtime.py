"""What task setup and evaluation need from a sandbox (:class:`TaskRuntime`), where ``download`` URLs come from when
the sandbox has no network (:class:`Fixtures`), and the two together as a setup step's handler and an evaluator's
getter are given them (:class:`StepContext`, :class:`EvalContext`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

from sandbox.models import ExecResult, SandboxKind
from sandbox.tasks.errors import TaskError

FIXTURES_DIR = "fixtures"
FIXTURES_MAP = "fixtures.json"


@runtime_checkable
class TaskRuntime(Protocol):
    """One sandbox, as setup steps and evaluator getters see it. The service implements it over the sandbox's agent.

    - ``exec``: a string runs under ``bash -c``, a list is an argv; ``keep_background`` lets processes the command
      started in the background outlive it. Runs as the sandbox user (home ``/home/sandbox``), with the X display
      and session bus in its environment on the kinds that have them.
    - ``read_file`` raises ``NotFound`` for a missing file; ``read_file``/``write_file`` may raise
      ``PermissionDenied`` outside the file API's roots: setup and getters then go through ``/tmp`` with ``exec``.
    - ``browser_info``: ``{"url", "title"}`` of the active page; ``browser_tabs``: ``[{"url", "title", ...}]`` of
      every open page (tab), most recently active first; ``navigate`` loads a URL in the active page and returns
      ``{"url", "title", ...}``; ``evaluate_js`` returns the expression's JSON value (promises awaited).
    """

    kind: SandboxKind
    screen_width: int
    screen_height: int

    async def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float = 60,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        keep_background: bool = False,
    ) -> ExecResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> int: ...

    async def browser_info(self) -> dict[str, Any]: ...

    async def browser_tabs(self) -> list[dict[str, Any]]: ...

    async def navigate(self, url: str) -> dict[str, Any]: ...

    async def evaluate_js(self, expression: str) -> Any: ...


class Fixtures:
    """Local bytes for the URLs tasks download. Two sources, the map first:

    - a URL map: ``{"https://host/path/file.txt": "relative/or/absolute/path"}``, paths relative to the map's
      folder (``fixtures/fixtures.json`` beside the task files);
    - a mirror folder: ``https://host/a/b.txt`` is ``<folder>/host/a/b.txt`` (``fixtures/`` beside the task files);
      a URL with a query (``...?id=...``) has no mirror path: map it.

    Nothing is ever fetched from the network: a URL with neither is a :class:`TaskError` naming it.
    """

    def __init__(self, directory: str | Path | None = None, urls: Mapping[str, str | Path] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.urls = {url: Path(p) for url, p in (urls or {}).items()}

    @classmethod
    def load(cls, folder: str | Path) -> Fixtures:
        """The fixtures of a folder of task files: its ``fixtures/`` mirror and ``fixtures/fixtures.json`` map
        (kept inside ``fixtures/`` so that ``<folder>/*.json`` are all task files), either optional."""
        directory = Path(folder) / FIXTURES_DIR
        urls: dict[str, str | Path] = {}
        map_file = directory / FIXTURES_MAP
        if map_file.is_file():
            try:
                raw = json.loads(map_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise TaskError(f"cannot read the fixture map {map_file}: {e}") from None
            if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
                raise TaskError(f"the fixture map {map_file} must be a JSON object of URL -> path strings")
            urls = {url: (directory / p) for url, p in raw.items()}
        return cls(directory if directory.is_dir() else None, urls)

    @classmethod
    def near(cls, task_file: str | Path) -> Fixtures:
        """The fixtures beside a task file."""
        return cls.load(Path(task_file).parent)

    def path(self, url: str) -> Path | None:
        """The local file for ``url``, or None."""
        mapped = self.urls.get(url)
        if mapped is not None:
            return mapped if mapped.is_file() else None
        if self.directory is not None:
            mirrored = _mirror_path(self.directory, url)
            if mirrored is not None and mirrored.is_file():
                return mirrored
        return None

    def has(self, url: str) -> bool:
        return self.path(url) is not None

    def get(self, url: str) -> bytes | None:
        """The fixture's bytes, or None when there is none (never raises for a missing fixture)."""
        path = self.path(url)
        try:
            return path.read_bytes() if path is not None else None
        except OSError:
            return None

    def resolve(self, url: str) -> bytes:
        """The fixture's bytes; :class:`TaskError` naming the URL when there is no fixture for it."""
        data = self.get(url)
        if data is None:
            where = [str(p) for p in (self.directory,) if p is not None]
            hint = f" (looked in the URL map and under {', '.join(where)})" if where else " (looked in the URL map)"
            raise TaskError(f"no fixture for the URL {url}{hint}; sandboxes have no network, add the file")
        return data

    def __repr__(self) -> str:
        return f"Fixtures(directory={self.directory}, urls={len(self.urls)})"


@dataclass
class StepContext:
    """What a setup step's handler is given: the sandbox, the fixtures, what ``{CLIENT_PASSWORD}`` stands for, and
    the step's label for its errors (``config[2] (download)``)."""

    runtime: TaskRuntime
    fixtures: Fixtures
    password: str
    label: str


@dataclass
class EvalContext:
    """What an evaluator's getter is given: the sandbox and the fixtures (``cloud_file`` reads them)."""

    runtime: TaskRuntime
    fixtures: Fixtures


def _mirror_path(directory: Path, url: str) -> Path | None:
    parts = urlsplit(url)
    if not parts.netloc or not parts.path or parts.path.endswith("/") or parts.query:
        return None
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if any(s in (".", "..") or "/" in s or "\\" in s for s in [parts.netloc, *segments]):
        return None
    return directory.joinpath(parts.netloc, *segments)
