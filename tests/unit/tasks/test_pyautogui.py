"""OSWorld agents' pyautogui strings as platform actions, translated without running any Python."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from sandbox.agent.display import keysyms
from sandbox.errors import InvalidArgument
from sandbox.models import (
    Click,
    DoubleClick,
    Hotkey,
    Key,
    MouseDown,
    MouseUp,
    Move,
    RightClick,
    Scroll,
    TypeText,
    Wait,
)
from sandbox.tasks import expand, load_actions, translate
from sandbox.tasks.keys import KEY_NAMES, x_key
from sandbox.tasks.pyautogui import functions
from sandbox.wire.convert import validate_action

SCREEN = (1280, 800)
TASKS_DIR = Path(__file__).resolve().parents[3] / "tasks"


def t(code: str) -> object:
    return translate(code, screen=SCREEN)


@pytest.mark.parametrize(
    ("code", "actions"),
    [
        ("pyautogui.click(100, 200)", [Click(x=100, y=200)]),
        ("pyautogui.click(x=100, y=200, button='right')", [RightClick(x=100, y=200)]),
        ("pyautogui.click((10, 20), clicks=2)", [DoubleClick(x=10, y=20)]),
        ("pyautogui.click(10.6, 20.2, 3, 0.0, 'middle')", [Click(x=11, y=20, button="middle", count=3)]),
        ("pyautogui.click()", [Click()]),
        ("pyautogui.click(5, 5, clicks=5)", [Click(x=5, y=5, count=3), Click(x=5, y=5, count=2)]),
        ("pyautogui.click(5, 5, clicks=2, interval=0.25)", [Click(x=5, y=5), Wait(seconds=0.25), Click(x=5, y=5)]),
        ("pyautogui.click(9, 9, clicks=0)", [Move(x=9, y=9)]),
        ("pyautogui.click(-50, 9000)", [Click(x=0, y=799)]),  # clamped to the screen, as the X server does
        ("pyautogui.doubleClick(1, 2, button='right')", [Click(x=1, y=2, button="right", count=2)]),
        (
            "pyautogui.dragTo(300, 310, 1.0, button='left')",
            [MouseDown(button="left"), Move(x=300, y=310), MouseUp(button="left")],
        ),
        ("pyautogui.dragTo(7, 8, mouseDownUp=False)", [Move(x=7, y=8)]),
        ("pyautogui.mouseUp(button='secondary')", [MouseUp(button="right")]),
        ("pyautogui.scroll(5)", [Scroll(dy=-5)]),
        ("pyautogui.vscroll(150)", [Scroll(dy=-100), Scroll(dy=-50)]),
        ("pyautogui.hscroll(2)", [Scroll(dx=2)]),
        ("pyautogui.write(message='ab', interval=0.05)", [TypeText(text="ab", interval_ms=50)]),
        ("pyautogui.typewrite(['a', 'enter', 'F5'])", [Key(key="a"), Key(key="Return"), Key(key="F5")]),
        ("pyautogui.press('tab', presses=2)", [Key(key="Tab"), Key(key="Tab")]),
        ("pyautogui.press(['left', 'right'], interval=0.1)", [Key(key="Left"), Wait(seconds=0.1), Key(key="Right")]),
        ("pyautogui.hotkey('ctrl', 'shift', 't')", [Hotkey(keys=["Control_L", "Shift_L", "t"])]),
        ("pyautogui.hotkey(['ctrl', 'c'], interval=0.1)", [Hotkey(keys=["Control_L", "c"])]),
        ("pyautogui.sleep(90)", [Wait(seconds=60), Wait(seconds=30)]),
        ("import pyautogui as pg\nimport time as t\npg.click(1, 1)\nt.sleep(1)", [Click(x=1, y=1), Wait(seconds=1)]),
        ("import pyautogui\npyautogui.FAILSAFE = False\npyautogui.PAUSE = 0.1\npass", []),
        ("", []),
    ],
)
def test_representative_translations(code: str, actions: list[object]) -> None:
    assert t(code) == actions


X, Y = 321, 123
SAMPLE_ARGS = {"x": X, "y": Y, "clicks": 2, "message": "hi", "keys": "enter", "key": "shift", "seconds": 1}
"""An argument for each parameter a supported function may require, by the parameter's name."""


@pytest.mark.parametrize("name", sorted(functions()))
def test_every_supported_function_translates_to_valid_platform_actions(name: str) -> None:
    """Each function, called with what it requires (and a point where it takes one): platform actions that the wire
    accepts as they are, any point among them the one given."""
    signature = functions()[name]
    if signature is None:
        code = f"{name}('ctrl', 'c')"
    else:
        args = {
            p: SAMPLE_ARGS[p]
            for p, param in signature.parameters.items()
            if p in ("x", "y") or param.default is inspect.Parameter.empty
        }
        code = f"{name}({', '.join(f'{p}={value!r}' for p, value in args.items())})"
    actions = t(code)
    assert isinstance(actions, list) and actions, code
    for action in actions:
        assert validate_action(action.model_dump(mode="json", exclude_none=True)) == action, code
        point = (getattr(action, "x", None), getattr(action, "y", None))
        assert point in ((None, None), (X, Y)), (code, action)


@pytest.mark.parametrize("special", ["WAIT", "DONE", "FAIL", "  DONE\n"])
def test_special_actions(special: str) -> None:
    assert t(special) == special.strip()


@pytest.mark.parametrize(
    ("code", "match"),
    [
        ("import os", "import of 'os' is not allowed"),
        ("import pyautogui, subprocess", "import of 'subprocess' is not allowed"),
        ("from pyautogui import click", "from-import is not supported"),
        ("os.system('rm -rf /')", "calls on 'os' are not allowed"),
        (
            "pyautogui.os.system('x')",
            r"only calls of pyautogui.<function> and time.sleep are allowed, not pyautogui.os.system",
        ),
        ("print('hi')", "not print"),
        ("__import__('os').system('x')", "not __import__"),
        ("for i in range(3):\n    pyautogui.click(1, 1)", "line 1: a for loop is not supported"),
        ("while True:\n    pass", "a while loop is not supported"),
        ("x = 10\npyautogui.click(x, 1)", "line 1: an assignment is not supported"),
        ("pyautogui.click(x, 1)", r"line 1: pyautogui.click: argument 1 is not a literal: x"),
        ("pyautogui.click(1, y=len('ab'))", r"argument 'y' is not a literal"),
        ("pyautogui.click(*[1, 2])", r"\*args is not supported"),
        ("pyautogui.click(**{'x': 1})", r"\*\*kwargs is not supported"),
        ("pyautogui.FAILSAFE", "attribute access is not supported"),
        ("pyautogui.moveRel(10, 0)", "pyautogui.moveRel is not supported"),
        ("pyautogui.locateOnScreen('button.png')", "pyautogui.locateOnScreen is not supported"),
        ("pyautogui.moveTo()", "needs x and y: the pointer's current position is not known"),
        ("pyautogui.click(x=10)", "give both x and y"),
        ("pyautogui.click('button.png')", r"locating an image \('button.png'\) on the screen is not supported"),
        ("pyautogui.click([1], 'b')", "x and y must be numbers"),
        ("pyautogui.click(1, 2, button='fourth')", "unknown button 'fourth'"),
        ("pyautogui.click(1, 2, nonsense=1)", "unexpected keyword argument 'nonsense'"),
        ("pyautogui.press('hyperdrive')", "unknown key 'hyperdrive'"),
        ("pyautogui.hotkey()", "needs at least one key"),
        ("pyautogui.typewrite('bell\\x07')", r"the control character '\\x07' cannot be typed"),
        ("time.sleep(-1)", "seconds must be a non-negative number"),
        ("pyautogui.click(1, 2", "does not parse"),
        (
            "pyautogui.click(1, 1)\npyautogui.click(x=1, y=1, clicks=-1)",
            "line 2: pyautogui.click: clicks must be a count",
        ),
    ],
)
def test_rejected_constructs_are_named(code: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        t(code)


def test_every_translated_key_is_a_key_the_agent_knows() -> None:
    for name in sorted(KEY_NAMES):
        keysyms.keysym(x_key(name))  # raises for a name the agent's keyboard cannot type


def test_every_reference_solution_parses_and_expands() -> None:
    files = sorted(TASKS_DIR.glob("*.solution.jsonl"))
    assert len(files) >= 16
    for path in files:
        actions = load_actions(path)
        assert actions, path.name
        expanded = [expand(a, screen=SCREEN) for a in actions]
        assert expanded[-1] in ("DONE", "FAIL"), f"{path.name} should end the episode with DONE or FAIL"


def test_load_actions_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"type": "click", "x": 1, "y": 2}\n\n{"type": "teleport"}\n')
    with pytest.raises(InvalidArgument, match=r"a\.jsonl:3: not an action"):
        load_actions(path)
