"""``/terminal`` and ``/accessibility``: what OSWorld's server reads through AT-SPI on its VM.

**Terminal.** OSWorld reads the text of GNOME Terminal's window. The image's ``gnome-terminal`` (an xterm) logs what
it shows to ``/tmp/sandbox-terminal/*.log``; ``/terminal`` answers ``{"output": text}`` of the most recently written
log, its escape sequences removed and carriage returns and backspaces applied, or ``{"output": null}`` when no
terminal was opened (as OSWorld's server answers when it finds none).

**Accessibility.** The image has no AT-SPI (no at-spi2-core, no pyatspi): there is no tree to give. The answer is
``{"AT": null}`` at once, which OSWorld's controller hands on as its own "no tree" (``None``) — where an error
status would have it retry three times, five seconds apart, for the same ``None``.
"""

from __future__ import annotations

import glob
import os
import re

from sandbox.agent.osworld_api.web import Request, Response, json_response

TERMINAL_LOGS = "/tmp/sandbox-terminal"
MAX_LOG_BYTES = 1024 * 1024
"""Only the end of a long terminal log is read."""

_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_ESC = re.compile(r"\x1b[()*+][0-9A-Za-z]|\x1b[=>78cDEHMNOZ]|\x1b")
_CONTROL = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1f\x7f]")


def screen_text(raw: str) -> str:
    """The text a terminal shows for ``raw`` output: escapes dropped, ``\\r`` and ``\\b`` applied per line."""
    text = _ESC.sub("", _CSI.sub("", _OSC.sub("", raw)))
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        cells: list[str] = []
        col = 0
        for ch in line:
            if ch == "\r":
                col = 0
            elif ch == "\b":
                col = max(0, col - 1)
            elif not _CONTROL.match(ch):
                if col < len(cells):
                    cells[col] = ch
                else:
                    cells.append(ch)
                col += 1
        lines.append("".join(cells).rstrip())
    return "\n".join(lines)


def terminal(_: Request) -> Response:
    logs = glob.glob(os.path.join(TERMINAL_LOGS, "*.log"))
    if not logs:
        return json_response({"output": None})
    newest = max(logs, key=lambda p: os.stat(p).st_mtime)
    with open(newest, "rb") as f:
        f.seek(max(0, os.path.getsize(newest) - MAX_LOG_BYTES))
        raw = f.read().decode("utf-8", "replace")
    return json_response({"output": screen_text(raw)})


def accessibility(_: Request) -> Response:
    return json_response({"AT": None, "error": "no AT-SPI in this image: no accessibility tree"})
