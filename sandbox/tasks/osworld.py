"""What OSWorld's machine looks like, mapped onto this platform's sandboxes.

- **Home.** OSWorld's user is ``user`` with home ``/home/user``; a sandbox's user is ``sandbox`` with home
  ``/home/sandbox``. ``/home/user`` (as a whole path component) and a leading ``~`` become ``/home/sandbox`` in
  paths (``download``, ``open``, ``vm_file``, ...) and in command lines and arguments.
- **Chrome.** ``google-chrome``/``google-chrome-stable``/``chrome`` run Chromium with the same arguments, and
  Chrome's profile folder ``~/.config/google-chrome`` is Chromium's ``~/.config/chromium``.
- **Python.** An argv starting with ``python`` runs ``python3`` (the images have no ``python`` alias).
- **Placeholders** in ``execute``/``command`` strings and list items: ``{SCREEN_WIDTH}``, ``{SCREEN_HEIGHT}``,
  ``{SCREEN_WIDTH_HALF}``, ``{SCREEN_HEIGHT_HALF}`` (integer halves) and ``{CLIENT_PASSWORD}``.
- **Shell.** ``shell: false`` with a string splits it like ``shlex`` (OSWorld's server does); ``shell: true`` runs
  a string under ``bash -c`` (OSWorld: ``/bin/sh -c``), a list's first item as the script and the rest as its
  ``$0 $1 ...``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from sandbox.tasks.errors import TaskError

SANDBOX_HOME = "/home/sandbox"
OSWORLD_HOME = "/home/user"
CHROME_PROFILE = f"{SANDBOX_HOME}/.config/chromium"
"""Chromium's user-data folder in the desktop and browser sandboxes (``Default/`` is the profile)."""
STATE_DIR = "/tmp/.sandbox-tasks"
"""Where setup keeps what it hands to evaluation (``execute``'s ``stdout``/``stderr`` files) and stages files."""
CACHE_DIR = f"{STATE_DIR}/cache"

_HOME = re.compile(r"(?<![\w.~/-])/home/user(?![\w.-])")
_CHROME_PROFILE = re.compile(r"\.config/google-chrome(?![\w.-])")
_CHROME_BIN = re.compile(r"(?<![\w.-])(?:/usr/bin/|/opt/google/chrome/)?(?:google-chrome(?:-stable)?)(?![\w.-])")
CHROME_NAMES = frozenset({"google-chrome", "google-chrome-stable", "chrome", "/usr/bin/google-chrome"})
PLACEHOLDERS = ("SCREEN_WIDTH_HALF", "SCREEN_HEIGHT_HALF", "SCREEN_WIDTH", "SCREEN_HEIGHT", "CLIENT_PASSWORD")


def map_path(path: str) -> str:
    """An OSWorld path as the sandbox sees it: ``~`` and ``/home/user`` -> ``/home/sandbox``, Chrome's profile ->
    Chromium's."""
    if path == "~" or path.startswith("~/"):
        path = SANDBOX_HOME + path[1:]
    return map_text(path)


def map_text(text: str) -> str:
    """OSWorld's home and Chrome names inside free text (a shell command line)."""
    text = _HOME.sub(SANDBOX_HOME, text)
    text = _CHROME_PROFILE.sub(".config/chromium", text)
    return _CHROME_BIN.sub("chromium", text)


def map_argv(argv: list[str]) -> list[str]:
    """An argv as OSWorld's server runs it (``~/`` expanded), mapped to the sandbox (home, chromium, python3)."""
    out = [map_path(a) if a.startswith("~/") else map_text(a) for a in argv]
    if out and out[0] in CHROME_NAMES:
        out[0] = "chromium"
    if out and out[0] in ("python", "/usr/bin/python"):
        out[0] = "python3"
    return out


def placeholder_values(width: int, height: int, password: str) -> dict[str, str]:
    return {
        "SCREEN_WIDTH_HALF": str(width // 2),
        "SCREEN_HEIGHT_HALF": str(height // 2),
        "SCREEN_WIDTH": str(width),
        "SCREEN_HEIGHT": str(height),
        "CLIENT_PASSWORD": password,
    }


def substitute(command: Any, values: Mapping[str, str]) -> Any:
    """OSWorld's placeholders replaced in a string or in each string of a list; anything else unchanged."""
    if isinstance(command, str):
        for name in PLACEHOLDERS:
            command = command.replace("{" + name + "}", values[name])
        return command
    if isinstance(command, list):
        return [substitute(item, values) for item in command]
    return command


def command(raw: Any, shell: bool, *, what: str) -> str | list[str]:
    """The command to give ``TaskRuntime.exec`` for OSWorld's ``{command, shell}``: a bash string or an argv."""
    if isinstance(raw, str):
        if not raw.strip():
            raise TaskError(f"{what}: the command is empty")
        if shell:
            return map_text(raw)
        try:
            return map_argv(shlex.split(raw))
        except ValueError as e:
            raise TaskError(f"{what}: cannot split the command {raw!r}: {e}") from None
    if isinstance(raw, list) and raw and all(isinstance(a, str) for a in raw):
        if shell:
            script, *args = raw
            return ["bash", "-c", map_text(script), *args] if args else map_text(script)
        return map_argv(list(raw))
    raise TaskError(f"{what}: the command must be a non-empty string or list of strings, not {raw!r}")


def shell_line(cmd: str | list[str]) -> str:
    """A bash command line for ``cmd`` (a bash string as is, an argv quoted)."""
    return cmd if isinstance(cmd, str) else shlex.join(cmd)


def background(cmd: str | list[str], log: str) -> str:
    """A bash line starting ``cmd`` detached from the caller (own session, output to ``log``), returning at once."""
    inner = cmd if isinstance(cmd, str) else shlex.join(cmd)
    return f"mkdir -p {STATE_DIR} && setsid bash -c {shlex.quote(inner)} >>{shlex.quote(log)} 2>&1 </dev/null &"


def xdotool_regex(text: str) -> str:
    """``text`` as a POSIX extended regex matching itself (xdotool's ``search`` takes one)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)
