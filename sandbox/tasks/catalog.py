"""What this platform supports of OSWorld's task format: the setup step types, getter types and metric functions it
implements (as :mod:`~sandbox.tasks.setup_steps`, :mod:`~sandbox.tasks.getters` and :mod:`~sandbox.tasks.metrics`
register them), where each can run, and the check of one step or getter against that. The task model
(:meth:`~sandbox.tasks.model.Task.problems`) walks a task with these checks, so a task that cannot run here is
refused when it is loaded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from sandbox.tasks.setup_steps import NEEDS_ANDROID, NEEDS_BROWSER, NEEDS_DISPLAY, NOT_ON_ANDROID, PARAMETERS, STEPS

SETUP_TYPES = frozenset(STEPS)
GETTER_TYPES = frozenset(GETTERS)
METRIC_NAMES = frozenset(METRICS)
BROWSER_KINDS = (SandboxKind.BROWSER, SandboxKind.DESKTOP)
"""Kinds with a Chromium. On a desktop, Chromium must run with DevTools on 127.0.0.1:9222 (or OSWorld's 1337) for
the steps and getters that talk to the live browser: OSWorld's Chrome tasks launch it so."""


def step_problems(step_type: str, parameters: Mapping[str, Any], kind: SandboxKind, label: str) -> list[str]:
    """Why a setup step of ``step_type`` with ``parameters`` cannot run in a ``kind`` sandbox; ``[]`` if it can."""
    if step_type not in SETUP_TYPES:
        return [f"{label}: unsupported setup type {step_type!r}"]
    found = []
    required, optional = PARAMETERS[step_type]
    for name in required:
        if parameters.get(name) is None:
            found.append(f"{label}: missing parameter {name!r}")
    for name in parameters:
        if name not in required and name not in optional:
            found.append(f"{label}: unknown parameter {name!r}")
    if step_type in NEEDS_DISPLAY and not kind.has_display:
        found.append(f"{label}: needs a display, which a {kind.value} sandbox has not")
    if step_type in NEEDS_BROWSER and kind not in BROWSER_KINDS:
        found.append(f"{label}: needs a browser, which a {kind.value} sandbox has not")
    if step_type in NEEDS_ANDROID and kind is not SandboxKind.ANDROID:
        found.append(f"{label}: needs an android sandbox (adb, an emulator), not a {kind.value} one")
    if step_type in NOT_ON_ANDROID and kind is SandboxKind.ANDROID:
        found.append(f"{label}: needs an X desktop, which an android sandbox has not (use open_app or adb_shell)")
    return found


def getter_problems(getter_type: str, kind: SandboxKind, where: str) -> list[str]:
    """Why a getter of ``getter_type`` cannot run in a ``kind`` sandbox; ``[]`` if it can."""
    if getter_type not in GETTER_TYPES:
        return [f"{where}: unsupported getter type {getter_type!r}"]
    if getter_type in GETTER_NEEDS_ANDROID and kind is not SandboxKind.ANDROID:
        return [f"{where}: getter {getter_type!r} needs an android sandbox, not a {kind.value} one"]
    if getter_type in GETTER_NOT_ON_ANDROID and kind is SandboxKind.ANDROID:
        return [f"{where}: getter {getter_type!r} reads the X desktop, which an android sandbox has not"]
    if getter_type in GETTER_NEEDS_BROWSER and kind not in BROWSER_KINDS:
        return [f"{where}: getter {getter_type!r} needs a browser, which a {kind.value} sandbox has not"]
    if getter_type in GETTER_NEEDS_DISPLAY and not kind.has_display:
        return [f"{where}: getter {getter_type!r} needs a display, which a {kind.value} sandbox has not"]
    if getter_type in GETTER_NEEDS_CHROMIUM and kind not in BROWSER_KINDS:
        return [f"{where}: getter {getter_type!r} reads Chromium's profile; a {kind.value} sandbox has no Chromium"]
    return []
