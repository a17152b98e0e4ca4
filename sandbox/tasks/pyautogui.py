"""OSWorld agents' actions, pyautogui code strings, as the platform's actions, without running any Python.

The code is parsed with :mod:`ast`; it may hold only ``import pyautogui``/``import time`` (``as`` aliases allowed),
``pyautogui.FAILSAFE``/``pyautogui.PAUSE`` assignments (ignored), and calls of ``pyautogui.<function>`` and
``time.sleep`` with literal arguments, positional or keyword as pyautogui defines them (:func:`functions` lists
them with their parameters):

=====================================  ==================================================================
pyautogui                              actions
=====================================  ==================================================================
click(x, y, clicks, interval, button)  click (count 1-3; more clicks repeat, ``interval`` apart)
doubleClick / tripleClick              double_click (left) or click with count 2 / 3
rightClick / middleClick               right_click / click with the middle button
moveTo(x, y)                           move
dragTo(x, y, button, mouseDownUp)      mouse_down (where the pointer is), move, mouse_up
mouseDown / mouseUp(x, y, button)      mouse_down / mouse_up
scroll / vscroll / hscroll(clicks)     scroll (positive ``clicks``: up, or right for hscroll)
typewrite / write(message, interval)   type_text; a list message presses each key
press(keys, presses, interval)         key, per key and press
hotkey(*keys)                          hotkey
keyDown / keyUp(key)                   key_down / key_up
time.sleep / pyautogui.sleep(s)        wait
=====================================  ==================================================================

``x``/``y`` may be omitted only where the action has a no-coordinate form (the pointer's current position is not
known here); coordinates are rounded and clamped to the screen, as the X server clamps them. ``duration`` and
``tween`` are accepted and ignored. OSWorld's special actions ``WAIT``, ``DONE`` and ``FAIL`` come back as that
string. Anything else raises :class:`~sandbox.errors.InvalidArgument` naming the construct.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any, Literal

from pydantic import ValidationError

from sandbox.errors import InvalidArgument
from sandbox.models import (
    Action,
    Click,
    DoubleClick,
    Hotkey,
    Key,
    KeyDown,
    KeyUp,
    MouseDown,
    MouseUp,
    Move,
    RightClick,
    Scroll,
    TypeText,
    Wait,
)
from sandbox.tasks.keys import x_key

Special = Literal["WAIT", "DONE", "FAIL"]
SPECIALS: tuple[Special, ...] = ("WAIT", "DONE", "FAIL")
MAX_CODE_CHARS = 100_000
MAX_ACTIONS = 1000
_MAX_WAIT = 60.0
_MAX_SCROLL = 100
_BUTTONS = {"left": "left", "primary": "left", "middle": "middle", "right": "right", "secondary": "right"}
_BUTTONS_BY_NUMBER = {1: "left", 2: "middle", 3: "right"}
_SETTINGS = ("FAILSAFE", "PAUSE", "MINIMUM_DURATION", "MINIMUM_SLEEP", "DARWIN_CATCH_UP_TIME")


def translate(code: str, *, screen: tuple[int, int]) -> list[Action] | Special:
    """The actions ``code`` performs on a ``screen`` (width, height), or OSWorld's special action it names."""
    if not isinstance(code, str):
        raise InvalidArgument(f"pyautogui code must be a string, not {type(code).__name__}")
    stripped = code.strip()
    if stripped in SPECIALS:
        return stripped
    if len(code) > MAX_CODE_CHARS:
        raise InvalidArgument(f"pyautogui code is {len(code)} characters; at most {MAX_CODE_CHARS}")
    try:
        tree = ast.parse(stripped, mode="exec")
    except SyntaxError as e:
        raise InvalidArgument(f"pyautogui code does not parse: {e.msg} (line {e.lineno})") from None
    return _Translator(screen).run(tree)


def functions() -> dict[str, inspect.Signature | None]:
    """The calls :func:`translate` takes, by name (``"pyautogui.click"``, ``"time.sleep"``, ...), each with the
    parameters it accepts (None: any number of positional keys, as ``pyautogui.hotkey``)."""
    return {name: signature for name, (signature, _) in _Translator((1, 1)).calls.items()}


def _sig(*params: str, **defaults: Any) -> inspect.Signature:
    """A signature: positional-or-keyword ``params`` (those in ``defaults`` optional), in order."""
    return inspect.Signature(
        [
            inspect.Parameter(
                name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults.get(name, inspect.Parameter.empty)
            )
            for name in params
        ]
    )


_COMMON = {"tween": None, "logScreenshot": None, "_pause": True}
_CLICK = _sig(
    "x", "y", "clicks", "interval", "button", "duration", "tween", "logScreenshot", "_pause",
    x=None, y=None, clicks=1, interval=0.0, button="left", duration=0.0, **_COMMON,
)  # fmt: skip
_MULTI_CLICK = _sig(
    "x", "y", "interval", "button", "duration", "tween", "logScreenshot", "_pause",
    x=None, y=None, interval=0.0, button="left", duration=0.0, **_COMMON,
)  # fmt: skip
_SIDE_CLICK = _sig("x", "y", "duration", "tween", "logScreenshot", "_pause", x=None, y=None, duration=0.0, **_COMMON)
_MOVE = _sig("x", "y", "duration", "tween", "logScreenshot", "_pause", x=None, y=None, duration=0.0, **_COMMON)
_DRAG = _sig(
    "x", "y", "duration", "tween", "button", "logScreenshot", "_pause", "mouseDownUp",
    x=None, y=None, duration=0.0, button="left", mouseDownUp=True, **_COMMON,
)  # fmt: skip
_BUTTON = _sig(
    "x", "y", "button", "duration", "tween", "logScreenshot", "_pause",
    x=None, y=None, button="left", duration=0.0, **_COMMON,
)  # fmt: skip
_SCROLL = _sig("clicks", "x", "y", "logScreenshot", "_pause", x=None, y=None, logScreenshot=None, _pause=True)
_WRITE = _sig("message", "interval", "logScreenshot", "_pause", interval=0.0, logScreenshot=None, _pause=True)
_PRESS = _sig(
    "keys", "presses", "interval", "logScreenshot", "_pause", presses=1, interval=0.0, logScreenshot=None, _pause=True
)
_KEY = _sig("key", "logScreenshot", "_pause", logScreenshot=None, _pause=True)
_SLEEP = _sig("seconds")


class _Translator:
    def __init__(self, screen: tuple[int, int]) -> None:
        self.width, self.height = screen
        self.modules: dict[str, str] = {"pyautogui": "pyautogui", "time": "time"}
        self.actions: list[Action] = []
        self.calls: dict[str, tuple[inspect.Signature | None, Callable[..., None]]] = {
            "pyautogui.click": (_CLICK, self.click),
            "pyautogui.doubleClick": (_MULTI_CLICK, lambda **a: self.click(clicks=2, **a)),
            "pyautogui.tripleClick": (_MULTI_CLICK, lambda **a: self.click(clicks=3, **a)),
            "pyautogui.rightClick": (_SIDE_CLICK, lambda **a: self.click(button="right", **a)),
            "pyautogui.middleClick": (_SIDE_CLICK, lambda **a: self.click(button="middle", **a)),
            "pyautogui.moveTo": (_MOVE, self.move_to),
            "pyautogui.dragTo": (_DRAG, self.drag_to),
            "pyautogui.mouseDown": (_BUTTON, lambda **a: self.button(MouseDown, **a)),
            "pyautogui.mouseUp": (_BUTTON, lambda **a: self.button(MouseUp, **a)),
            "pyautogui.scroll": (_SCROLL, lambda **a: self.scroll(vertical=True, **a)),
            "pyautogui.vscroll": (_SCROLL, lambda **a: self.scroll(vertical=True, **a)),
            "pyautogui.hscroll": (_SCROLL, lambda **a: self.scroll(vertical=False, **a)),
            "pyautogui.typewrite": (_WRITE, self.write),
            "pyautogui.write": (_WRITE, self.write),
            "pyautogui.press": (_PRESS, self.press),
            "pyautogui.hotkey": (None, self.hotkey),
            "pyautogui.keyDown": (_KEY, lambda key, **_: self.add(KeyDown(key=x_key(key, where=self.where)))),
            "pyautogui.keyUp": (_KEY, lambda key, **_: self.add(KeyUp(key=x_key(key, where=self.where)))),
            "pyautogui.sleep": (_SLEEP, lambda seconds: self.sleep(seconds)),
            "time.sleep": (_SLEEP, lambda seconds: self.sleep(seconds)),
        }
        self.where = ""

    def run(self, tree: ast.Module) -> list[Action]:
        for node in tree.body:
            self.where = f"line {node.lineno}: "
            if isinstance(node, ast.Import):
                self.imports(node)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                self.call(node.value, node.lineno)
            elif (isinstance(node, ast.Assign) and self.is_setting(node)) or isinstance(node, ast.Pass):
                continue
            else:
                what = type(node.value).__name__ if isinstance(node, ast.Expr) else type(node).__name__
                raise InvalidArgument(
                    f"{self.where}{_describe(what)} is not supported: only calls of pyautogui functions and "
                    "time.sleep with literal arguments"
                )
        return self.actions

    def imports(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in ("pyautogui", "time"):
                raise InvalidArgument(f"{self.where}import of {alias.name!r} is not allowed (only pyautogui and time)")
            self.modules[alias.asname or alias.name] = alias.name

    def is_setting(self, node: ast.Assign) -> bool:
        target = node.targets[0] if len(node.targets) == 1 else None
        return (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and self.modules.get(target.value.id) == "pyautogui"
            and target.attr in _SETTINGS
            and isinstance(node.value, ast.Constant)
        )

    def call(self, node: ast.Call, line: int) -> None:
        func = node.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            raise InvalidArgument(
                f"{self.where}only calls of pyautogui.<function> and time.sleep are allowed, not {ast.unparse(func)}"
            )
        module = self.modules.get(func.value.id)
        name = f"{module}.{func.attr}"
        if module is None:
            raise InvalidArgument(f"{self.where}calls on {func.value.id!r} are not allowed (only pyautogui and time)")
        if name not in self.calls:
            raise InvalidArgument(f"{self.where}{name} is not supported")
        self.where = f"line {line}: {name}: "
        args = [self.literal(a, i) for i, a in enumerate(node.args)]
        kwargs = {k.arg: self.literal(k.value, k.arg) for k in node.keywords if k.arg is not None}
        if any(k.arg is None for k in node.keywords):
            raise InvalidArgument(f"{self.where}**kwargs is not supported")
        signature, handler = self.calls[name]
        if signature is None:
            handler(*args, **kwargs)
            return
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise InvalidArgument(f"{self.where}{e}") from None
        bound.apply_defaults()
        try:
            handler(**bound.arguments)
        except ValidationError as e:
            raise InvalidArgument(f"{self.where}{e.errors()[0]['msg']}") from None
        if len(self.actions) > MAX_ACTIONS:
            raise InvalidArgument(f"the code makes more than {MAX_ACTIONS} actions")

    def literal(self, node: ast.expr, which: int | str | None) -> Any:
        if isinstance(node, ast.Starred):
            raise InvalidArgument(f"{self.where}*args is not supported")
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            label = f"argument {which + 1}" if isinstance(which, int) else f"argument {which!r}"
            raise InvalidArgument(f"{self.where}{label} is not a literal: {ast.unparse(node)}") from None

    # ------------------------------------------------------------------ the calls

    def add(self, action: Action) -> None:
        self.actions.append(action)

    def point(self, x: Any, y: Any, *, required: bool) -> tuple[int, int] | tuple[None, None]:
        if isinstance(x, list | tuple) and y is None and len(x) == 2:
            x, y = x
        if isinstance(x, str):
            raise InvalidArgument(f"{self.where}locating an image ({x!r}) on the screen is not supported")
        if x is None and y is None:
            if required:
                raise InvalidArgument(f"{self.where}needs x and y: the pointer's current position is not known here")
            return None, None
        if x is None or y is None:
            raise InvalidArgument(f"{self.where}give both x and y: the pointer's current position is not known here")
        if (
            isinstance(x, bool)
            or isinstance(y, bool)
            or not isinstance(x, int | float)
            or not isinstance(y, int | float)
        ):
            raise InvalidArgument(f"{self.where}x and y must be numbers, not {x!r}, {y!r}")
        return min(max(round(x), 0), self.width - 1), min(max(round(y), 0), self.height - 1)

    def button_name(self, button: Any) -> Literal["left", "middle", "right"]:
        name = _BUTTONS_BY_NUMBER.get(button) if isinstance(button, int) else _BUTTONS.get(str(button).lower())
        if name is None:
            raise InvalidArgument(f"{self.where}unknown button {button!r} (left, middle, right)")
        return name  # type: ignore[return-value]

    def click(
        self, x: Any = None, y: Any = None, clicks: Any = 1, interval: Any = 0.0, button: Any = "left", **_: Any
    ) -> None:
        px, py = self.point(x, y, required=False)
        name = self.button_name(button)
        if not isinstance(clicks, int) or isinstance(clicks, bool) or clicks < 0:
            raise InvalidArgument(f"{self.where}clicks must be a count, not {clicks!r}")
        if clicks == 0:
            if px is not None and py is not None:
                self.add(Move(x=px, y=py))
            return
        if clicks == 2 and name == "left" and not interval:
            self.add(DoubleClick(x=px, y=py))
            return
        if name == "right" and clicks == 1:
            self.add(RightClick(x=px, y=py))
            return
        batch = 1 if interval else 3
        left = clicks
        while left > 0:
            count = min(batch, left)
            self.add(Click(x=px, y=py, button=name, count=count))
            left -= count
            if left and interval:
                self.sleep(interval)

    def move_to(self, x: Any, y: Any, **_: Any) -> None:
        px, py = self.point(x, y, required=True)
        assert px is not None and py is not None
        self.add(Move(x=px, y=py))

    def drag_to(self, x: Any, y: Any, button: Any = "left", mouseDownUp: Any = True, **_: Any) -> None:
        px, py = self.point(x, y, required=True)
        assert px is not None and py is not None
        name = self.button_name(button)
        if mouseDownUp:
            self.add(MouseDown(button=name))
        self.add(Move(x=px, y=py))
        if mouseDownUp:
            self.add(MouseUp(button=name))

    def button(self, kind: type[MouseDown] | type[MouseUp], x: Any, y: Any, button: Any = "left", **_: Any) -> None:
        px, py = self.point(x, y, required=False)
        self.add(kind(button=self.button_name(button), x=px, y=py))

    def scroll(self, clicks: Any, x: Any, y: Any, *, vertical: bool, **_: Any) -> None:
        if isinstance(clicks, bool) or not isinstance(clicks, int | float):
            raise InvalidArgument(f"{self.where}clicks must be a number, not {clicks!r}")
        px, py = self.point(x, y, required=False)
        amount = int(clicks)
        step = -amount if vertical else amount  # pyautogui: positive scrolls up (vertical) or right
        while step:
            part = max(-_MAX_SCROLL, min(_MAX_SCROLL, step))
            self.add(Scroll(x=px, y=py, dy=part) if vertical else Scroll(x=px, y=py, dx=part))
            step -= part

    def write(self, message: Any, interval: Any = 0.0, **_: Any) -> None:
        if isinstance(message, list | tuple):
            for key in message:
                self.press(key, interval=interval)
            return
        if not isinstance(message, str):
            raise InvalidArgument(f"{self.where}message must be a string or a list of key names, not {message!r}")
        bad = next((c for c in message if not c.isprintable() and c not in "\n\r\t"), None)
        if bad is not None:
            raise InvalidArgument(f"{self.where}the control character {bad!r} cannot be typed; press a key instead")
        if message:
            self.add(TypeText(text=message, interval_ms=min(1000, max(0, round(float(interval) * 1000)))))

    def press(self, keys: Any, presses: Any = 1, interval: Any = 0.0, **_: Any) -> None:
        names = [keys] if isinstance(keys, str) else keys
        if not isinstance(names, list | tuple) or not isinstance(presses, int) or presses < 0:
            raise InvalidArgument(
                f"{self.where}press takes a key or a list of keys and a count, not {keys!r}, {presses!r}"
            )
        for n in range(presses):
            for i, name in enumerate(names):
                self.add(Key(key=x_key(name, where=self.where)))
                if interval and (n < presses - 1 or i < len(names) - 1):
                    self.sleep(interval)

    def hotkey(self, *keys: Any, **kwargs: Any) -> None:
        unknown = set(kwargs) - {"interval", "logScreenshot", "_pause"}
        if unknown:
            raise InvalidArgument(f"{self.where}unexpected keyword argument {sorted(unknown)[0]!r}")
        if len(keys) == 1 and isinstance(keys[0], list | tuple):
            keys = tuple(keys[0])
        if not keys:
            raise InvalidArgument(f"{self.where}needs at least one key")
        self.add(Hotkey(keys=[x_key(k, where=self.where) for k in keys]))

    def sleep(self, seconds: Any) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise InvalidArgument(f"{self.where}seconds must be a non-negative number, not {seconds!r}")
        left = float(seconds)
        while left > 0:
            part = min(left, _MAX_WAIT)
            self.add(Wait(seconds=part))
            left -= part


def _describe(node_type: str) -> str:
    names = {
        "For": "a for loop", "While": "a while loop", "If": "an if statement", "FunctionDef": "a function definition",
        "ImportFrom": "from-import", "With": "a with statement", "Assign": "an assignment", "Try": "a try statement",
        "Name": "a bare name", "Attribute": "attribute access", "Constant": "a bare literal",
        "ClassDef": "a class definition", "Lambda": "a lambda", "AugAssign": "an assignment",
    }  # fmt: skip
    return names.get(node_type, f"a {node_type} statement")
