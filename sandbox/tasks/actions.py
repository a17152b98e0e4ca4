"""Episode action lists (a task's reference solution ``<id>.solution.jsonl``, ``sandbox task run --actions``): one
JSON object a line, each a platform action (:data:`sandbox.models.Action`): ``{"type": "exec", "cmd": ...}``,
``{"type": "click", ...}``, an OSWorld pyautogui string ``{"type": "pyautogui", "code": "..."}`` or one of
OSWorld's special actions ``{"type": "DONE"}``, ``{"type": "FAIL"}``, ``{"type": "WAIT"}``. Blank lines are
skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from sandbox.errors import InvalidArgument
from sandbox.models import Action
from sandbox.tasks.pyautogui import Special, translate

_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)
_SPECIAL: dict[str, Special] = {"done": "DONE", "fail": "FAIL"}


def parse_action(data: Any) -> Action:
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidArgument(f"not an action: {where + ': ' if where else ''}{first['msg']}") from None


def load_actions(path: str | Path) -> list[Action]:
    """The actions of a JSONL file; :class:`InvalidArgument` naming the line of the first bad one."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InvalidArgument(f"cannot read the actions file {path}: {e.strerror or e}") from None
    actions = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            actions.append(parse_action(json.loads(line)))
        except (ValueError, InvalidArgument) as e:
            raise InvalidArgument(f"{path}:{number}: {e}") from None
    return actions


def expand(action: Action, *, screen: tuple[int, int]) -> list[Action] | Special:
    """The actions the agent performs for one episode action (pyautogui code translated), or the special action
    (``"DONE"``/``"FAIL"``) that ends the episode."""
    if action.type in _SPECIAL:
        return _SPECIAL[action.type]
    if action.type == "pyautogui":
        return translate(str(getattr(action, "code", "")), screen=screen)
    return [action]
