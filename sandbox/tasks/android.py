"""Android tasks: setup steps and evaluator getters that reach the emulator through ``adb``, run in the sandbox's
container (as the sandbox's commands are), whose ``adb`` talks to its own emulator (``SANDBOX_ANDROID_ADB``,
``SANDBOX_ANDROID_SERIAL``, ``ANDROID_ADB_SERVER_PORT`` as the agent's driver reads them; docs/android.md).

======================  ===========================================================================================
setup type              what it does
======================  ===========================================================================================
``adb_shell``           ``command``: ``adb shell COMMAND`` (a guest shell line); a non-zero exit fails the step
``adb_install``         ``path``: ``adb install -r -g PATH`` of an APK in the container (a ``download`` step puts
                        it there); fails unless adb says ``Success``
``open_app``            ``package`` (and ``activity``): launches the app, as the ``open_app`` action does
======================  ===========================================================================================

Getters: ``adb_shell`` (``command``'s stdout), ``android_package`` (the package of the resumed activity: the app
in the foreground), ``android_activity`` (that activity, ``package/full.ClassName``), ``android_ui_tree`` (the
``uiautomator dump`` XML), ``android_ui_texts`` (every node's non-empty ``text`` and ``content-desc``, in order).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Awaitable, Callable
from typing import Any
from xml.etree import ElementTree

from sandbox.tasks.errors import TaskError
from sandbox.tasks.runtime import EvalContext, StepContext, TaskRuntime

ADB_TIMEOUT_S = 120.0
INSTALL_TIMEOUT_S = 300.0
UI_DUMP_PATH = "/sdcard/sandbox-task-dump.xml"
PACKAGE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+$")
ACTIVITY = re.compile(r"^[A-Za-z0-9_.$]+$")
ADB = 'exec "${SANDBOX_ANDROID_ADB:-adb}" -s "${SANDBOX_ANDROID_SERIAL:-emulator-5554}" "$@"'
"""``adb`` as the agent's driver runs it: its binary and device from the container's environment."""
RESUMED = re.compile(r"(?:topResumedActivity|mResumedActivity|ResumedActivity:)[^\n]*?\s([\w.]+)/([\w.$]+)")
"""The resumed (foreground) activity in ``dumpsys activity activities``: ``... u0 com.pkg/.Main t12}``."""


def adb_argv(*args: str) -> list[str]:
    return ["sh", "-c", ADB, "adb", *args]


async def adb(rt: TaskRuntime, *args: str, what: str, timeout: float = ADB_TIMEOUT_S) -> str:
    """``adb ARGS``' stdout; :class:`TaskError` saying ``what`` failed when it exits non-zero or times out."""
    result = await rt.exec(adb_argv(*args), timeout=timeout)
    if result.timed_out:
        raise TaskError(f"{what}: adb {' '.join(args)} did not finish within {timeout:g} s")
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip()[:500] or f"exit code {result.exit_code}"
        raise TaskError(f"{what}: adb {' '.join(args)} failed: {detail}")
    return result.stdout


def _string(params: dict[str, Any], name: str, what: str, pattern: re.Pattern[str] | None = None) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value or (pattern is not None and not pattern.fullmatch(value)):
        raise TaskError(f"{what}: parameter {name!r} must be " + ("a valid name" if pattern else "a non-empty string"))
    return value


def open_app_command(package: str, activity: str | None) -> str:
    """The guest command that launches an app (the agent's driver runs the same)."""
    if activity:
        return f"am start -W -n {shlex.quote(f'{package}/{activity}')}"
    return f"monkey -p {shlex.quote(package)} -c android.intent.category.LAUNCHER 1"


# --------------------------------------------------------------------------- setup steps


async def _adb_shell_step(ctx: StepContext, p: dict[str, Any]) -> None:
    await adb(ctx.runtime, "shell", _string(p, "command", ctx.label), what=ctx.label)


async def _adb_install(ctx: StepContext, p: dict[str, Any]) -> None:
    path = _string(p, "path", ctx.label)
    out = await adb(ctx.runtime, "install", "-r", "-g", path, what=ctx.label, timeout=INSTALL_TIMEOUT_S)
    if "Success" not in out:
        raise TaskError(f"{ctx.label}: adb install {path} did not succeed: {out.strip()[:500]}")


async def _open_app(ctx: StepContext, p: dict[str, Any]) -> None:
    package = _string(p, "package", ctx.label, PACKAGE)
    activity = _string(p, "activity", ctx.label, ACTIVITY) if p.get("activity") is not None else None
    out = await adb(ctx.runtime, "shell", open_app_command(package, activity), what=ctx.label)
    if "No activities found" in out or "Error" in out:
        raise TaskError(f"{ctx.label}: cannot open {package}: {out.strip()[:300]}")


StepFn = Callable[[StepContext, dict[str, Any]], Awaitable[None]]
STEPS: dict[str, tuple[StepFn, tuple[str, ...], tuple[str, ...]]] = {
    "adb_shell": (_adb_shell_step, ("command",), ()),
    "adb_install": (_adb_install, ("path",), ()),
    "open_app": (_open_app, ("package",), ("activity",)),
}
"""Setup type: (handler, required parameters, optional parameters); android sandboxes only."""

NOT_ON_ANDROID = frozenset({"open", "activate_window", "close_window", "launch"})
"""Setup steps of the X desktop (windows, ``gio open``, apps started as X clients), which an android sandbox has not:
its apps start with ``open_app`` (or an ``adb_shell`` of ``am start``)."""


# --------------------------------------------------------------------------- getters


async def adb_shell(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return await adb(ctx.runtime, "shell", _string(config, "command", "adb_shell"), what="adb_shell")


async def _resumed(ctx: EvalContext, what: str) -> tuple[str, str] | None:
    out = await adb(ctx.runtime, "shell", "dumpsys activity activities", what=what)
    found = RESUMED.search(out)
    if found is None:
        return None
    package, activity = found.groups()
    return package, package + activity if activity.startswith(".") else activity


async def android_package(ctx: EvalContext, config: dict[str, Any]) -> Any:
    resumed = await _resumed(ctx, "android_package")
    return resumed[0] if resumed else None


async def android_activity(ctx: EvalContext, config: dict[str, Any]) -> Any:
    resumed = await _resumed(ctx, "android_activity")
    return f"{resumed[0]}/{resumed[1]}" if resumed else None


async def android_ui_tree(ctx: EvalContext, config: dict[str, Any]) -> Any:
    command = f"uiautomator dump {UI_DUMP_PATH} >/dev/null && cat {UI_DUMP_PATH}"
    out = await adb(ctx.runtime, "shell", command, what="android_ui_tree")
    start = out.find("<?xml")
    if start < 0:
        raise TaskError(f"android_ui_tree: uiautomator dump gave no XML: {out.strip()[:200]!r}")
    return out[start:]


async def android_ui_texts(ctx: EvalContext, config: dict[str, Any]) -> Any:
    xml = await android_ui_tree(ctx, config)
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as e:
        raise TaskError(f"android_ui_texts: the UI tree is not XML: {e}") from None
    return [v for node in root.iter("node") for v in (node.get("text"), node.get("content-desc")) if v]


GETTERS: dict[str, Callable[[EvalContext, dict[str, Any]], Awaitable[Any]]] = {
    "adb_shell": adb_shell,
    "android_package": android_package,
    "android_activity": android_activity,
    "android_ui_tree": android_ui_tree,
    "android_ui_texts": android_ui_texts,
}
"""Getters for android sandboxes only."""

GETTERS_NOT_ON_ANDROID = frozenset({"clipboard", "vm_screen_size"})
"""Getters of the X desktop (``vm_screen_size`` is the spec's screen, not the device's)."""
