"""Windows, as OSWorld's server handles them on Linux: ``/setup/activate_window``, ``/setup/close_window`` (wmctrl,
by title or with ``by_class`` by WM_CLASS, ``strict`` for the whole name), ``/window_size`` (by WM_CLASS) and
``/setup/open_file`` (xdg-open, then wait for a window showing the file's name and raise it).

As on OSWorld's VM, activating or closing a window that does not exist still answers 200 (wmctrl's failure is
logged, not returned).
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import time
from typing import Any

from sandbox.agent.osworld_api.web import HttpError, Request, Response, json_response, text_response

OPEN_WAIT_S = 20.0
"""How long /setup/open_file waits for a window with the file's name."""
OPEN_SETTLE_S = 3.0
"""Once a new window has appeared, how long to wait still for one with the file's name (a browser shows the page's
title, not the file's name)."""
POLL_S = 0.1

log = logging.getLogger("sandbox.osworld_api")


def window_list() -> list[tuple[str, str, str]]:
    """(id, WM_CLASS as ``instance.Class``, title) of each managed window (``wmctrl -lx``)."""
    try:
        out = subprocess.run(["wmctrl", "-lx"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    windows = []
    for line in out.splitlines():
        parts = line.split(None, 4)
        if len(parts) >= 4:
            windows.append((parts[0], parts[2], parts[4] if len(parts) > 4 else ""))
    return windows


def window_titles() -> list[str]:
    return [title for _, _, title in window_list()]


def _wmctrl(action: str, request: Request) -> tuple[str, int]:
    data = request.json()
    name = data.get("window_name")
    if not name:
        raise HttpError(400, {"status": "error", "message": "window_name not supplied"})
    flags = "-" + ("x" if data.get("by_class") else "") + ("F" if data.get("strict") else "") + action
    done = subprocess.run(["wmctrl", flags, str(name)], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        log.info("wmctrl %s %r: exit %s %s", flags, name, done.returncode, done.stderr.strip())
    return str(name), done.returncode


def activate_window(request: Request) -> Response:
    _wmctrl("a", request)
    return text_response("Window activated successfully")


def close_window(request: Request) -> Response:
    _wmctrl("c", request)
    return text_response("Window closed successfully")


def window_size(request: Request) -> Response:
    """Form ``app_class_name`` -> ``{width, height}`` of the first window whose WM_CLASS names it; 404 if none."""
    name = (request.form.get("app_class_name") or "").lower()
    if not name:
        raise HttpError(400, {"error": "app_class_name not supplied"})
    found = _geometry_by_class(name)
    if found is None:
        raise HttpError(404, {"error": f"no window of class {name!r}"})
    return json_response({"width": found[0], "height": found[1]})


def _geometry_by_class(name: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(["wmctrl", "-lGx"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = line.split(None, 8)  # id desktop x y w h class host title
        if len(parts) >= 7 and name in [p.lower() for p in parts[6].split(".")]:
            return int(parts[4]), int(parts[5])
    return None


def open_file(request: Request) -> Response:
    """``{path}``: xdg-open it; 404 if missing, 500 if no application opens it. Waits (up to ``OPEN_WAIT_S``) for a
    window whose title shows the file's name, and raises it."""
    raw = request.json().get("path")
    if not raw:
        raise HttpError(400, {"status": "error", "message": "Path not supplied!"})
    path = os.path.expandvars(os.path.expanduser(str(raw)))
    if not os.path.exists(path):
        return text_response(f"File not found: {path}", 404)
    before = {wid for wid, _, _ in window_list()}
    # xdg-open runs the application in the foreground: its messages go to a file, not to a pipe that could fill
    with tempfile.TemporaryFile() as errors:
        try:
            opener = subprocess.Popen(
                ["xdg-open", path], stdin=subprocess.DEVNULL, stdout=errors, stderr=errors, start_new_session=True
            )
        except OSError as e:
            return text_response(f"Failed to open {path}: {e}", 500)
        names = {os.path.basename(path.rstrip("/")), os.path.splitext(os.path.basename(path.rstrip("/")))[0]}
        return _wait_for_window(opener, errors, path, names - {""}, before)


def _wait_for_window(
    opener: subprocess.Popen[Any], errors: Any, path: str, names: set[str], before: set[str]
) -> Response:
    started = time.monotonic()
    first_new: float | None = None
    while time.monotonic() - started < OPEN_WAIT_S:
        rc = opener.poll()
        if rc not in (None, 0):
            errors.seek(0)
            err = errors.read()[-2000:].decode(errors="replace").strip()
            return text_response(f"Failed to open {path}: xdg-open exited with {rc}: {err}", 500)
        for wid, _, title in window_list():
            if any(n in title for n in names):
                subprocess.run(["wmctrl", "-ia", wid], capture_output=True, timeout=10)
                return text_response("File opened and window activated successfully")
            if wid not in before and first_new is None:
                first_new = time.monotonic()
        if first_new is not None and time.monotonic() - first_new >= OPEN_SETTLE_S:
            break
        time.sleep(POLL_S)
    return text_response("File opened successfully")
