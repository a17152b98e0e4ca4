"""Keys and clicks as CDP ``Input.dispatchKeyEvent`` / ``Input.dispatchMouseEvent`` parameters, sent to one page.

Input goes to the page's renderer, not through the X server: several pages take input at once, none needs the
keyboard focus. A key is a DOM key name (``ArrowUp``, ``Enter``, ``a``), an X keysym name the computer actions also
take (``Up``, ``Return``, ``space``), or a combo of modifiers and one key (``ctrl+a``, ``shift+Tab``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.agent.errors import bad_request


@dataclass(frozen=True)
class KeyDef:
    key: str
    """The DOM ``KeyboardEvent.key``."""
    code: str
    key_code: int
    """``windowsVirtualKeyCode``: what ``KeyboardEvent.keyCode`` reports."""
    text: str = ""
    """The character typed, if any."""


_NAMED: dict[str, KeyDef] = {
    "arrowup": KeyDef("ArrowUp", "ArrowUp", 38),
    "arrowdown": KeyDef("ArrowDown", "ArrowDown", 40),
    "arrowleft": KeyDef("ArrowLeft", "ArrowLeft", 37),
    "arrowright": KeyDef("ArrowRight", "ArrowRight", 39),
    "enter": KeyDef("Enter", "Enter", 13, "\r"),
    "escape": KeyDef("Escape", "Escape", 27),
    "tab": KeyDef("Tab", "Tab", 9),
    "backspace": KeyDef("Backspace", "Backspace", 8),
    "delete": KeyDef("Delete", "Delete", 46),
    "insert": KeyDef("Insert", "Insert", 45),
    "home": KeyDef("Home", "Home", 36),
    "end": KeyDef("End", "End", 35),
    "pageup": KeyDef("PageUp", "PageUp", 33),
    "pagedown": KeyDef("PageDown", "PageDown", 34),
    " ": KeyDef(" ", "Space", 32, " "),
    "shift": KeyDef("Shift", "ShiftLeft", 16),
    "control": KeyDef("Control", "ControlLeft", 17),
    "alt": KeyDef("Alt", "AltLeft", 18),
    "meta": KeyDef("Meta", "MetaLeft", 91),
    **{f"f{n}": KeyDef(f"F{n}", f"F{n}", 111 + n) for n in range(1, 13)},
}
_ALIASES = {
    "up": "arrowup", "down": "arrowdown", "left": "arrowleft", "right": "arrowright", "return": "enter",
    "esc": "escape", "space": " ", "spacebar": " ", "del": "delete", "page_up": "pageup", "prior": "pageup",
    "page_down": "pagedown", "next": "pagedown", "ctrl": "control", "control_l": "control", "shift_l": "shift",
    "alt_l": "alt", "super": "meta", "super_l": "meta", "cmd": "meta",
}  # fmt: skip
_MODIFIER_BITS = {"Alt": 1, "Control": 2, "Meta": 4, "Shift": 8}
_PUNCTUATION_CODES = {
    "-": ("Minus", 189), "=": ("Equal", 187), "[": ("BracketLeft", 219), "]": ("BracketRight", 221),
    "\\": ("Backslash", 220), ";": ("Semicolon", 186), "'": ("Quote", 222), ",": ("Comma", 188),
    ".": ("Period", 190), "/": ("Slash", 191), "`": ("Backquote", 192),
}  # fmt: skip
BUTTONS = ("left", "middle", "right")


def key_def(name: str) -> KeyDef:
    """The key called ``name`` (no modifiers)."""
    if len(name) == 1:
        return _char(name)
    lowered = name.lower()
    found = _NAMED.get(_ALIASES.get(lowered, lowered))
    if found is None:
        raise bad_request(f"unknown key {name!r}: use a DOM key name (ArrowUp, Enter, Escape, F5, a, ...)")
    return found


def _char(char: str) -> KeyDef:
    if char == " ":
        return _NAMED[" "]
    if char.isascii() and char.isalpha():
        return KeyDef(char, f"Key{char.upper()}", ord(char.upper()), char)
    if char.isdigit() and char.isascii():
        return KeyDef(char, f"Digit{char}", ord(char), char)
    code, key_code = _PUNCTUATION_CODES.get(char, ("", 0))
    return KeyDef(char, code, key_code, char)


def parse_combo(combo: str) -> tuple[list[KeyDef], KeyDef]:
    """``"ctrl+shift+a"`` → the modifier keys and the main key; ``"+"`` alone is the plus key."""
    if not combo or len(combo) > 64:
        raise bad_request("argument 'key' must be 1-64 characters")
    if combo == "+":
        parts = ["+"]
    elif combo.endswith("++"):
        parts = [*combo[:-2].split("+"), "+"]
    else:
        parts = combo.split("+")
    if any(not part for part in parts):
        raise bad_request(f"bad key combo {combo!r}: write it as modifier+key, e.g. ctrl+a")
    keys = [key_def(part) for part in parts]
    modifiers, main = keys[:-1], keys[-1]
    for modifier in modifiers:
        if modifier.key not in _MODIFIER_BITS:
            raise bad_request(f"bad key combo {combo!r}: {modifier.key!r} is not a modifier (ctrl, shift, alt, meta)")
    return modifiers, main


def key_events(combo: str) -> list[dict[str, Any]]:
    """The ``Input.dispatchKeyEvent`` calls of one press of ``combo``: modifiers down, the key down and up,
    modifiers up (in reverse)."""
    modifiers, main = parse_combo(combo)
    events: list[dict[str, Any]] = []
    bits = 0
    for modifier in modifiers:
        bits |= _MODIFIER_BITS[modifier.key]
        events.append(_key_event("rawKeyDown", modifier, bits))
    # Text only when no command modifier is held: ctrl+a selects, it does not type an "a".
    text = main.text if not bits & ~_MODIFIER_BITS["Shift"] else ""
    if text and bits & _MODIFIER_BITS["Shift"] and len(text) == 1:
        text = text.upper()
    if text and text != main.text:
        main = KeyDef(text, main.code, main.key_code, text)
    events.append(_key_event("keyDown" if text else "rawKeyDown", main, bits, text))
    events.append(_key_event("keyUp", main, bits))
    for modifier in reversed(modifiers):
        bits &= ~_MODIFIER_BITS[modifier.key]
        events.append(_key_event("keyUp", modifier, bits))
    return events


def _key_event(kind: str, key: KeyDef, modifiers: int, text: str = "") -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": kind,
        "key": key.key,
        "code": key.code,
        "windowsVirtualKeyCode": key.key_code,
        "nativeVirtualKeyCode": key.key_code,
        "modifiers": modifiers,
    }
    if text:
        event["text"] = event["unmodifiedText"] = text
    return event


def click_events(x: float, y: float, *, button: str = "left", count: int = 1) -> list[dict[str, Any]]:
    """The ``Input.dispatchMouseEvent`` calls of a click (``count`` 2: a double click) at ``x, y`` in the page's
    viewport (CSS pixels)."""
    if button not in BUTTONS:
        raise bad_request(f"argument 'button' must be one of {', '.join(BUTTONS)}, got {button!r}")
    if not 1 <= count <= 3:
        raise bad_request(f"argument 'count' must be 1-3, got {count}")
    if not (0 <= x <= 16384 and 0 <= y <= 16384):
        raise bad_request(f"click position ({x}, {y}) is out of range")
    events: list[dict[str, Any]] = [{"type": "mouseMoved", "x": x, "y": y, "button": "none"}]
    for n in range(1, count + 1):
        for kind in ("mousePressed", "mouseReleased"):
            events.append({"type": kind, "x": x, "y": y, "button": button, "clickCount": n})
    return events
