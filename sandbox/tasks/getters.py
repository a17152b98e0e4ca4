"""Evaluator getters: what a task's ``result``/``expected`` configs fetch from the sandbox (or from fixtures).

General ones (OSWorld's names): ``rule`` (the config's ``rules`` as they are), ``vm_command_line`` /
``vm_command_error`` (stdout / stderr of ``command``, ``shell`` as in setup), ``vm_file`` (``path``; ``multi`` and
``gives`` as OSWorld: a :class:`~sandbox.tasks.values.FileData`, None for a missing file, or a list),
``cloud_file`` (the same over fixture URLs), ``cache_file`` (an ``execute`` step's ``stdout``/``stderr`` file),
``list_directory`` (``{"type": "directory", "name", "children": [...]}``, None for a missing folder),
``vm_screen_size`` (``{"width", "height"}``). This platform's own: ``clipboard`` (the text of the X selection
``selection``, ``CLIPBOARD`` by default, or None when nothing owns it; read with python3-xlib, so the images need
neither xsel nor xclip), ``browser_evaluate`` (the JSON value of ``expression`` evaluated in the active page).
The Chrome ones are in :mod:`sandbox.tasks.getters_chrome`, the android ones in :mod:`sandbox.tasks.android`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.tasks import android, osworld, scripts
from sandbox.tasks.errors import TaskError
from sandbox.tasks.getters_chrome import CHROME_GETTERS, NEEDS_BROWSER, NEEDS_CHROMIUM
from sandbox.tasks.runtime import EvalContext
from sandbox.tasks.transfer import get_file
from sandbox.tasks.values import FileData

COMMAND_TIMEOUT_S = 120.0

GetterFn = Callable[[EvalContext, dict[str, Any]], Awaitable[Any]]


async def rule(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return config.get("rules")


async def _run(ctx: EvalContext, config: dict[str, Any], what: str) -> tuple[str, str]:
    cmd = osworld.command(config.get("command"), bool(config.get("shell", False)), what=what)
    result = await ctx.runtime.exec(cmd, timeout=COMMAND_TIMEOUT_S)
    if result.timed_out:
        raise TaskError(f"{what}: the command did not finish within {COMMAND_TIMEOUT_S:g} s")
    return result.stdout, result.stderr


async def vm_command_line(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return (await _run(ctx, config, "vm_command_line"))[0]


async def vm_command_error(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return (await _run(ctx, config, "vm_command_error"))[1]


def _files(config: dict[str, Any], what: str) -> tuple[list[str], list[int]]:
    paths = config.get("path")
    if config.get("multi", False):
        if not (isinstance(paths, list) and all(isinstance(p, str) for p in paths)):
            raise TaskError(f"{what}: with multi, path is a list of paths, not {paths!r}")
    elif isinstance(paths, str):
        paths = [paths]
    else:
        raise TaskError(f"{what}: path must be a string, not {paths!r}")
    gives = config.get("gives", [0])
    if not (isinstance(gives, list) and all(isinstance(g, int) for g in gives)):
        raise TaskError(f"{what}: gives must be a list of indexes, not {gives!r}")
    return paths, gives


def _given(found: list[FileData | None], gives: list[int]) -> Any:
    chosen = [found[i] for i in range(len(found)) if i in gives]
    return chosen[0] if len(chosen) == 1 else chosen


async def vm_file(ctx: EvalContext, config: dict[str, Any]) -> Any:
    paths, gives = _files(config, "vm_file")
    found: list[FileData | None] = []
    for raw in paths:
        path = osworld.map_path(raw)
        data = await get_file(ctx.runtime, path)
        found.append(FileData(path, data) if data is not None else None)
    return _given(found, gives)


async def cloud_file(ctx: EvalContext, config: dict[str, Any]) -> Any:
    urls, gives = _files(config, "cloud_file")
    return _given([FileData(url, ctx.fixtures.resolve(url)) for url in urls], gives)


async def cache_file(ctx: EvalContext, config: dict[str, Any]) -> Any:
    name = config.get("path")
    if not isinstance(name, str) or name.startswith("/") or ".." in name.split("/"):
        raise TaskError(f"cache_file: path must name a relative file, not {name!r}")
    path = f"{osworld.CACHE_DIR}/{name}"
    data = await get_file(ctx.runtime, path)
    return FileData(path, data) if data is not None else None


async def list_directory(ctx: EvalContext, config: dict[str, Any]) -> Any:
    path = config.get("path")
    if not isinstance(path, str):
        raise TaskError(f"list_directory: path must be a string, not {path!r}")
    result = await ctx.runtime.exec(scripts.argv(scripts.LIST_DIRECTORY, osworld.map_path(path)), timeout=60)
    return scripts.output(result, f"cannot list {path}")


async def vm_screen_size(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return {"width": ctx.runtime.screen_width, "height": ctx.runtime.screen_height}


async def clipboard(ctx: EvalContext, config: dict[str, Any]) -> Any:
    selection = config.get("selection", "CLIPBOARD")
    if selection not in ("CLIPBOARD", "PRIMARY", "SECONDARY"):
        raise TaskError(f"clipboard: selection must be CLIPBOARD, PRIMARY or SECONDARY, not {selection!r}")
    result = await ctx.runtime.exec(scripts.argv(scripts.CLIPBOARD, selection), timeout=30)
    return scripts.output(result, "cannot read the clipboard")


async def browser_evaluate(ctx: EvalContext, config: dict[str, Any]) -> Any:
    expression = config.get("expression")
    if not isinstance(expression, str) or not expression:
        raise TaskError(f"browser_evaluate: expression must be a JavaScript expression, not {expression!r}")
    return await ctx.runtime.evaluate_js(expression)


GETTERS: dict[str, GetterFn] = {
    "rule": rule,
    "vm_command_line": vm_command_line,
    "vm_command_error": vm_command_error,
    "vm_file": vm_file,
    "cloud_file": cloud_file,
    "cache_file": cache_file,
    "list_directory": list_directory,
    "vm_screen_size": vm_screen_size,
    "clipboard": clipboard,
    "browser_evaluate": browser_evaluate,
    **CHROME_GETTERS,
    **android.GETTERS,
}
GETTER_NEEDS_BROWSER = NEEDS_BROWSER | {"browser_evaluate"}
GETTER_NEEDS_CHROMIUM = NEEDS_CHROMIUM
GETTER_NEEDS_DISPLAY = frozenset({"clipboard"})
GETTER_NEEDS_ANDROID = frozenset(android.GETTERS)
GETTER_NOT_ON_ANDROID = android.GETTERS_NOT_ON_ANDROID


async def get(ctx: EvalContext, getter_type: str, config: dict[str, Any]) -> Any:
    fn = GETTERS.get(getter_type)
    if fn is None:
        raise TaskError(f"unsupported getter type {getter_type!r}")
    return await fn(ctx, config)
