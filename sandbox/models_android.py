"""The android sandbox's own actions (docs/android.md), next to ``models``' computer actions, which an android
sandbox also takes (mapped as the table in docs/android.md says).

Not yet members of ``models.Action``: joining it needs their messages in proto/sandbox/v1/sandbox.proto and a route
in ``service.acting`` to the agent's ``action`` op (the computer actions' path, which the android driver already
serves for these types too).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sandbox.models import Coord, _Action


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
