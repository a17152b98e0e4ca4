"""The computer actions (move, click, drag, scroll, type_text, key, hotkey, ...), by type.

Each runs on the X thread; ``Display.act`` syncs and reads the cursor afterwards. ``wait`` needs no X connection:
``Display.act`` handles it.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from sandbox.agent.display.arguments import int_arg
from sandbox.agent.display.keysyms import combo, keysym, text_keysyms
from sandbox.agent.display.session import Action, XSession
from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.protocol import ErrorCode

DRAG_STEPS = 10
DRAG_STEP_SECONDS = 0.015
MAX_SCROLL_CLICKS = 200
MAX_WAIT_SECONDS = 60.0

BUTTONS = {"left": 1, "middle": 2, "right": 3}
SCROLL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}


def _move(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.move(*s.point(args))


def _click(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.click(_button_arg(args), int_arg(args, "count", 1, 3, 1))


def _double_click(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.click(BUTTONS["left"], 2)


def _right_click(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.click(BUTTONS["right"])


def _drag(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    x0, y0 = s.point(args)
    x1, y1 = s.point(args, "to_x", "to_y")
    button = _button_arg(args)
    s.move(x0, y0)
    s.button(button, True)
    try:
        for step in range(1, DRAG_STEPS + 1):
            s.pause(stop, DRAG_STEP_SECONDS)
            s.move(x0 + (x1 - x0) * step // DRAG_STEPS, y0 + (y1 - y0) * step // DRAG_STEPS)
        s.pause(stop, DRAG_STEP_SECONDS)
    finally:
        s.button(button, False)


def _scroll(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    dx = int_arg(args, "dx", -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0)
    dy = int_arg(args, "dy", -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0)
    s.move_if_given(args)
    s.click(SCROLL_BUTTONS["down" if dy > 0 else "up"], abs(dy), gap=0)
    s.click(SCROLL_BUTTONS["right" if dx > 0 else "left"], abs(dx), gap=0)


def _type_text(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    text = cast(str, require(args, "text", str))
    interval = int_arg(args, "interval_ms", 0, 5000, 0) / 1000
    for batch in s.keymap.batches(text_keysyms(text)):
        s.keymap.borrow(batch, s.d, s.barrier)
        for sym in batch:
            s.chord([sym])
            if interval:
                s.pause(stop, interval)
            elif stop.is_set():
                raise AgentError(ErrorCode.TIMEOUT, "action cancelled")


def _key(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.chord(combo(cast(str, require(args, "key", str))))


def _hotkey(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    keys = cast(list, require(args, "keys", list))
    if not keys or not all(isinstance(k, str) for k in keys):
        raise bad_request("argument 'keys' must be a non-empty list of key names")
    s.chord([keysym(k) for k in keys])


def _key_down(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.chord(combo(cast(str, require(args, "key", str))), release=False)


def _key_up(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.chord(combo(cast(str, require(args, "key", str))), press=False)


def _mouse_down(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.button(_button_arg(args), True)


def _mouse_up(s: XSession, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.button(_button_arg(args), False)


ACTIONS: dict[str, Action] = {
    "move": _move,
    "click": _click,
    "double_click": _double_click,
    "right_click": _right_click,
    "drag": _drag,
    "scroll": _scroll,
    "type_text": _type_text,
    "key": _key,
    "hotkey": _hotkey,
    "key_down": _key_down,
    "key_up": _key_up,
    "mouse_down": _mouse_down,
    "mouse_up": _mouse_up,
}


def _button_arg(args: dict[str, Any]) -> int:
    name = cast(str, require(args, "button", str, "left"))
    if name not in BUTTONS:
        raise bad_request(f"argument 'button' must be one of {', '.join(BUTTONS)}, got {name!r}")
    return BUTTONS[name]
