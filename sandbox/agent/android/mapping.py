"""The common computer actions as android ones, and the android-only actions: each action becomes a list of
``Op``s (tap, long_press, swipe, text, key, open_app, wait) that the driver does in order.

``MAPPING`` is the table docs/android.md shows (a unit test keeps the two the same).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from sandbox.agent.errors import bad_request, require

LONG_PRESS_MS = 800
SWIPE_MS = 300
SCROLL_STEP_PX = 120
"""One scroll click moves the content this many pixels (a swipe of that length, against the scroll)."""
MAX_DURATION_MS = 10_000

ANDROID_KEYS: dict[str, tuple[str, str]] = {
    # name: (ADB keycode, the W3C key value the gRPC controller takes)
    "back": ("KEYCODE_BACK", "GoBack"),
    "home": ("KEYCODE_HOME", "GoHome"),
    "enter": ("KEYCODE_ENTER", "Enter"),
    "app_switch": ("KEYCODE_APP_SWITCH", "AppSwitch"),
}
"""The android keys, by the names the ``key`` action takes."""

X_KEYS: dict[str, tuple[str, str]] = {
    "Return": ANDROID_KEYS["enter"],
    "KP_Enter": ANDROID_KEYS["enter"],
    "Escape": ANDROID_KEYS["back"],
    "BackSpace": ("KEYCODE_DEL", "Backspace"),
    "Delete": ("KEYCODE_FORWARD_DEL", "Delete"),
    "Tab": ("KEYCODE_TAB", "Tab"),
    "space": ("KEYCODE_SPACE", " "),
    "Up": ("KEYCODE_DPAD_UP", "ArrowUp"),
    "Down": ("KEYCODE_DPAD_DOWN", "ArrowDown"),
    "Left": ("KEYCODE_DPAD_LEFT", "ArrowLeft"),
    "Right": ("KEYCODE_DPAD_RIGHT", "ArrowRight"),
}
"""The X key names of the computer actions that mean something on a phone."""

KEYS = {**ANDROID_KEYS, **X_KEYS}

MAPPING: dict[str, str] = {
    "click": "tap at (x, y), `count` times; `button: right`: long_press; `button: middle`: refused",
    "double_click": "two taps at (x, y)",
    "right_click": "long_press at (x, y) (a phone's context menu)",
    "move": "no touch; remembers (x, y) for a click, tap or scroll without coordinates",
    "drag": "swipe from (x, y) to (to_x, to_y) in 300 ms",
    "scroll": "swipe through (x, y) against the scroll, 120 px a click (dy > 0: content moves up)",
    "type_text": "text input (gRPC `text`, or `input text`)",
    "key": "keyevent: back, home, enter, app_switch; X names Return, KP_Enter, Escape (back), BackSpace (DEL), "
    "Delete, Tab, space, Up, Down, Left, Right; combos refused",
    "hotkey": "one key: as `key`; several: refused (a phone has no key combos)",
    "key_down": "refused",
    "key_up": "refused",
    "mouse_down": "refused (use long_press or swipe)",
    "mouse_up": "refused (use long_press or swipe)",
    "wait": "wait",
    "tap": "tap at (x, y)",
    "long_press": "long_press at (x, y) for `duration_ms` (800)",
    "swipe": "swipe from (x, y) to (to_x, to_y) in `duration_ms` (300)",
    "open_app": "open_app: launch `package` (its `activity` if given)",
}
"""Action type → what it does on android."""

ANDROID_ONLY = ("tap", "long_press", "swipe", "open_app")


@dataclass(frozen=True)
class Op:
    name: str
    args: dict[str, Any] = field(default_factory=dict)


def _point(action: dict[str, Any], last: tuple[int, int] | None) -> tuple[int, int]:
    x, y = action.get("x"), action.get("y")
    if x is None and y is None:
        if last is None:
            raise bad_request(f"a {action.get('type')} on android needs x and y (no earlier point to use)")
        return last
    return _coord(action, "x"), _coord(action, "y")


def _coord(action: dict[str, Any], name: str) -> int:
    value = require(action, name, int)
    if isinstance(value, bool) or not 0 <= cast(int, value) <= 16_384:
        raise bad_request(f"argument {name!r} must be an integer between 0 and 16384, got {value!r}")
    return cast(int, value)


def _duration(action: dict[str, Any], default: int) -> int:
    value = require(action, "duration_ms", int, default)
    if isinstance(value, bool) or not 1 <= cast(int, value) <= MAX_DURATION_MS:
        raise bad_request(f"argument 'duration_ms' must be between 1 and {MAX_DURATION_MS}, got {value!r}")
    return cast(int, value)


def key_op(name: str) -> Op:
    if "+" in name and name != "+":
        raise bad_request(f"key combos ({name!r}) have no meaning on android")
    found = KEYS.get(name) or ANDROID_KEYS.get(name.lower())
    if found is None:
        raise bad_request(f"unknown android key {name!r}; known: {', '.join(KEYS)}")
    return Op("key", {"keycode": found[0], "w3c": found[1]})


def translate(action: dict[str, Any], last: tuple[int, int] | None = None) -> list[Op]:
    """``action`` (a computer or android action, as the wire carries it) as android ops."""
    kind = action.get("type")
    if kind in ("click", "tap"):
        x, y = _point(action, last)
        button = action.get("button", "left")
        if button == "right":
            return [Op("long_press", {"x": x, "y": y, "ms": LONG_PRESS_MS})]
        if button != "left":
            raise bad_request(f"a {button} click has no meaning on android")
        count = require(action, "count", int, 1)
        if not 1 <= cast(int, count) <= 3:
            raise bad_request(f"argument 'count' must be between 1 and 3, got {count}")
        return [Op("tap", {"x": x, "y": y})] * cast(int, count)
    if kind == "double_click":
        x, y = _point(action, last)
        return [Op("tap", {"x": x, "y": y})] * 2
    if kind in ("right_click", "long_press"):
        x, y = _point(action, last)
        return [Op("long_press", {"x": x, "y": y, "ms": _duration(action, LONG_PRESS_MS)})]
    if kind == "move":
        return [Op("point", {"x": _coord(action, "x"), "y": _coord(action, "y")})]
    if kind in ("drag", "swipe"):
        x, y, to_x, to_y = (_coord(action, n) for n in ("x", "y", "to_x", "to_y"))
        ms = _duration(action, SWIPE_MS) if kind == "swipe" else SWIPE_MS
        return [Op("swipe", {"x": x, "y": y, "to_x": to_x, "to_y": to_y, "ms": ms})]
    if kind == "scroll":
        return _scroll(action, last)
    if kind == "type_text":
        return [Op("text", {"text": require(action, "text", str)})]
    if kind == "key":
        return [key_op(cast(str, require(action, "key", str)))]
    if kind == "hotkey":
        keys = require(action, "keys", list)
        if len(cast(list[Any], keys)) != 1:
            raise bad_request(f"hotkey {'+'.join(map(str, cast(list[Any], keys)))} has no meaning on android")
        return [key_op(str(cast(list[Any], keys)[0]))]
    if kind == "open_app":
        package = cast(str, require(action, "package", str))
        activity = require(action, "activity", str, None)
        return [Op("open_app", {"package": package, "activity": activity})]
    if kind == "wait":
        return [Op("wait", {"seconds": require(action, "seconds", (int, float))})]
    if kind in MAPPING:
        raise bad_request(f"{kind} has no meaning on android: {MAPPING[kind]}")
    raise bad_request(f"unknown action type {kind!r}; known on android: {', '.join(sorted(MAPPING))}")


def _scroll(action: dict[str, Any], last: tuple[int, int] | None) -> list[Op]:
    x, y = _point(action, last)
    dx, dy = (cast(int, require(action, n, int, 0)) for n in ("dx", "dy"))
    if not (-100 <= dx <= 100 and -100 <= dy <= 100):
        raise bad_request("arguments 'dx' and 'dy' must be between -100 and 100")
    if not dx and not dy:
        return []
    # Scrolling down (dy > 0) shows what is below: the finger moves up.
    to_x, to_y = max(0, x - dx * SCROLL_STEP_PX), max(0, y - dy * SCROLL_STEP_PX)
    return [Op("swipe", {"x": x, "y": y, "to_x": to_x, "to_y": to_y, "ms": SWIPE_MS})]
