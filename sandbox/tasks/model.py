"""A task: OSWorld's task JSON (``id``, ``instruction``, ``snapshot``, ``config``, ``evaluator``) plus what this
platform adds (``sandbox``, ``limits``). Unknown keys (OSWorld's ``source``, ``trajectory``, ``related_apps``,
``proxy``, ...) are kept and written back by :meth:`Task.to_dict`.

Which sandbox a task runs in: its ``sandbox`` (``{"kind": "terminal"|"desktop"|"browser"|"android", "image": ...,
"screen": {...}}``) when it has one. Without it the task gets a **desktop**, whatever its ``snapshot`` or
``related_apps`` say: every OSWorld task, its Chrome ones included, runs in a full desktop where Chrome is one app
among others. A task meant for the terminal, the browser or the android sandbox says so in ``sandbox``.

A task is checked when it is loaded: its steps, getters and evaluator functions against what this platform supports
(:mod:`~sandbox.tasks.catalog`, which gathers them from the step, getter and metric modules), so the model sits
above all of them in the package's layers (pyproject.toml's import-linter contract ``tasks-layers``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from sandbox.models import SandboxKind, ScreenSize
from sandbox.tasks.catalog import METRIC_NAMES, getter_problems, step_problems
from sandbox.tasks.errors import TaskError
from sandbox.tasks.runtime import Fixtures

TASK_KINDS = (SandboxKind.TERMINAL, SandboxKind.DESKTOP, SandboxKind.BROWSER, SandboxKind.ANDROID)
DEFAULT_KIND = SandboxKind.DESKTOP
OSWORLD_MAX_STEPS = 15
"""OSWorld's runner stops an episode after 15 steps by default."""


class _Open(BaseModel):
    """OSWorld's objects carry keys we do not know; they are kept, and written back."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @property
    def extra(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class SandboxTarget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SandboxKind
    image: str | None = Field(None, description="Image to start from; the kind's built image when omitted.")
    screen: ScreenSize | None = Field(None, description="Screen size; the platform's default when omitted.")


class SetupStep(_Open):
    type: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)


class Getter(_Open):
    """One of OSWorld's getter configs: ``{"type": "vm_file", "path": ..., "dest": ...}``; the rest are its options."""

    type: str = Field(min_length=1)

    @property
    def params(self) -> dict[str, Any]:
        return self.extra


GetterSpec = Getter | list[Getter | None] | None


def _empty_to_none(value: Any) -> Any:
    """OSWorld writes ``{}`` for "no getter" (infeasible tasks); lists may hold ``{}`` or ``null`` for a slot."""
    if isinstance(value, dict) and not value:
        return None
    if isinstance(value, list):
        return [None if (isinstance(v, dict) and not v) else v for v in value] or None
    return value


class Evaluator(_Open):
    func: str | list[str]
    result: GetterSpec = None
    expected: GetterSpec = None
    options: dict[str, Any] | list[dict[str, Any] | None] | None = None
    conj: Literal["and", "or"] = "and"
    postconfig: list[SetupStep] = Field(default_factory=list)

    @field_validator("result", "expected", mode="before")
    @classmethod
    def _no_empty_getters(cls, v: Any) -> Any:
        return _empty_to_none(v)

    @field_validator("func")
    @classmethod
    def _funcs(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and not v:
            raise ValueError("func must name at least one function")
        return v

    @property
    def funcs(self) -> list[str]:
        return self.func if isinstance(self.func, list) else [self.func]

    def slots(self) -> list[tuple[str, Getter | None, Getter | None, dict[str, Any]]]:
        """(func, result getter, expected getter, options) for each function, lists paired up as OSWorld does.
        Call only on a task without :meth:`Task.problems` (lengths are checked there)."""
        funcs = self.funcs
        n = len(funcs)
        results = _as_list(self.result, n)
        expected = _as_list(self.expected, n)
        if isinstance(self.options, list):
            options = [dict(o or {}) for o in self.options]
        else:
            options = [dict(self.options or {}) for _ in range(n)]
        return list(zip(funcs, results, expected, options, strict=True))


def _as_list(spec: GetterSpec, n: int) -> list[Getter | None]:
    return list(spec) if isinstance(spec, list) else [spec] * n


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(OSWORLD_MAX_STEPS, ge=1, le=100_000, description="Steps before the episode is cut.")
    max_seconds: float = Field(600.0, gt=0, le=7 * 24 * 3600, description="Wall time before the episode is cut.")


class Task(_Open):
    id: str = Field(min_length=1, max_length=256)
    instruction: str
    snapshot: str | None = Field(None, description="OSWorld's snapshot name (chrome, os, ...): metadata here.")
    sandbox: SandboxTarget
    config: list[SetupStep] = Field(default_factory=list)
    evaluator: Evaluator
    limits: Limits = Field(default_factory=Limits)

    _sandbox_derived: bool = PrivateAttr(False)
    _fixtures: Fixtures | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _derive_sandbox(cls, data: Any, handler: Any) -> Any:
        derived = isinstance(data, dict) and data.get("sandbox") is None
        if derived:
            data = {**data, "sandbox": {"kind": DEFAULT_KIND.value}}
        task = handler(data)
        if derived:
            task._sandbox_derived = True
        return task

    def __eq__(self, other: object) -> bool:
        """Tasks are equal when their content is (the fixtures they were loaded with do not count)."""
        if not isinstance(other, Task):
            return NotImplemented
        return bool(self.model_dump(mode="json") == other.model_dump(mode="json"))

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, fixtures: Fixtures | None = None, where: str = "") -> Task:
        """The task in ``data``; :class:`TaskError` listing every problem when it is malformed or cannot run here."""
        label = where or (f"task {data.get('id')!r}" if isinstance(data, dict) else "task")
        if not isinstance(data, dict):
            raise TaskError(f"{label}: a task is a JSON object, not {type(data).__name__}")
        try:
            task = cls.model_validate(data)
        except ValidationError as e:
            problems = [f"{'.'.join(str(p) for p in err['loc']) or 'task'}: {err['msg']}" for err in e.errors()]
            raise TaskError(f"{label} is malformed: {'; '.join(problems)}", problems) from None
        task._fixtures = fixtures
        problems = task.problems()
        if problems:
            raise TaskError(f"{label} cannot run here: {'; '.join(problems)}", problems)
        return task

    @classmethod
    def from_json(cls, text: str | bytes, *, fixtures: Fixtures | None = None, where: str = "") -> Task:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise TaskError(f"{where or 'task'} is not valid JSON: {e}") from None
        return cls.from_dict(data, fixtures=fixtures, where=where)

    @classmethod
    def from_file(cls, path: str | Path, *, fixtures: Fixtures | None = None) -> Task:
        """The task in a JSON file. Its ``download`` URLs resolve through ``fixtures``, by default the ``fixtures/``
        folder beside the file and its ``fixtures.json`` URL map (see :class:`~sandbox.tasks.runtime.Fixtures`)."""
        path = Path(path)
        try:
            text = path.read_bytes()
        except OSError as e:
            raise TaskError(f"cannot read the task file {path}: {e.strerror or e}") from None
        return cls.from_json(text, fixtures=fixtures or Fixtures.near(path), where=str(path))

    # ------------------------------------------------------------------ writing, identity

    def to_dict(self) -> dict[str, Any]:
        """The task as JSON data, in the shape it was read (a derived ``sandbox`` and unset defaults left out)."""
        exclude = {"sandbox"} if self._sandbox_derived else set()
        data: dict[str, Any] = self.model_dump(mode="json", exclude_unset=True, exclude=exclude)
        return data

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @property
    def fixtures(self) -> Fixtures | None:
        """The fixtures the task was loaded with (``from_file``: those beside the file)."""
        return self._fixtures

    def download_urls(self) -> list[str]:
        """Every URL the task fetches: ``download`` steps in config and postconfig, ``cloud_file`` getters."""
        urls = dict.fromkeys(config_urls(self.config) + config_urls(self.evaluator.postconfig))
        for _, getter in _getters(self.evaluator):
            if getter.type == "cloud_file":
                path = getter.params.get("path")
                for url in path if isinstance(path, list) else [path]:
                    if isinstance(url, str):
                        urls[url] = None
        return list(urls)

    def digest(self, fixtures: Fixtures | None = None) -> str:
        """A stable hash (64 hex digits) of what decides the state after setup: the sandbox target, the config
        steps and the content of the fixtures the config downloads. Instruction, evaluator and limits do not count:
        two tasks with the same digest can share one post-setup snapshot."""
        fixtures = fixtures or self._fixtures
        contents: dict[str, str | None] = {}
        for url in config_urls(self.config):
            data = fixtures.get(url) if fixtures is not None else None
            contents[url] = hashlib.sha256(data).hexdigest() if data is not None else None
        state = {
            "sandbox": self.sandbox.model_dump(mode="json"),
            "config": [step.model_dump(mode="json") for step in self.config],
            "fixtures": contents,
        }
        canonical = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def problems(self) -> list[str]:
        """Every reason this task cannot run here (unsupported setup types, evaluator functions, getter types, by
        name; steps its sandbox kind cannot do; lists that do not pair up); ``[]`` when it can run. What is
        supported, and where, is the catalog's (:mod:`sandbox.tasks.catalog`); how a task is put together, here."""
        kind = self.sandbox.kind
        found: list[str] = []
        if kind not in TASK_KINDS:
            found.append(
                f"sandbox kind {kind.value!r} cannot run tasks (use one of {', '.join(k.value for k in TASK_KINDS)})"
            )
        found += _step_problems(self.config, "config", kind)
        ev = self.evaluator
        found += _step_problems(ev.postconfig, "evaluator.postconfig", kind)
        for name in dict.fromkeys(ev.funcs):
            if name not in METRIC_NAMES:
                found.append(f"evaluator: unsupported function {name!r}")
        if ev.func == "infeasible":
            return found
        if isinstance(ev.func, list) and "infeasible" in ev.func:
            found.append("evaluator: 'infeasible' must be the only function")
        n = len(ev.funcs)
        for field in ("result", "expected", "options"):
            value = getattr(ev, field)
            if isinstance(ev.func, list) and value is not None and (not isinstance(value, list) or len(value) != n):
                size = f"{len(value)} items" if isinstance(value, list) else "a single value"
                found.append(f"evaluator: func lists {n} functions but {field} has {size}; they pair up one to one")
            elif isinstance(ev.func, str) and isinstance(value, list):
                found.append(f"evaluator: func is a single function but {field} is a list")
        for where, getter in _getters(ev):
            found += getter_problems(getter.type, kind, where)
        return found

    def warnings(self, fixtures: Fixtures | None = None) -> list[str]:
        """What would fail only when run: ``download``/``cloud_file`` URLs that have no fixture."""
        fixtures = fixtures or self._fixtures
        return [
            f"URL {url} has no fixture" + ("" if fixtures is not None else " (no fixtures given)")
            for url in self.download_urls()
            if fixtures is None or not fixtures.has(url)
        ]

    @property
    def infeasible(self) -> bool:
        return self.evaluator.func == "infeasible"


def config_urls(steps: list[SetupStep]) -> list[str]:
    """The URLs ``download`` steps fetch, in order, each once."""
    urls: dict[str, None] = {}
    for step in steps:
        if step.type == "download" and isinstance(step.parameters.get("files"), list):
            for entry in step.parameters["files"]:
                if isinstance(entry, dict) and isinstance(entry.get("url"), str):
                    urls[entry["url"]] = None
    return list(urls)


def _step_problems(steps: list[SetupStep], where: str, kind: SandboxKind) -> list[str]:
    found: list[str] = []
    for index, step in enumerate(steps):
        found += step_problems(step.type, step.parameters, kind, f"{where}[{index}] ({step.type})")
    return found


def _getters(evaluator: Evaluator) -> list[tuple[str, Getter]]:
    """Each getter of the evaluator, with where it is (``evaluator.result[1]``)."""
    out: list[tuple[str, Getter]] = []
    for field in ("result", "expected"):
        value = getattr(evaluator, field)
        items = value if isinstance(value, list) else [value]
        for index, getter in enumerate(items):
            if getter is not None:
                where = f"evaluator.{field}" + (f"[{index}]" if isinstance(value, list) else "")
                out.append((where, getter))
    return out
