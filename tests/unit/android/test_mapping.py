"""The computer actions as android ones: the table in docs/android.md is the code's, and the code does it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import TypeAdapter, ValidationError

from sandbox import models
from sandbox.agent.android.mapping import ANDROID_KEYS, ANDROID_ONLY, MAPPING, Op, translate
from sandbox.agent.errors import AgentError
from sandbox.models import android as models_android

DOC = Path(__file__).resolve().parents[3] / "docs" / "android.md"


def doc_table() -> dict[str, str]:
    text = DOC.read_text()
    block = text[text.index("<!-- mapping:begin -->") : text.index("<!-- mapping:end -->")]
    rows = re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", block, re.M)
    return {name: desc for name, desc in rows}


def test_the_doc_table_is_the_code() -> None:
    assert doc_table() == {k: v.replace("|", "/") for k, v in MAPPING.items()}


def test_every_computer_and_android_action_is_in_the_table() -> None:
    computer = {cls.model_fields["type"].default for cls in models.COMPUTER_ACTIONS}
    android = {cls.model_fields["type"].default for cls in models_android.ANDROID_ACTIONS}
    assert computer | android == set(MAPPING)
    assert set(ANDROID_ONLY) == android
    assert set(models_android.ANDROID_KEYS) == set(ANDROID_KEYS)


def ops(action: dict[str, Any], last: tuple[int, int] | None = None) -> list[tuple[str, dict[str, Any]]]:
    return [(op.name, op.args) for op in translate(action, last)]


def test_mapping() -> None:
    tap = ("tap", {"x": 1, "y": 2})
    assert ops({"type": "click", "x": 1, "y": 2}) == [tap]
    assert ops({"type": "click", "x": 1, "y": 2, "count": 3}) == [tap] * 3
    assert ops({"type": "tap", "x": 1, "y": 2}) == [tap]
    assert ops({"type": "double_click", "x": 1, "y": 2}) == [tap, tap]
    assert ops({"type": "click"}, last=(1, 2)) == [tap]
    assert ops({"type": "right_click", "x": 1, "y": 2}) == [("long_press", {"x": 1, "y": 2, "ms": 800})]
    assert ops({"type": "click", "x": 1, "y": 2, "button": "right"}) == [("long_press", {"x": 1, "y": 2, "ms": 800})]
    assert ops({"type": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4}) == [
        ("swipe", {"x": 1, "y": 2, "to_x": 3, "to_y": 4, "ms": 300})
    ]
    assert ops({"type": "scroll", "x": 500, "y": 1000, "dy": 3}) == [
        ("swipe", {"x": 500, "y": 1000, "to_x": 500, "to_y": 640, "ms": 300})
    ]
    assert ops({"type": "scroll", "x": 5, "y": 5, "dy": -1})[0][1]["to_y"] == 125
    assert ops({"type": "scroll", "x": 5, "y": 5}) == []
    assert ops({"type": "type_text", "text": "héllo"}) == [("text", {"text": "héllo"})]
    assert ops({"type": "wait", "seconds": 0.5}) == [("wait", {"seconds": 0.5})]
    assert ops({"type": "move", "x": 3, "y": 4}) == [("point", {"x": 3, "y": 4})]
    assert translate({"type": "open_app", "package": "com.android.settings"}) == [
        Op("open_app", {"package": "com.android.settings", "activity": None})
    ]


@pytest.mark.parametrize(
    ("key", "keycode", "w3c"),
    [
        ("Return", "KEYCODE_ENTER", "Enter"),
        ("enter", "KEYCODE_ENTER", "Enter"),
        ("BackSpace", "KEYCODE_DEL", "Backspace"),
        ("Escape", "KEYCODE_BACK", "GoBack"),
        ("back", "KEYCODE_BACK", "GoBack"),
        ("home", "KEYCODE_HOME", "GoHome"),
        ("app_switch", "KEYCODE_APP_SWITCH", "AppSwitch"),
    ],
)
def test_keys(key: str, keycode: str, w3c: str) -> None:
    assert ops({"type": "key", "key": key}) == [("key", {"keycode": keycode, "w3c": w3c})]
    assert ops({"type": "hotkey", "keys": [key]}) == [("key", {"keycode": keycode, "w3c": w3c})]


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ({"type": "hotkey", "keys": ["ctrl", "c"]}, "hotkey ctrl\\+c has no meaning on android"),
        ({"type": "key", "key": "ctrl+c"}, "key combos"),
        ({"type": "key", "key": "F13"}, "unknown android key 'F13'"),
        ({"type": "key_down", "key": "a"}, "key_down has no meaning on android"),
        ({"type": "mouse_down"}, "mouse_down has no meaning on android"),
        ({"type": "click", "x": 1, "y": 2, "button": "middle"}, "middle click"),
        ({"type": "click"}, "needs x and y"),
        ({"type": "long_press", "x": 1, "y": 2, "duration_ms": 0}, "duration_ms"),
        ({"type": "navigate", "url": "x"}, "unknown action type 'navigate'"),
    ],
)
def test_refused(action: dict[str, Any], message: str) -> None:
    with pytest.raises(AgentError, match=message) as e:
        translate(action)
    assert e.value.code == "bad_request"


def test_android_action_models() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(models_android.AndroidAction)
    swipe = adapter.validate_python({"type": "swipe", "x": 1, "y": 2, "to_x": 3, "to_y": 4})
    assert swipe == models_android.Swipe(x=1, y=2, to_x=3, to_y=4, duration_ms=300)
    assert ops(swipe.model_dump()) == [("swipe", {"x": 1, "y": 2, "to_x": 3, "to_y": 4, "ms": 300})]
    press = models_android.LongPress(x=1, y=2)
    assert ops(press.model_dump())[0][1]["ms"] == 800
    with pytest.raises(ValidationError):
        adapter.validate_python({"type": "open_app", "package": "not a package"})
    assert len(get_args(get_args(models_android.AndroidAction)[0])) == len(models_android.ANDROID_ACTIONS)
