"""What this platform supports of OSWorld's task format, and the checks that refuse a task before it runs."""

from __future__ import annotations

from sandbox.models import SandboxKind
from sandbox.tasks.getters import (
    GETTER_NEEDS_ANDROID,
    GETTER_NEEDS_BROWSER,
    GETTER_NEEDS_CHROMIUM,
    GETTER_NEEDS_DISPLAY,
    GETTER_NOT_ON_ANDROID,
    GETTERS,
)
from sandbox.tasks.metrics import METRICS
from sandbox.tasks.model import TASK_KINDS, Getter, SetupStep, Task
from sandbox.tasks.setup_steps import NEEDS_ANDROID, NEEDS_BROWSER, NEEDS_DISPLAY, NOT_ON_ANDROID, PARAMETERS, STEPS

SETUP_TYPES = frozenset(STEPS)
GETTER_TYPES = frozenset(GETTERS)
METRIC_NAMES = frozenset(METRICS)
BROWSER_KINDS = (SandboxKind.BROWSER, SandboxKind.DESKTOP)
"""Kinds with a Chromium. On a desktop, Chromium must run with DevTools on 127.0.0.1:9222 (or OSWorld's 1337) for
the steps and getters that talk to the live browser: OSWorld's Chrome tasks launch it so."""


def problems(task: Task) -> list[str]:
    kind = task.sandbox.kind
    found: list[str] = []
    if kind not in TASK_KINDS:
        found.append(
            f"sandbox kind {kind.value!r} cannot run tasks (use one of {', '.join(k.value for k in TASK_KINDS)})"
        )
    found += _steps(task.config, "config", kind)
    ev = task.evaluator
    found += _steps(ev.postconfig, "evaluator.postconfig", kind)
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
    for where, getter in _getters(task):
        found += _getter(getter, where, kind)
    return found


def _steps(steps: list[SetupStep], where: str, kind: SandboxKind) -> list[str]:
    found = []
    for index, step in enumerate(steps):
        label = f"{where}[{index}] ({step.type})"
        if step.type not in SETUP_TYPES:
            found.append(f"{label}: unsupported setup type {step.type!r}")
            continue
        required, optional = PARAMETERS[step.type]
        for name in required:
            if step.parameters.get(name) is None:
                found.append(f"{label}: missing parameter {name!r}")
        for name in step.parameters:
            if name not in required and name not in optional:
                found.append(f"{label}: unknown parameter {name!r}")
        if step.type in NEEDS_DISPLAY and not kind.has_display:
            found.append(f"{label}: needs a display, which a {kind.value} sandbox has not")
        if step.type in NEEDS_BROWSER and kind not in BROWSER_KINDS:
            found.append(f"{label}: needs a browser, which a {kind.value} sandbox has not")
        if step.type in NEEDS_ANDROID and kind is not SandboxKind.ANDROID:
            found.append(f"{label}: needs an android sandbox (adb, an emulator), not a {kind.value} one")
        if step.type in NOT_ON_ANDROID and kind is SandboxKind.ANDROID:
            found.append(f"{label}: needs an X desktop, which an android sandbox has not (use open_app or adb_shell)")
    return found


def _getters(task: Task) -> list[tuple[str, Getter]]:
    out: list[tuple[str, Getter]] = []
    for field in ("result", "expected"):
        value = getattr(task.evaluator, field)
        items = value if isinstance(value, list) else [value]
        for index, getter in enumerate(items):
            if getter is not None:
                where = f"evaluator.{field}" + (f"[{index}]" if isinstance(value, list) else "")
                out.append((where, getter))
    return out


def _getter(getter: Getter, where: str, kind: SandboxKind) -> list[str]:
    if getter.type not in GETTER_TYPES:
        return [f"{where}: unsupported getter type {getter.type!r}"]
    if getter.type in GETTER_NEEDS_ANDROID and kind is not SandboxKind.ANDROID:
        return [f"{where}: getter {getter.type!r} needs an android sandbox, not a {kind.value} one"]
    if getter.type in GETTER_NOT_ON_ANDROID and kind is SandboxKind.ANDROID:
        return [f"{where}: getter {getter.type!r} reads the X desktop, which an android sandbox has not"]
    if getter.type in GETTER_NEEDS_BROWSER and kind not in BROWSER_KINDS:
        return [f"{where}: getter {getter.type!r} needs a browser, which a {kind.value} sandbox has not"]
    if getter.type in GETTER_NEEDS_DISPLAY and not kind.has_display:
        return [f"{where}: getter {getter.type!r} needs a display, which a {kind.value} sandbox has not"]
    if getter.type in GETTER_NEEDS_CHROMIUM and kind not in BROWSER_KINDS:
        return [f"{where}: getter {getter.type!r} reads Chromium's profile; a {kind.value} sandbox has no Chromium"]
    return []


def config_urls(steps: list[SetupStep]) -> list[str]:
    """The URLs ``download`` steps fetch, in order, each once."""
    urls: dict[str, None] = {}
    for step in steps:
        if step.type == "download" and isinstance(step.parameters.get("files"), list):
            for entry in step.parameters["files"]:
                if isinstance(entry, dict) and isinstance(entry.get("url"), str):
                    urls[entry["url"]] = None
    return list(urls)


def download_urls(task: Task) -> list[str]:
    urls = dict.fromkeys(config_urls(task.config) + config_urls(task.evaluator.postconfig))
    for _, getter in _getters(task):
        if getter.type == "cloud_file":
            path = getter.params.get("path")
            for url in path if isinstance(path, list) else [path]:
                if isinstance(url, str):
                    urls[url] = None
    return list(urls)
