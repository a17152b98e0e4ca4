"""Characters and key names to X keysyms.

Characters map by rule (Latin-1 keysyms equal their code points, everything else has a Unicode keysym), so typing
needs only the standard library. Key names ("Return", "ctrl", "F5", "aacute", "XF86AudioMute") are looked up in
python-xlib's keysym tables, imported on the first named key.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from sandbox.agent.errors import bad_request

# Fixed by X11's keysymdef.h and X.h.
NO_SYMBOL = 0
XK_TAB = 0xFF09
XK_RETURN = 0xFF0D
XK_SHIFT_L = 0xFFE1
UNICODE_KEYSYM_BASE = 0x01000000

KEY_ALIASES = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "space",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pgup": "Prior",
    "pagedown": "Next",
    "pgdn": "Next",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "ctrl": "Control_L",
    "control": "Control_L",
    "alt": "Alt_L",
    "shift": "Shift_L",
    "super": "Super_L",
    "win": "Super_L",
    "meta": "Super_L",
    "cmd": "Super_L",
    "insert": "Insert",
    "capslock": "Caps_Lock",
}


def char_keysym(ch: str, position: int | None = None) -> int:
    """The keysym that types ``ch``; control characters other than newline and tab are refused."""
    if ch == "\n":
        return XK_RETURN
    if ch == "\t":
        return XK_TAB
    code = ord(ch)
    if code < 0x20 or 0x7F <= code < 0xA0:
        where = "" if position is None else f" at position {position}"
        raise bad_request(f"control character {ch!r}{where} cannot be typed")
    # Latin-1 keysyms equal their code points; everything else has a Unicode keysym.
    return code if code <= 0xFF else UNICODE_KEYSYM_BASE | code


def text_keysyms(text: str) -> list[int]:
    """The keysyms that type ``text``, line ends (CR LF, CR, LF) typed as Return."""
    return [char_keysym(ch, i) for i, ch in enumerate(text.replace("\r\n", "\n").replace("\r", "\n"))]


def split_combo(key: str) -> list[str]:
    """'ctrl+shift+t' -> ['ctrl', 'shift', 't']; a '+' not followed by anything is the plus key ('ctrl++')."""
    if not key:
        raise bad_request("argument 'key' must not be empty")
    return [part.strip() or part for part in re.split(r"\+(?=.)", key)]


def combo(key: str) -> list[int]:
    """The keysyms of a key combination such as 'ctrl+shift+t'."""
    return [keysym(part) for part in split_combo(key)]


def keysym(name: str) -> int:
    """A single character, an alias (``KEY_ALIASES``) or an X keysym name, in any case, to its keysym."""
    if len(name) == 1:
        return char_keysym(name)
    xk = _xk()
    found = int(xk.string_to_keysym(KEY_ALIASES.get(name.lower(), name)))
    if found == NO_SYMBOL:
        found = _keysym_names().get(name.lower(), NO_SYMBOL)
    if found == NO_SYMBOL:
        aliases = ", ".join(sorted({*KEY_ALIASES, "f1..f12"}))
        raise bad_request(f"unknown key {name!r}; use an X keysym name (Return, BackSpace, F5, a) or one of: {aliases}")
    return found


@functools.cache
def _xk() -> Any:
    from Xlib import XK

    XK.load_keysym_group("xkb")
    XK.load_keysym_group("xf86")
    return XK


@functools.cache
def _keysym_names() -> dict[str, int]:
    """Every keysym name python-xlib knows, lower-cased; on a clash the lower-case name wins (aacute, not Aacute)."""
    names: dict[str, int] = {}
    for attr, value in vars(_xk()).items():
        if attr.startswith("XK_"):
            name = attr[3:]
            key = name.lower().replace("xf86_", "xf86")  # python-xlib spells XF86AudioMute XF86_AudioMute
            if key not in names or name.islower():
                names[key] = value
    return names
