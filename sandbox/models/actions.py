"""What a step takes: the computer actions (pointer, keys, waits), ``exec``, the browser's navigate/evaluate and its
pages and clocks, OSWorld's action space (``pyautogui`` code, ``DONE``, ``FAIL``, ``WAIT``), and, joined from
:mod:`sandbox.models.android`, the android sandbox's own; ``Action`` is their union, told apart by ``type``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictBool, model_validator

from sandbox.models.android import LongPress, OpenApp, Swipe, Tap
from sandbox.models.base import Button, Coord, _Action
from sandbox.models.rules import COMMAND, EnvName, EnvValue, keys_must_match


class Move(_Action):
    type: Literal["move"] = "move"
    x: Coord
    y: Coord


class Click(_Action):
    type: Literal["click"] = "click"
    x: Coord | None = None
    y: Coord | None = None
    button: Button = "left"
    count: int = Field(1, ge=1, le=3)


class DoubleClick(_Action):
    type: Literal["double_click"] = "double_click"
    x: Coord | None = None
    y: Coord | None = None


class RightClick(_Action):
    type: Literal["right_click"] = "right_click"
    x: Coord | None = None
    y: Coord | None = None


class Drag(_Action):
    type: Literal["drag"] = "drag"
    x: Coord
    y: Coord
    to_x: Coord
    to_y: Coord
    button: Button = "left"


class Scroll(_Action):
    type: Literal["scroll"] = "scroll"
    x: Coord | None = None
    y: Coord | None = None
    dx: int = Field(0, ge=-100, le=100)
    dy: int = Field(0, ge=-100, le=100)


class TypeText(_Action):
    type: Literal["type_text"] = "type_text"
    text: str = Field(max_length=100_000)
    interval_ms: int = Field(0, ge=0, le=1000)


class Key(_Action):
    type: Literal["key"] = "key"
    key: str = Field(min_length=1, max_length=64, description='A key or combo: "Return", "ctrl+c".')


class Hotkey(_Action):
    type: Literal["hotkey"] = "hotkey"
    keys: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(min_length=1, max_length=8)


class KeyDown(_Action):
    type: Literal["key_down"] = "key_down"
    key: str = Field(min_length=1, max_length=64)


class KeyUp(_Action):
    type: Literal["key_up"] = "key_up"
    key: str = Field(min_length=1, max_length=64)


class MouseDown(_Action):
    type: Literal["mouse_down"] = "mouse_down"
    button: Button = "left"
    x: Coord | None = None
    y: Coord | None = None


class MouseUp(_Action):
    type: Literal["mouse_up"] = "mouse_up"
    button: Button = "left"
    x: Coord | None = None
    y: Coord | None = None


class Wait(_Action):
    type: Literal["wait"] = "wait"
    seconds: float = Field(ge=0, le=60)


class Exec(_Action):
    type: Literal["exec"] = "exec"
    cmd: str | list[str] = Field(description="A shell command line, or an argv list.", json_schema_extra=COMMAND)
    timeout: float = Field(60.0, gt=0, le=3600)
    cwd: str | None = None
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, json_schema_extra=keys_must_match)
    session: str | None = Field(None, description="Run in this persistent shell session (created on first use).")
    keep_background: StrictBool = Field(
        False, description="Let processes the command started in the background outlive it (one-shot exec only)."
    )


PageId = Annotated[str, Field(min_length=1, max_length=64)]
"""A browser page's id (``page_open`` gives it); an action's ``page`` left None acts in the active page."""


class Navigate(_Action):
    type: Literal["navigate"] = "navigate"
    url: str = Field(min_length=1, max_length=8192)
    timeout: float = Field(30.0, gt=0, le=300)
    page: PageId | None = None


class Evaluate(_Action):
    type: Literal["evaluate"] = "evaluate"
    expression: str = Field(min_length=1, max_length=1_000_000)
    page: PageId | None = None


class PageOpen(_Action):
    """Browser: open ``url`` in a window of its own, one game session per page, with its own clock (``paused``: it
    moves only by ``clock`` steps; ``running`` at ``factor`` times real time; ``none``: real time, no control), input
    and screenshot. ``value``: ``{"page": id, "clock": state, ...}``."""

    type: Literal["page_open"] = "page_open"
    url: str = Field(min_length=1, max_length=8192)
    timeout: float = Field(30.0, gt=0, le=300)
    clock: Literal["running", "paused", "none"] = "running"
    factor: float = Field(1.0, gt=0, le=1000)


class PageClose(_Action):
    """Browser: close a page; ``value``: the pages left."""

    type: Literal["page_close"] = "page_close"
    page: PageId


class Clock(_Action):
    """Browser: a page's clock. ``pause``; ``resume``; ``speed`` (``factor`` times real time); ``step`` by ``ms``
    of page time, running every timer and animation frame due, in order, before it returns (deterministic); ``state``.
    ``value``: ``{"clock": {mode, factor, now_ms, ...}}``."""

    type: Literal["clock"] = "clock"
    op: Literal["pause", "resume", "step", "speed", "state"]
    ms: float | None = Field(None, ge=0, le=86_400_000)
    factor: float | None = Field(None, gt=0, le=1000)
    page: PageId | None = None

    @model_validator(mode="after")
    def _arguments(self) -> Clock:
        missing = {"step": "ms", "speed": "factor"}.get(self.op)
        if missing and getattr(self, missing) is None:
            raise ValueError(f"a clock {self.op} needs {missing}")
        return self


class PageKey(_Action):
    """Browser: press a key (``ArrowUp``, ``Enter``, ``a``, ``ctrl+a``) in a page through CDP, without the X focus."""

    type: Literal["page_key"] = "page_key"
    key: str = Field(min_length=1, max_length=64)
    page: PageId | None = None


class PageClick(_Action):
    """Browser: click at ``x, y`` of a page's viewport (CSS pixels) through CDP."""

    type: Literal["page_click"] = "page_click"
    x: Coord
    y: Coord
    button: Button = "left"
    count: int = Field(1, ge=1, le=3)
    page: PageId | None = None


class Pyautogui(_Action):
    """OSWorld's action space: Python code of ``pyautogui`` calls, translated into computer actions done in order."""

    type: Literal["pyautogui"] = "pyautogui"
    code: str = Field(min_length=1, max_length=100_000)


class Done(_Action):
    """OSWorld's ``DONE``: the agent says the task is done; ends the episode."""

    type: Literal["done"] = "done"


class Fail(_Action):
    """OSWorld's ``FAIL``: the agent says the task cannot be done (an infeasible task scores 1 only on it); ends the
    episode."""

    type: Literal["fail"] = "fail"


OSWORLD_WAIT_S = 1.0
"""OSWorld's ``WAIT``: a pause of this many seconds."""


def _osworld_spelling(value: Any) -> Any:
    """OSWorld agents' outputs as they are: ``"DONE"``, ``"FAIL"``, ``"WAIT"`` (or ``{"type": "DONE"}``), and any
    other string as ``pyautogui`` code."""
    if isinstance(value, str):
        value = {"type": value} if value.strip() in ("DONE", "FAIL", "WAIT") else {"type": "pyautogui", "code": value}
    if isinstance(value, dict) and value.get("type") in ("DONE", "FAIL", "WAIT"):
        value = {**value, "type": str(value["type"]).lower()}
        if value["type"] == "wait":
            value.setdefault("seconds", OSWORLD_WAIT_S)
    return value


PAGE_ACTIONS = (PageOpen, PageClose, Clock, PageKey, PageClick)
"""Pages and clocks; a step of these (or of navigate/evaluate with ``page``) screenshots the page, not the screen."""

COMPUTER_ACTIONS = (
    Move, Click, DoubleClick, RightClick, Drag, Scroll, TypeText, Key, Hotkey, KeyDown, KeyUp, MouseDown, MouseUp, Wait,
)  # fmt: skip

Action = Annotated[
    Move | Click | DoubleClick | RightClick | Drag | Scroll | TypeText | Key | Hotkey | KeyDown | KeyUp | MouseDown
    | MouseUp | Wait | Exec | Navigate | Evaluate | PageOpen | PageClose | Clock | PageKey | PageClick | Pyautogui
    | Done | Fail | Tap | LongPress | Swipe | OpenApp,
    Field(discriminator="type"),
    BeforeValidator(_osworld_spelling),
]  # fmt: skip
"""Every action a step takes. ``ANDROID_ACTIONS`` (tap, long_press, swipe, open_app) are android sandboxes' own."""
