"""The android sandbox's own actions (docs/android.md), members of ``models.Action`` next to the computer actions,
which an android sandbox also takes (mapped as the table in docs/android.md says). A step of these goes to the
agent's ``action`` op, as the computer actions do (``service.acting``); another kind of sandbox refuses them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sandbox.models.base import Coord, _Action


class Tap(_Action):
    """Android: a tap at ``x, y`` (screen pixels)."""

    type: Literal["tap"] = "tap"
    x: Coord
    y: Coord


class LongPress(_Action):
    """Android: touch ``x, y`` for ``duration_ms`` (a context menu, a drag handle)."""

    type: Literal["long_press"] = "long_press"
    x: Coord
    y: Coord
    duration_ms: int = Field(800, ge=1, le=10_000)


class Swipe(_Action):
    """Android: a finger from ``x, y`` to ``to_x, to_y`` in ``duration_ms``."""

    type: Literal["swipe"] = "swipe"
    x: Coord
    y: Coord
    to_x: Coord
    to_y: Coord
    duration_ms: int = Field(300, ge=1, le=10_000)


class OpenApp(_Action):
    """Android: launch an app by package (its launcher activity, or ``activity``)."""

    type: Literal["open_app"] = "open_app"
    package: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+$")
    activity: str | None = Field(None, min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.$]+$")


ANDROID_ACTIONS = (Tap, LongPress, Swipe, OpenApp)
"""The android-only actions; the agent's android driver does them (``sandbox/agent/android/mapping.py``)."""

AndroidAction = Annotated[Tap | LongPress | Swipe | OpenApp, Field(discriminator="type")]

ANDROID_KEYS = ("back", "home", "enter", "app_switch")
"""The ``key`` action's android keys (besides the X names that mean something on a phone, docs/android.md)."""

ANDROID_REFUSED: dict[str, str] = {
    "key_down": "a phone has no held keys",
    "key_up": "a phone has no held keys",
    "mouse_down": "a touch screen has no held button: use long_press or swipe",
    "mouse_up": "a touch screen has no held button: use long_press or swipe",
}
"""Computer actions an android sandbox cannot do, and why (docs/android.md's table); a step of one is refused."""
