"""The setup step types a task's ``config`` (and its evaluator's ``postconfig``) may use, each done here as
OSWorld's setup controller does it. See :mod:`sandbox.tasks.osworld` for how OSWorld's paths, commands and
placeholders map here.

======================  ===========================================================================================
type                    what it does here
======================  ===========================================================================================
``execute``/``command`` runs ``command`` (``shell``, placeholders substituted); its exit code is ignored, like OSWorld,
                        but a timeout (120 s) fails the step. ``stdout``/``stderr`` name files that keep the output
                        for the ``cache_file`` getter; ``until`` (``returncode``/``stdout``/``stderr``) re-runs the
                        command every 0.3 s until met (60 s at most).
``download``            ``files: [{url, path}]``: each URL's fixture written to ``path``
``open``                ``path``: opened with the desktop's default application (``gio open`` does the same),
                        then waits up to 30 s for a window whose title names the file
``launch``              ``command`` (``shell``) started in the background; like ``open``, on a desktop it first waits
                        until the window manager takes new windows
``sleep``               ``seconds``
``activate_window``     ``window_name`` (``strict``: whole title; ``by_class``: WM class), case-insensitive like
                        ``wmctrl -a``; waits up to 15 s for the window, raises it and gives it the focus
``close_window``        the same selection; asks the first window found to close (``WM_DELETE_WINDOW``), or kills
                        its client when it does not take that message
``chrome_open_tabs``    ``urls_to_open``: each in a new tab, in order (OSWorld opens each in a new page), once
                        Chromium's DevTools answer (up to 30 s: a ``launch`` just before only started it); the last
                        one ends up active, loaded, with the keyboard focus in the page. A blank tab that was open
                        before (Chromium's start page) is closed: the tabs are then exactly the URLs.
``chrome_close_tabs``   ``urls_to_close``: for each, the first open tab with that URL (OSWorld's URL equality),
                        once Chromium's DevTools answer
``adb_shell``,          android sandboxes' own (:mod:`sandbox.tasks.android`), which take neither ``open``,
``adb_install``,        ``launch`` nor the window steps (no X there)
``open_app``
======================  ===========================================================================================

Each type registers its handler, its parameters (required, optional) and what sandbox it needs (a display, a
browser, android) here; :mod:`sandbox.tasks.setup` runs a task's steps by them, and :mod:`sandbox.tasks.catalog`
checks a task's steps against them before it runs.
"""

from __future__ import annotations

import asyncio
import posixpath
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.models import SandboxKind
from sandbox.tasks import android, osworld, scripts
from sandbox.tasks.errors import TaskError
from sandbox.tasks.matching import compare_urls
from sandbox.tasks.runtime import StepContext, TaskRuntime
from sandbox.tasks.transfer import put_file

EXEC_TIMEOUT_S = 120.0
UNTIL_TIMEOUT_S = 60.0
UNTIL_INTERVAL_S = 0.3
OPEN_WAIT_S = 30.0
WINDOW_WAIT_S = 15.0
MAX_SLEEP_S = 600.0


Handler = Callable[[StepContext, dict[str, Any]], Awaitable[None]]

STEPS: dict[str, Handler] = {}
PARAMETERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
"""For each setup type: (required parameters, optional parameters)."""
NEEDS_DISPLAY = frozenset({"open", "activate_window", "close_window"})
NEEDS_BROWSER = frozenset({"chrome_open_tabs", "chrome_close_tabs"})
NEEDS_ANDROID = frozenset(android.STEPS)
NOT_ON_ANDROID = android.NOT_ON_ANDROID


def _step(*names: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            STEPS[name] = fn
            PARAMETERS[name] = (required, optional)
        return fn

    return register


for _name, (_fn, _required, _optional) in android.STEPS.items():  # sandbox.tasks.android's, android sandboxes only
    _step(_name, required=_required, optional=_optional)(_fn)


_MISSING: Any = object()


def _param(
    params: dict[str, Any], name: str, kind: type | tuple[type, ...], label: str, default: Any = _MISSING
) -> Any:
    value = params.get(name)
    if value is None:
        if default is _MISSING:
            raise TaskError(f"{label}: missing parameter {name!r}")
        return default
    if not isinstance(value, kind):
        raise TaskError(f"{label}: parameter {name!r} must be {getattr(kind, '__name__', kind)}, not {value!r}")
    return value


@_step("execute", "command", required=("command",), optional=("shell", "stdout", "stderr", "until"))
async def _execute(ctx: StepContext, p: dict[str, Any]) -> None:
    rt = ctx.runtime
    values = osworld.placeholder_values(rt.screen_width, rt.screen_height, ctx.password)
    cmd = osworld.command(osworld.substitute(p.get("command"), values), bool(p.get("shell")), what=ctx.label)
    until = _param(p, "until", dict, ctx.label, {}) or {}
    outputs = {key: _cache_name(p.get(key), ctx.label) for key in ("stdout", "stderr") if p.get(key)}
    give_up = asyncio.get_running_loop().time() + UNTIL_TIMEOUT_S
    while True:
        result = await rt.exec(cmd, timeout=EXEC_TIMEOUT_S)
        if result.timed_out:
            raise TaskError(f"the command did not finish within {EXEC_TIMEOUT_S:g} s: {osworld.shell_line(cmd)}")
        for key, name in outputs.items():
            text = result.stdout if key == "stdout" else result.stderr
            await put_file(rt, f"{osworld.CACHE_DIR}/{name}", text.encode())
        if not until or _until_met(until, result.exit_code, result.stdout, result.stderr):
            return
        if asyncio.get_running_loop().time() >= give_up:
            raise TaskError(f"the command did not meet {until} within {UNTIL_TIMEOUT_S:g} s")
        await asyncio.sleep(UNTIL_INTERVAL_S)


def _until_met(until: dict[str, Any], code: int | None, out: str, err: str) -> bool:
    return bool(
        ("returncode" in until and code == until["returncode"])
        or ("stdout" in until and str(until["stdout"]) in out)
        or ("stderr" in until and str(until["stderr"]) in err)
    )


def _cache_name(name: Any, label: str) -> str:
    if not isinstance(name, str) or name.startswith("/") or ".." in name.split("/"):
        raise TaskError(f"{label}: stdout/stderr must name a relative file, not {name!r}")
    return name


@_step("download", required=("files",))
async def _download(ctx: StepContext, p: dict[str, Any]) -> None:
    files = _param(p, "files", list, ctx.label)
    for entry in files:
        if not (isinstance(entry, dict) and isinstance(entry.get("url"), str) and isinstance(entry.get("path"), str)):
            raise TaskError(f"{ctx.label}: each file is {{url, path}}, not {entry!r}")
        data = ctx.fixtures.resolve(entry["url"])
        await put_file(ctx.runtime, osworld.map_path(entry["path"]), data)


WM_READY = (
    "for i in $(seq 100); do xprop -root _NET_WORKAREA 2>/dev/null | grep -q = && exit 0; sleep 0.05; done; exit 1"
)
"""Openbox sets ``_NET_SUPPORTING_WM_CHECK`` (what the desktop's readiness probe waits for) some 250 ms before it
manages new windows; a window mapped in between is never shown. ``_NET_WORKAREA`` comes once it does."""


async def _desktop_ready(rt: TaskRuntime) -> None:
    """On a desktop, wait (up to 5 s) until the window manager manages new windows, before starting an app."""
    if rt.kind == SandboxKind.DESKTOP:
        await rt.exec(WM_READY, timeout=15)


@_step("open", required=("path",))
async def _open(ctx: StepContext, p: dict[str, Any]) -> None:
    path = osworld.map_path(_param(p, "path", str, ctx.label))
    await _desktop_ready(ctx.runtime)
    opened = await ctx.runtime.exec(scripts.argv(scripts.OPEN, path), timeout=30, keep_background=True)
    scripts.output(opened, f"cannot open {path}")
    name = posixpath.basename(path.rstrip("/")) or path
    stem = posixpath.splitext(name)[0]
    pattern = "|".join(dict.fromkeys(osworld.xdotool_regex(n) for n in (name, stem) if n))
    if not await _windows(ctx.runtime, pattern, ("--name",), OPEN_WAIT_S):
        raise TaskError(f"{path} was opened but no window named after it appeared within {OPEN_WAIT_S:g} s")


@_step("launch", required=("command",), optional=("shell",))
async def _launch(ctx: StepContext, p: dict[str, Any]) -> None:
    cmd = osworld.command(p.get("command"), bool(p.get("shell")), what=ctx.label)
    log = f"{osworld.STATE_DIR}/launch.log"
    await _desktop_ready(ctx.runtime)
    result = await ctx.runtime.exec(osworld.background(cmd, log), timeout=30, keep_background=True)
    if not result.ok:
        raise TaskError(f"cannot start {osworld.shell_line(cmd)}: {result.stderr.strip() or result.exit_code}")


@_step("sleep", required=("seconds",))
async def _sleep(ctx: StepContext, p: dict[str, Any]) -> None:
    seconds = _param(p, "seconds", (int, float), ctx.label)
    if not 0 <= seconds <= MAX_SLEEP_S:
        raise TaskError(f"{ctx.label}: seconds must be in [0, {MAX_SLEEP_S:g}], not {seconds}")
    await asyncio.sleep(float(seconds))


def _selection(p: dict[str, Any], label: str) -> tuple[str, tuple[str, ...], str]:
    name = _param(p, "window_name", str, label)
    strict, by_class = bool(p.get("strict", False)), bool(p.get("by_class", False))
    pattern = osworld.xdotool_regex(name)
    pattern = f"^{pattern}$" if strict else pattern
    flags = ("--class", "--classname") if by_class else ("--name",)
    return pattern, flags, f"{'class' if by_class else 'title'} {name!r}"


async def _windows(rt: TaskRuntime, pattern: str, flags: tuple[str, ...], wait: float) -> list[str]:
    """Ids of the visible windows matching, waiting up to ``wait`` seconds for the first to appear."""
    argv = ["xdotool", "search", "--sync", "--onlyvisible", *flags, pattern]
    result = await rt.exec(["timeout", f"{wait:g}", *argv], timeout=wait + 15)
    return result.stdout.split() if result.exit_code == 0 else []


@_step("activate_window", required=("window_name",), optional=("strict", "by_class"))
async def _activate_window(ctx: StepContext, p: dict[str, Any]) -> None:
    pattern, flags, what = _selection(p, ctx.label)
    found = await _windows(ctx.runtime, pattern, flags, WINDOW_WAIT_S)
    if not found:
        raise TaskError(f"no window with the {what} appeared within {WINDOW_WAIT_S:g} s")
    wid = shlex.quote(found[0])
    # windowactivate needs a window manager (the desktop has one); without one, raise and focus the window.
    line = f"xdotool windowactivate --sync {wid} 2>/dev/null || xdotool windowraise {wid} windowfocus --sync {wid}"
    result = await ctx.runtime.exec(line, timeout=30)
    if not result.ok:
        raise TaskError(f"cannot activate the window with the {what}: {result.stderr.strip() or result.exit_code}")


@_step("close_window", required=("window_name",), optional=("strict", "by_class"))
async def _close_window(ctx: StepContext, p: dict[str, Any]) -> None:
    pattern, flags, what = _selection(p, ctx.label)
    found = await _windows(ctx.runtime, pattern, flags, WINDOW_WAIT_S)
    if not found:
        raise TaskError(f"no window with the {what} to close")
    closed = await ctx.runtime.exec(scripts.argv(scripts.CLOSE_WINDOWS, found[0]), timeout=30)
    scripts.output(closed, f"cannot close the window with the {what}")


@_step("chrome_open_tabs", required=("urls_to_open",))
async def _chrome_open_tabs(ctx: StepContext, p: dict[str, Any]) -> None:
    urls = _param(p, "urls_to_open", list, ctx.label)
    if not urls or not all(isinstance(u, str) and u for u in urls):
        raise TaskError(f"{ctx.label}: urls_to_open must be a list of URLs, not {urls!r}")
    await _devtools_ready(ctx.runtime)
    before = scripts.output(await ctx.runtime.exec(scripts.argv(scripts.CDP, "list"), timeout=30), "cannot list tabs")
    opened = await ctx.runtime.exec(scripts.argv(scripts.CDP, "new", *urls), timeout=60)
    ids = scripts.output(opened, f"cannot open tabs for {urls}")
    # In the sandbox, over that tab's own DevTools websocket: a desktop's agent drives no browser (a task's Chromium
    # there is the user's), and the runtime's evaluate_js asks whichever page is active, not this tab by its id.
    loaded = await ctx.runtime.exec(
        scripts.argv(scripts.CDP, "loaded", str(ids[-1]), f"{LOAD_TIMEOUT_S:g}"), timeout=LOAD_TIMEOUT_S + 15
    )
    scripts.output(loaded, f"the tab for {urls[-1]} did not load")
    blank = [str(t["id"]) for t in before if t.get("url") in scripts.BLANK_PAGES]
    if blank:
        closed = await ctx.runtime.exec(scripts.argv(scripts.CDP, "close", *blank), timeout=30)
        scripts.output(closed, "cannot close the blank tab")


LOAD_TIMEOUT_S = 30.0
DEVTOOLS_WAIT_S = 30.0


async def _devtools_ready(rt: TaskRuntime) -> None:
    """Wait (up to 30 s) until a Chromium's DevTools answer: a ``launch`` step just before only started it, and
    Chromium opens its DevTools port some 0.4-1 s after it starts on an idle machine, later on a busy one (OSWorld's
    own setup waits for it too, retrying its CDP connection)."""
    waited = await rt.exec(scripts.argv(scripts.CDP, "ready", f"{DEVTOOLS_WAIT_S:g}"), timeout=DEVTOOLS_WAIT_S + 15)
    scripts.output(waited, "cannot list tabs")


@_step("chrome_close_tabs", required=("urls_to_close",))
async def _chrome_close_tabs(ctx: StepContext, p: dict[str, Any]) -> None:
    urls = _param(p, "urls_to_close", list, ctx.label)
    await _devtools_ready(ctx.runtime)
    for url in urls:
        listed = await ctx.runtime.exec(scripts.argv(scripts.CDP, "list"), timeout=30)
        tabs = scripts.output(listed, "cannot list the tabs")
        match = next((t for t in tabs if compare_urls(t.get("url"), url)), None)
        if match is None:
            continue  # OSWorld closes the tabs it finds and goes on
        closed = await ctx.runtime.exec(scripts.argv(scripts.CDP, "close", str(match["id"])), timeout=30)
        scripts.output(closed, f"cannot close the tab {url}")
